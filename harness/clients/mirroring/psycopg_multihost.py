"""Adapter of a real client: psycopg 3 multi-host connection strings, the way a PostgreSQL user
would express ``Server=A; Failover Partner=B`` (profile ``mirroring``, name ``psycopg-multihost``).

The :class:`ConnectionSpec` becomes ``host=A,B port=pA,pB dbname=D target_session_attrs=read-write
connect_timeout=N`` with ``N = max(2, ceil(login timeout))`` - per host, as a user would write it
(libpq's minimum is 2 s; no ``connect_timeout`` when the spec has no login timeout). The driver then
tries each host once, in order, each with the whole ``connect_timeout``; a standby is skipped
because of ``target_session_attrs``; there is no alternation, no growing retry time, no retry delay
and no cache of the failover partner.

What it records: ``op.invoke``/``op.ok``/``op.fail`` for ``open``, ``execute`` and ``close``. It
**cannot** see its per-host attempts (psycopg makes them internally), so it records no
``attempt.*`` events; the checkers judge it from the fault proxies' ``conn.*`` events, where its
known behaviour shows up as rule verdicts - e.g. MIR-5 violated (a black-holed first host held
``connect_timeout`` instead of 8 % of LT) and MIR-4 violated (each host once, then give up before the
login timeout) - never as harness errors. ``op.ok``'s ``presented_server`` is the host psycopg
reports (``conn.info.host:port``), so a redirected connection presents the failover partner (MIR-12).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from harness.clients.mirroring.protocol import (
    ConnectionOpenError,
    Recorder,
    close_quietly,
    parse_recorded,
    recorded_close,
    recorded_execute,
    spec_value,
)
from harness.rules.connstring import ConnectionSpec

MIN_CONNECT_TIMEOUT = 2


def multihost_conninfo(spec: ConnectionSpec, *, redact: bool = False, **extra: Any) -> str:
    """The libpq connection string a user would write for ``spec`` (see the module docstring);
    ``redact=True`` writes ``***`` for the password (for the history)."""
    hosts = [spec.initial] + ([spec.failover] if spec.failover is not None else [])
    params: dict[str, Any] = {
        "host": ",".join(a.host for a in hosts),
        "port": ",".join(str(a.port) for a in hosts),
        "dbname": spec.database,
        "target_session_attrs": "read-write",
    }
    if spec.login_timeout is not None:
        params["connect_timeout"] = max(MIN_CONNECT_TIMEOUT, math.ceil(spec.login_timeout))
    if spec.user is not None:
        params["user"] = spec.user
    if spec.password is not None:
        params["password"] = "***" if redact else spec.password
    params.update(extra)
    return make_conninfo("", **params)


class MultiHostConnection:
    """A psycopg connection opened from a multi-host string (autocommit)."""

    def __init__(self, client: PsycopgMultiHostClient, conn: psycopg.Connection) -> None:
        self._client = client
        self._conn = conn
        self._lock = threading.Lock()

    @property
    def presented_server(self) -> str:
        """What psycopg says it is connected to (``host:port`` of the host that answered)."""
        return f"{self._conn.info.host}:{self._conn.info.port}"

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement; a broken connection raises :class:`ConnectionLostError`."""
        return recorded_execute(self._client.recorder, self._conn, self._lock, sql, params,
                                f"connection to {self.presented_server} lost")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        recorded_close(self._client.recorder, self._conn)
        self._client._forget(self)


class PsycopgMultiHostClient:
    """psycopg 3 multi-host client under test. ``history``/``process``: where its own view goes;
    ``conninfo_extra``: more libpq parameters appended to the derived string."""

    def __init__(self, *, history: Any = None, process: Any = None, **conninfo_extra: Any) -> None:
        self.recorder = Recorder(history, process)
        self.conninfo_extra = dict(conninfo_extra)
        self._connections: list[MultiHostConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def process(self) -> Any:
        """The process id this client records under."""
        return self.recorder.process

    def open(self, spec: ConnectionSpec | str) -> MultiHostConnection:
        """Connect with the multi-host string derived from ``spec``."""
        rec = self.recorder
        spec, text = parse_recorded(rec, spec)
        op = rec.invoke("open", {**spec_value(spec, text),
                                 "conninfo": multihost_conninfo(spec, redact=True, **self.conninfo_extra)})
        if self._closed:
            rec.fail(op, "open", "client is shut down", reason="aborted")
            raise ConnectionOpenError("the client is shut down", reason="aborted")
        try:
            conn = psycopg.Connection.connect(multihost_conninfo(spec, **self.conninfo_extra),
                                              autocommit=True)
        except psycopg.OperationalError as exc:
            text_err = str(exc)
            reason = "timeout" if "timeout" in text_err.lower() else "error"
            rec.fail(op, "open", f"OperationalError: {text_err}", reason=reason)
            raise ConnectionOpenError(f"psycopg could not connect: {text_err.splitlines()[0]}",
                                      reason=reason) from exc
        wrapped = MultiHostConnection(self, conn)
        with self._lock:
            self._connections.append(wrapped)
        rec.ok(op, "open", {"presented_server": wrapped.presented_server,
                            "served_by": wrapped.presented_server})
        return wrapped

    def abort(self) -> None:
        """psycopg's blocking connect cannot be interrupted from another thread: a pending open runs
        to its own end (documented gap)."""

    def shutdown(self) -> None:
        """Close every connection and refuse further opens."""
        self._closed = True
        with self._lock:
            conns = list(self._connections)
        close_quietly(conns)

    def _forget(self, conn: MultiHostConnection) -> None:
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)


def psycopg_multihost(history: Any = None, process: Any = None, **options: Any) -> PsycopgMultiHostClient:
    """Factory of the ``psycopg-multihost`` client."""
    return PsycopgMultiHostClient(history=history, process=process, **options)
