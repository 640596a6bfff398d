"""The LPQ host list an application asks a driver for (RULEBOOK LPQ-1…6): hosts in order, database,
login, ``connect_timeout``, ``target_session_attrs``, ``load_balance_hosts``. It sits in the rules
layer (like the mirroring connection strings, :mod:`harness.rules.connstring`) so that clients and
workloads share it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: ``target_session_attrs`` values libpq documents (LPQ-4).
SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")


@dataclass(frozen=True)
class HostListSpec:
    """A libpq-style host list: what the application asks for (LPQ-1…6)."""

    hosts: tuple[tuple[str, int], ...]
    dbname: str
    user: str
    password: str | None = field(default=None, repr=False)  # never printed: no password in any output
    connect_timeout: float | None = None  # seconds per host (None: the driver's default)
    target_session_attrs: str = "any"
    load_balance_hosts: str = "disable"  # or "random" (PostgreSQL 16)

    def listen(self) -> list[str]:
        """The hosts as ``host:port`` (what the fault proxies' events call ``listen``)."""
        return [f"{h}:{p}" for h, p in self.hosts]

    def value(self) -> dict[str, Any]:
        """The ``op.invoke`` value of an open (no password)."""
        return {"hosts": self.listen(), "dbname": self.dbname, "user": self.user,
                "connect_timeout": self.connect_timeout, "target_session_attrs": self.target_session_attrs,
                "load_balance_hosts": self.load_balance_hosts}

    def libpq_conninfo(self, *, redacted: bool = False) -> str:
        """The libpq connection string for this spec (``password=***`` when ``redacted``)."""
        parts = {"host": ",".join(h for h, _ in self.hosts), "port": ",".join(str(p) for _, p in self.hosts),
                 "dbname": self.dbname, "user": self.user}
        if self.password is not None:
            parts["password"] = "***" if redacted else self.password
        if self.connect_timeout is not None:
            parts["connect_timeout"] = f"{self.connect_timeout:g}"
        if self.target_session_attrs != "any":
            parts["target_session_attrs"] = self.target_session_attrs
        if self.load_balance_hosts != "disable":
            parts["load_balance_hosts"] = self.load_balance_hosts
        return " ".join(f"{k}='{_quote(str(v))}'" for k, v in parts.items())


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")
