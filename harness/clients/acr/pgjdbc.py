"""pgjdbc (the PostgreSQL JDBC driver) with the group's members as a multi-host URL, judged as an ACR
client (``--client pgjdbc`` of profile ``acr``; docs/acr.md, RULEBOOK ACR-1…9).

The driver runs in the GENERIC JDBC helper of the LPQ profile
(:func:`harness.clients.lpq.jdbc.start_jdbc_helper`, JSON lines, docs/clients.md) with Debian's
``/usr/share/java/postgresql.jar`` (``FAILOVER_HARNESS_PGJDBC`` overrides). pgjdbc offers no automatic
client reroute: ``jdbc:postgresql://m1,m2,m3,group/db`` with ``targetServerType=any`` only chooses
where to *connect* (hosts in order, the group-wide address last because it is listed last). Only
pgjdbc's own options are used, nothing of the adapter's own (no retry):

* ``connectTimeout`` from ``connect_timeout`` (the TCP connect per host, whole seconds, at least 1);
* ``loginTimeout`` only from ``login_timeout`` (unset: pgjdbc's default, none). pgjdbc's login
  timeout bounds the WHOLE attempt over every host *including the JVM's own work* (class loading,
  SCRAM): measured on the loaded 2-core machine (load 11-14), a first connect of a fresh helper took
  2.4-12 s, so a login timeout derived from the suites' ``connect_timeout=2`` judged the machine,
  not the driver;
* ``socketTimeout`` from ``receive_timeout`` (ACR-9; whole seconds, at least 1; unset: none);
* ``Statement.setQueryTimeout`` from ``query_timeout`` (ACR-9; whole seconds, at least 1);
* ``cancel()`` is ``Statement.cancel()`` of the running statement (pgjdbc's cancel request).

Outcome classes, as :mod:`harness.clients.acr.psycopg_multihost` maps psycopg's:

* ``connect`` opens at once (pgjdbc is not lazy) and runs with ``autoCommit=false`` (a transaction
  begins with the first statement, as in psycopg);
* an error whose SQLSTATE is of class ``08`` (connection exception: pgjdbc's 08001 / 08006 / 08003)
  is :class:`~harness.errors.Sql30081N` (*communication-error*: there is no SQLSTATE 08506 and no
  reroute); the next statement opens a new connection with the same URL (the application's
  reconnect). Nothing replays the ``SET`` statements: pgjdbc does not track them;
* any other error (e.g. 57014 after a cancel or a query timeout) is :class:`PgjdbcSqlError`
  (*sql-error*) carrying pgjdbc's SQLSTATE.

Options the ACR suites pass to the reference client (``seamless``, ``max_acr_retries`` …) are
accepted and ignored: pgjdbc has no such settings."""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.clients.lpq.helper import HelperError
from harness.clients.lpq.jdbc import PGJDBC_JAR, start_jdbc_helper
from harness.errors import AcrClientError, Sql30081N
from harness.topology.acr import AcrSpec

#: SQLSTATE class of pgjdbc's connection exceptions (mapped onto SQL30081N).
CONNECTION_CLASS = "08"


class PgjdbcSqlError(AcrClientError):
    """An SQL error pgjdbc raised for the statement itself (outcome class *sql-error*)."""

    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate or ""


def _seconds(value: float | None) -> int | None:
    return None if value is None else max(1, math.ceil(value))


class PgjdbcAcrClient:
    """The adapter (see the module docstring)."""

    mode = "seamless"  # it claims nothing; judged as the DB2 default

    def __init__(self, history: Any = None, process: Any = None, *, connect_timeout: float = 2.0,
                 receive_timeout: float | None = None, query_timeout: float | None = None,
                 login_timeout: float | None = None, **ignored: Any) -> None:
        self.history = history
        self.process = process or "app"
        self.connect_timeout = connect_timeout
        self.receive_timeout = receive_timeout
        self.query_timeout = query_timeout
        self.login_timeout = login_timeout
        self.ignored = sorted(ignored)
        jar = os.environ.get("FAILOVER_HARNESS_PGJDBC", PGJDBC_JAR)
        self.helper = start_jdbc_helper([str(Path(jar).resolve())], name="pgjdbc-acr",
                                        driver_class="org.postgresql.Driver")
        self.driver = f"pgjdbc {self.helper.hello.get('driver_version')} (Java {self.helper.hello.get('java')})"
        self._connections: list[PgjdbcAcrConnection] = []

    def url(self, spec: AcrSpec) -> str:
        """``jdbc:postgresql://m1,m2,m3,group/db`` (members in configured order, the group-wide address last)."""
        addresses = [*spec.members, spec.group_address]
        return f"jdbc:postgresql://{','.join(f'{m.host}:{m.port}' for m in addresses)}/{spec.dbname}"

    def properties(self, spec: AcrSpec) -> dict[str, str]:
        """pgjdbc's connection properties (hold the password: never print them)."""
        props = {"user": spec.user, "password": spec.password, "ApplicationName": spec.application_name,
                 "targetServerType": "any", "connectTimeout": str(_seconds(self.connect_timeout))}
        if self.login_timeout is not None:
            props["loginTimeout"] = str(_seconds(self.login_timeout))
        if self.receive_timeout is not None:
            props["socketTimeout"] = str(_seconds(self.receive_timeout))
        return props

    def connect(self, spec: AcrSpec) -> PgjdbcAcrConnection:
        """Open a pgjdbc connection over every member, then the group-wide address."""
        conn = PgjdbcAcrConnection(self, spec)
        self._connections.append(conn)
        conn.open()
        return conn

    def shutdown(self) -> None:
        """Close every connection, then stop the helper."""
        for conn in self._connections:
            with contextlib.suppress(HelperError):
                conn.close()
        self.helper.close()


class PgjdbcAcrConnection:
    """One application connection of the adapter."""

    def __init__(self, client: PgjdbcAcrClient, spec: AcrSpec) -> None:
        self.client = client
        self.spec = spec
        self._handle: int | None = None
        self._lock = threading.Lock()

    def open(self) -> None:
        """A new pgjdbc connection with ``autoCommit=false`` (SQL30081N when no host answers)."""
        helper = self.client.helper
        reply = helper.call("open", url=self.client.url(self.spec), properties=self.client.properties(self.spec))
        if not reply.get("ok"):
            raise Sql30081N("multi-host", "connect", reason=str(reply.get("error")))
        handle = int(reply["conn"])
        reply = helper.call("autocommit", conn=handle, value=False)
        if not reply.get("ok"):
            helper.call("close", conn=handle, timeout=10)
            raise Sql30081N("multi-host", "connect", reason=str(reply.get("error")))
        self._handle = handle

    def _call(self, op: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            if self._handle is None:
                self.open()
            handle = self._handle
            reply = self.client.helper.call(op, conn=handle, **fields)
            if reply.get("ok"):
                return reply
            sqlstate = reply.get("sqlstate") or ""
            if sqlstate.startswith(CONNECTION_CLASS):
                self._handle = None
                with contextlib.suppress(HelperError):
                    self.client.helper.call("close", conn=handle, timeout=10)
                raise Sql30081N("multi-host", "recv", reason=f"{reply.get('error')} (SQLSTATE {sqlstate})")
            raise PgjdbcSqlError(str(reply.get("error")), sqlstate)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement in pgjdbc's transaction; all rows (text values). psycopg-style ``%s``
        placeholders become JDBC ``?`` (a PreparedStatement)."""
        fields: dict[str, Any] = {"sql": sql}
        if params is not None:
            fields = {"sql": sql.replace("%s", "?"), "params": list(params)}
        if self.client.query_timeout is not None:
            fields["query_timeout"] = _seconds(self.client.query_timeout)
        return [tuple(r) for r in self._call("execute", **fields).get("rows") or []]

    def commit(self) -> None:
        """``Connection.commit``."""
        if self._handle is not None:
            self._call("commit")

    def rollback(self) -> None:
        """``Connection.rollback``."""
        if self._handle is not None:
            self._call("rollback")

    def cancel(self) -> None:
        """``Statement.cancel()`` of the running statement (ACR-9; pgjdbc sends a cancel request to the
        same host). Waits at most 3 s for the helper's reply (a black-holed member may never answer)."""
        handle = self._handle
        if handle is not None:
            with contextlib.suppress(HelperError):
                self.client.helper.call("cancel", conn=handle, timeout=3.0)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self.client.helper.call("close", conn=handle, timeout=10)


def pgjdbc(history: Any = None, process: Any = None, **options: Any) -> PgjdbcAcrClient:
    """The ``pgjdbc`` factory of profile ``acr``."""
    return PgjdbcAcrClient(history, process, **options)
