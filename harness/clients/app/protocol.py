"""The client protocol of the app profile (APP rules): an application-side pool the harness drives
requests through. An adapter wraps one pool library configured as an application would; the harness
records each request with the connection the pool handed out (its local address, which the fault
proxy sees as the client of that connection)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: SQL of the requests (the key table of DUR-1, created by the workload).
TABLE = "fh_keys"
WRITE_SQL = f"INSERT INTO {TABLE} (k, process) VALUES (%s, %s)"
READ_SQL = f"SELECT count(*) FROM {TABLE} WHERE k >= %s"


@dataclass(frozen=True)
class AppTarget:
    """Where the pool connects: every node's client address (through the fault proxy), database and
    credentials; :attr:`dsn` and :attr:`url` are the same target as a libpq string and as a URL."""

    hosts: tuple[tuple[str, int], ...]
    dbname: str
    user: str
    password: str
    connect_timeout: int = 2

    @property
    def dsn(self) -> str:
        """libpq keyword string with a host list and ``target_session_attrs=read-write``."""
        return (f"host={','.join(h for h, _ in self.hosts)} port={','.join(str(p) for _, p in self.hosts)} "
                f"dbname={self.dbname} user={self.user} password={self.password} "
                f"target_session_attrs=read-write connect_timeout={self.connect_timeout}")

    @property
    def url(self) -> str:
        """``postgresql://user:password@h1:p1,h2:p2/db?target_session_attrs=read-write``."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.hosts)
        return f"postgresql://{self.user}:{self.password}@{hosts}/{self.dbname}?target_session_attrs=read-write"


@dataclass(frozen=True)
class PoolSettings:
    """What the APP rules need to know of a pool (recorded as ``app.pool``): its maximum size and
    documented overflow (APP-5), whether it validates at checkout (APP-4) and the recovery bound its
    documented settings imply (APP-1's default)."""

    pool: str
    max_size: int
    overflow: int
    validates: bool
    recovery_s: float
    library: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class RequestFailed(Exception):
    """A request that did not succeed: ``outcome`` is ``fail`` (certainly no effect) or ``info``
    (a write whose outcome is unknown); ``conn`` the connection's local address if one was handed out."""

    def __init__(self, error: str, conn: str | None = None, outcome: str = "fail") -> None:
        super().__init__(error)
        self.conn, self.outcome = conn, outcome


@runtime_checkable
class AppPool(Protocol):
    """One application pool under test; ``request`` is called from several threads at once."""

    settings: PoolSettings

    def request(self, f: str, key: int, process: str) -> str | None:
        """Run one short transaction: ``f="write"`` inserts ``key``, ``f="read"`` reads; return the
        local address of the connection used, or raise :class:`RequestFailed`."""

    def close(self) -> None:
        """Close the pool and every connection it holds."""


def local_address_of_fd(fd: int) -> str | None:
    """``host:port`` of a connected TCP socket given its file descriptor (None if it has none)."""
    if fd is None or fd < 0:
        return None
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None
    try:
        host, port = sock.getsockname()[:2]
        return f"{host}:{port}"
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def one_line(exc: BaseException) -> str:
    """``Type: first line`` of an exception."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
