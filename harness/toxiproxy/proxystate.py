"""State of the embedded server: a proxy (:class:`ProxyState`) and its toxics (:class:`ToxicState`)."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Any

from harness.redact import protect_logger
from harness.toxiproxy.conn import Conn
from harness.toxiproxy.limits import ApiError, is_loopback, json_number, parse_listen
from harness.toxiproxy.link import STREAM_LIMIT
from harness.toxiproxy.models import STREAMS

if TYPE_CHECKING:
    from harness.toxiproxy.api import ToxiproxyServer

log = protect_logger(logging.getLogger("harness.toxiproxy.server"))  # no password in a log line (harness.redact)


class ToxicState:
    """A toxic of a proxy. ``generation`` changes on every update (toxicity draws are redone)."""

    _generations = 0

    def __init__(self, name: str, type_: str, stream: str, toxicity: float,
                 attributes: dict[str, int]) -> None:
        self.name = name
        self.type = type_
        self.stream = stream
        self.toxicity = toxicity
        self.attributes = attributes
        self.generation = self._next_generation()

    @classmethod
    def _next_generation(cls) -> int:
        cls._generations += 1
        return cls._generations

    def touch(self) -> None:
        """Mark the toxic as changed."""
        self.generation = self._next_generation()

    def attr(self, key: str) -> int:
        """An attribute (0 when unset)."""
        return int(self.attributes.get(key, 0))

    def to_json(self) -> dict[str, Any]:
        """API JSON form, in the real server's key order (toxicity ``1``, not ``1.0``, like Go)."""
        return {"attributes": dict(self.attributes), "name": self.name, "type": self.type,
                "stream": self.stream, "toxicity": json_number(self.toxicity)}


class ProxyState:
    """A proxy: its configuration, its listener, its toxics and its live connections."""

    def __init__(self, server: ToxiproxyServer, name: str, listen: str, upstream: str,
                 node: str | None) -> None:
        self.server = server
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.node = node
        self.enabled = False
        self.toxics: dict[str, ToxicState] = {}
        self.listener: asyncio.base_events.Server | None = None
        self.conns: set[Conn] = set()

    def chain(self, stream: str) -> list[ToxicState]:
        """The toxics of one direction, in the order they were added."""
        return [t for t in self.toxics.values() if t.stream == stream]

    def to_json(self) -> dict[str, Any]:
        """API JSON form (``node`` is the embedded server's extension)."""
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled,
                "toxics": [t.to_json() for s in STREAMS for t in self.chain(s)],
                "node": self.node}

    async def start(self) -> None:
        """Bind ``listen`` (port 0 -> a free port, written back into ``listen``) and accept.

        ``listen`` was checked by :func:`~harness.toxiproxy.limits.parse_listen`: an empty host
        binds loopback; only IP addresses are bound (no name lookups)."""
        if self.enabled:
            return
        host, port = parse_listen(self.listen)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
            family, type_, proto, _, addr = infos[0]
            sock = socket.socket(family, type_, proto)
        except OSError as exc:
            raise ApiError(500, f"listen tcp {self.listen}: {exc.strerror or exc}") from exc
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(1024)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            detail = (exc.strerror or str(exc)).lower()
            raise ApiError(500, f"listen tcp {self.listen}: bind: {detail}") from exc
        bound = sock.getsockname()
        self.listen = f"[{bound[0]}]:{bound[1]}" if family == socket.AF_INET6 else f"{bound[0]}:{bound[1]}"
        if not is_loopback(host):
            log.warning("proxy %s listens on %s: any host that can reach this machine on that address "
                        "can connect through it", self.name, self.listen)
        self.listener = await asyncio.start_server(self._accept, sock=sock, limit=STREAM_LIMIT)
        self.enabled = True

    def stop(self, reason: str) -> None:
        """Close the listener and every connection (``conn.closed`` by proxy, ``reason``)."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        self.enabled = False
        for conn in list(self.conns):
            conn.close("proxy", reason)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.enabled:  # raced with a disable
            writer.transport.abort()
            return
        conn = Conn(self, reader, writer)
        self.conns.add(conn)
        await conn.run()

    def toxics_changed(self, removed: ToxicState | None = None) -> None:
        """Apply a toxic change to every established connection."""
        for conn in list(self.conns):
            conn.toxics_changed(removed)
