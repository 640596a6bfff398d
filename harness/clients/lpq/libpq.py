"""The family's reference (profile ``lpq``, name ``reference`` = ``libpq``): libpq itself, called
through ``ctypes`` (``PQconnectdb`` with the host list as a libpq connection string). libpq *is*
what LPQ-1…6 document, so it is the column every other driver is compared with.

Which library: ``FAILOVER_HARNESS_LIBPQ`` (a path) if set, else the system ``libpq.so.5`` when it is
PostgreSQL 16 or newer (``load_balance_hosts``, LPQ-6), else the libpq shipped inside the
``psycopg-binary`` wheel (a real libpq build from PyPI). ``libpq-system`` is always the system one
(on Debian 12: libpq 15, which has no ``load_balance_hosts`` - its LPQ-6 cell reads *not offered*)."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from pathlib import Path
from typing import Any

from harness.clients.lpq.protocol import HostListAdapter, HostListClientError, HostListOpenError, HostListSpec
from harness.errors import ConfigError

CONNECTION_OK = 0
PGRES_COMMAND_OK, PGRES_TUPLES_OK = 1, 2
PG_DIAG_SQLSTATE = ord("C")


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.PQconnectdb.restype = ctypes.c_void_p
    lib.PQconnectdb.argtypes = [ctypes.c_char_p]
    for name in ("PQstatus", "PQntuples", "PQnfields", "PQresultStatus"):
        getattr(lib, name).restype = ctypes.c_int
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    for name in ("PQerrorMessage", "PQresultErrorMessage", "PQhost", "PQport"):
        getattr(lib, name).restype = ctypes.c_char_p
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    lib.PQexec.restype = ctypes.c_void_p
    lib.PQexec.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.PQgetvalue.restype = ctypes.c_char_p
    lib.PQgetvalue.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.PQgetisnull.restype = ctypes.c_int
    lib.PQgetisnull.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.PQresultErrorField.restype = ctypes.c_char_p
    lib.PQresultErrorField.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.PQfinish.argtypes = [ctypes.c_void_p]
    lib.PQclear.argtypes = [ctypes.c_void_p]
    lib.PQlibVersion.restype = ctypes.c_int
    return lib


def system_libpq() -> str:
    """The system libpq's file name (``libpq.so.5``)."""
    found = ctypes.util.find_library("pq")
    if not found:
        raise ConfigError("libpq is not installed (Debian: apt-get install libpq5)")
    return found


def wheel_libpq() -> str | None:
    """The libpq inside the installed psycopg-binary wheel, if any."""
    try:
        import psycopg_binary
    except ImportError:
        return None
    libs = Path(psycopg_binary.__file__).resolve().parent.parent / "psycopg_binary.libs"
    found = sorted(glob.glob(str(libs / "libpq-*.so*")))
    return found[-1] if found else None


def load(path: str) -> tuple[ctypes.CDLL, int]:
    """Load libpq from ``path``; returns it and its version number (e.g. 150018)."""
    try:
        lib = _bind(ctypes.CDLL(path))
    except OSError as exc:
        raise ConfigError(f"cannot load libpq from {path} ({exc}); set FAILOVER_HARNESS_LIBPQ to a libpq.so") from None
    return lib, int(lib.PQlibVersion())


def newest_libpq() -> str:
    """The reference's library (see the module docstring)."""
    env = os.environ.get("FAILOVER_HARNESS_LIBPQ")
    if env:
        return env
    system = system_libpq()
    if load(system)[1] >= 160000:
        return system
    return wheel_libpq() or system


def version_text(version: int) -> str:
    """150018 -> ``15.18``."""
    return f"{version // 10000}.{version % 10000}"


class LibpqClient(HostListAdapter):
    """libpq through ctypes: ``PQconnectdb(conninfo)``, ``PQexec``, ``PQfinish``."""

    def __init__(self, *, library: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.library = library or newest_libpq()
        self.lib, self.version = load(self.library)
        self.driver = f"libpq {version_text(self.version)} (C, ctypes)"
        self.random_order = self.version >= 160000

    def _connect(self, spec: HostListSpec) -> Any:
        conn = self.lib.PQconnectdb(spec.libpq_conninfo().encode())
        if not conn:
            raise HostListOpenError("libpq: out of memory")
        if self.lib.PQstatus(conn) != CONNECTION_OK:
            message = (self.lib.PQerrorMessage(conn) or b"").decode(errors="replace").strip()
            self.lib.PQfinish(conn)
            sqlstate = "28P01" if "password authentication failed" in message else None
            raise HostListOpenError(" | ".join(ln.strip() for ln in message.splitlines() if ln.strip())[:600],
                                    sqlstate=sqlstate, reason="timeout" if "timeout" in message else "error")
        return conn

    def _execute(self, handle: Any, sql: str) -> list[tuple[Any, ...]]:
        res = self.lib.PQexec(handle, sql.encode())
        try:
            status = self.lib.PQresultStatus(res)
            if status not in (PGRES_COMMAND_OK, PGRES_TUPLES_OK):
                msg = (self.lib.PQresultErrorMessage(res) or self.lib.PQerrorMessage(handle) or b"").decode(
                    errors="replace").strip()
                state = self.lib.PQresultErrorField(res, PG_DIAG_SQLSTATE) if res else None
                raise HostListClientError(msg.splitlines()[0] if msg else "libpq error",
                                          sqlstate=state.decode() if state else None)
            rows = []
            for r in range(self.lib.PQntuples(res)):
                rows.append(tuple(None if self.lib.PQgetisnull(res, r, c) else
                                  self.lib.PQgetvalue(res, r, c).decode() for c in range(self.lib.PQnfields(res))))
            return rows
        finally:
            if res:
                self.lib.PQclear(res)

    def _close(self, handle: Any) -> None:
        self.lib.PQfinish(handle)

    def _host(self, handle: Any) -> str | None:
        return f"{(self.lib.PQhost(handle) or b'').decode()}:{(self.lib.PQport(handle) or b'').decode()}"


def reference(history: Any = None, process: Any = None, **options: Any) -> LibpqClient:
    """Factory of ``reference`` / ``libpq``: the newest libpq at hand."""
    return LibpqClient(history=history, process=process, **options)


def libpq_system(history: Any = None, process: Any = None, **options: Any) -> LibpqClient:
    """Factory of ``libpq-system``: the system's libpq (Debian's libpq5)."""
    return LibpqClient(history=history, process=process, library=system_libpq(), **options)
