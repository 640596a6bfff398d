"""psycopg (libpq) with the group's members as a multi-host connection string, judged as an ACR
client (``--client psycopg-multihost`` of profile ``acr``; docs/acr.md).

libpq offers no automatic client reroute: ``host=m1,m2,m3,group`` only chooses where to *connect*
(LPQ-1/2: hosts in order, the group-wide address last because it is listed last). What the adapter
does, as an application on psycopg would:

* ``connect`` opens at once (libpq is not lazy; ACR-7 expects it to be);
* a statement whose connection broke raises :class:`~harness.errors.Sql30081N` (outcome class
  *communication-error*: psycopg's ``OperationalError`` on a broken connection - there is no
  SQLSTATE 08506 and no reroute); the next statement opens a new connection with the same host
  list (the application's reconnect). Nothing replays the ``SET`` statements: psycopg does not
  track them;
* any other psycopg error is raised as it is (*sql-error*).

Options the ACR suites pass to the reference client (``seamless``, ``max_acr_retries`` …) are
accepted and ignored: libpq has no such settings (``connect_timeout`` is used)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

import psycopg

from harness.errors import Sql30081N
from harness.topology.acr import AcrSpec


class PsycopgMultiHostAcrClient:
    """The adapter (see the module docstring)."""

    mode = "seamless"  # it claims nothing; judged as the DB2 default

    def __init__(self, history: Any = None, process: Any = None, *, connect_timeout: float = 2.0,
                 **ignored: Any) -> None:
        self.history = history
        self.process = process or "app"
        self.connect_timeout = connect_timeout
        self.ignored = sorted(ignored)
        self._connections: list[PsycopgMultiHostAcrConnection] = []

    def connect(self, spec: AcrSpec) -> PsycopgMultiHostAcrConnection:
        """Open a psycopg connection over every member, then the group-wide address."""
        conn = PsycopgMultiHostAcrConnection(self, spec)
        self._connections.append(conn)
        conn.open()
        return conn

    def shutdown(self) -> None:
        """Close every connection."""
        for conn in self._connections:
            conn.close()


class PsycopgMultiHostAcrConnection:
    """One application connection of the adapter."""

    def __init__(self, client: PsycopgMultiHostAcrClient, spec: AcrSpec) -> None:
        self.client = client
        self.spec = spec
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def conninfo(self) -> str:
        """``host=…,… port=…,…`` over the members, then the group-wide address (holds the password)."""
        addresses = [*self.spec.members, self.spec.group_address]
        return (f"host={','.join(m.host for m in addresses)} port={','.join(str(m.port) for m in addresses)} "
                f"dbname={self.spec.dbname} user={self.spec.user} password={self.spec.password} "
                f"application_name={self.spec.application_name} "
                f"connect_timeout={max(2, round(self.client.connect_timeout))}")

    def open(self) -> None:
        """A new libpq connection (raises SQL30081N when no host answers)."""
        try:
            self._conn = psycopg.connect(self.conninfo())
        except psycopg.OperationalError as exc:
            raise Sql30081N("multi-host", "connect", reason=_line(exc)) from exc

    def _call(self, fn: Any) -> Any:
        with self._lock:
            if self._conn is None or self._conn.closed:
                self.open()
            conn = self._conn
            assert conn is not None
            try:
                return fn(conn)
            except psycopg.OperationalError as exc:
                if conn.broken or conn.closed:
                    self._conn = None
                    raise Sql30081N("multi-host", "recv", reason=_line(exc)) from exc
                raise

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement in psycopg's implicit transaction; all rows."""
        def run(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            cur = conn.execute(sql, params)
            return [tuple(r) for r in cur.fetchall()] if cur.description is not None else []
        return self._call(run)

    def commit(self) -> None:
        """psycopg ``commit``."""
        if self._conn is not None:
            self._call(lambda c: c.commit())

    def rollback(self) -> None:
        """psycopg ``rollback``."""
        if self._conn is not None:
            self._call(lambda c: c.rollback())

    def cancel(self) -> None:
        """psycopg ``cancel_safe`` (libpq's non-blocking cancel request through the same host; the
        blocking ``cancel()`` would hold the interpreter while a black-holed member never answers)."""
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.cancel_safe(timeout=2.0)

    def close(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


def _line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {' | '.join(lines[:2])}"


def psycopg_multihost(history: Any = None, process: Any = None, **options: Any) -> PsycopgMultiHostAcrClient:
    """The ``psycopg-multihost`` factory."""
    return PsycopgMultiHostAcrClient(history, process, **options)
