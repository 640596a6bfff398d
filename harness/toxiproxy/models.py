"""Data types of the Toxiproxy API v2: :class:`Proxy`, :class:`Toxic`, :class:`ConnEvent`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TOXIC_TYPES = ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer", "limit_data")
STREAMS = ("upstream", "downstream")


def split_hostport(address: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` too) into ``(host, port)``; raises ValueError if malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


@dataclass
class Toxic:
    """One toxic of a proxy, as the API shows it."""

    name: str
    type: str
    stream: str = "downstream"
    toxicity: float = 1.0
    attributes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Toxic:
        """Build from the API's JSON object (unknown keys are ignored)."""
        return cls(
            name=str(data.get("name", "")),
            type=str(data.get("type", "")),
            stream=str(data.get("stream", "downstream")),
            toxicity=float(data.get("toxicity", 1.0)),
            attributes=dict(data.get("attributes") or {}),
        )

    def to_json(self) -> dict[str, Any]:
        """The API's JSON object."""
        return {"name": self.name, "type": self.type, "stream": self.stream,
                "toxicity": self.toxicity, "attributes": dict(self.attributes)}


@dataclass
class Proxy:
    """One proxy as the API shows it. ``node`` is the embedded server's extension (None elsewhere)."""

    name: str
    listen: str
    upstream: str
    enabled: bool = True
    toxics: list[Toxic] = field(default_factory=list)
    node: str | None = None

    @property
    def listen_host(self) -> str:
        """Host part of ``listen``."""
        return split_hostport(self.listen)[0]

    @property
    def listen_port(self) -> int:
        """Port part of ``listen`` (the real port once the proxy has been bound)."""
        return split_hostport(self.listen)[1]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Proxy:
        """Build from the API's JSON object (unknown keys such as ``Logger`` are ignored)."""
        node = data.get("node")
        return cls(
            name=str(data.get("name", "")),
            listen=str(data.get("listen", "")),
            upstream=str(data.get("upstream", "")),
            enabled=bool(data.get("enabled", True)),
            toxics=[Toxic.from_json(t) for t in data.get("toxics") or []],
            node=None if node is None else str(node),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON object accepted by ``POST /proxies`` and ``/populate`` (``node`` only if set)."""
        out: dict[str, Any] = {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                               "enabled": self.enabled}
        if self.node is not None:
            out["node"] = self.node
        return out


@dataclass(frozen=True)
class ConnEvent:
    """A fault-proxy connection event (docs/events.md, ``conn.*``).

    ``seq`` is the server's event sequence number, ``t`` is ``time.monotonic()`` at the moment it
    happened, ``fields`` holds exactly the fields docs/events.md defines for ``type``."""

    seq: int
    t: float
    type: str
    fields: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The wire form used by ``GET /events``: ``{"seq", "t", "type", **fields}``."""
        return {"seq": self.seq, "t": self.t, "type": self.type, **self.fields}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConnEvent:
        """Inverse of :meth:`to_json`."""
        data = dict(data)
        return cls(seq=int(data.pop("seq")), t=float(data.pop("t")), type=str(data.pop("type")),
                   fields=data)
