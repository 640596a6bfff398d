"""How the MIR rules name a partner (RULEBOOK MIR-1 … MIR-13): a checker parameter (fault-proxy
name, node name or listen address ``host:port``) is matched against an event's ``proxy``, ``node``
and ``listen`` fields. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness.history.core import Event

PartnerNames = str | Sequence[str] | None

_LOCAL = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "::", ""}



def partner_names(value: PartnerNames) -> list[str]:
    """The names a ``initial`` / ``failover`` / ``principal`` parameter gives (MIR-1 … MIR-13)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _hostport(text: str) -> tuple[str, str] | None:
    """``(host, port)`` of ``host:port``, ``host,port`` or ``[v6]:port``; None for anything else."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return (host, rest.lstrip(":,"))
    for sep in (":", ","):
        if text.count(sep) == 1:
            host, _, port = text.partition(sep)
            if port.strip().isdigit():
                return host.strip().lower(), port.strip()
    return None


def same_partner(name: str, ident: str) -> bool:
    """Whether partner ``name`` is ``ident``: equal, or the same ``host:port`` (every local address
    counts as one host) - how all MIR rules tie a parameter to an event's proxy / node / address."""
    if name == ident:
        return True
    a, b = _hostport(name), _hostport(ident)
    if a is None or b is None or a[1] != b[1]:
        return False
    return a[0] == b[0] or (a[0] in _LOCAL and b[0] in _LOCAL)


def matches(name: str, ids: Iterable[str]) -> bool:
    """Whether partner ``name`` is any of ``ids`` (MIR-1 … MIR-13)."""
    return any(same_partner(name, i) for i in ids)


def event_ids(e: Event) -> frozenset[str]:
    """The names an event gives its partner: its ``proxy``, ``node`` and ``listen`` fields (MIR-1 … 13)."""
    return frozenset(str(e.get(k)) for k in ("proxy", "node", "listen") if e.get(k) is not None)
