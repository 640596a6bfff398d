"""The OLTP workload's sessions over the MySQL protocol (issue 13; PER-1..PER-8 on MariaDB): a
:class:`MySQLTrackedSession` records exactly the events a PostgreSQL
:class:`~harness.workload.oltp.TrackedSession` does (``session.open`` / ``reconnect`` / ``close``,
``op.*`` with ``conn``, ``front`` and ``conn_lost``, ``state.set`` / ``state.read``), so the PER
checkers judge both engines alike. Its connection is wrapped to offer the small psycopg-like surface
the OLTP operations use (``execute(...)`` returning a cursor, ``transaction()``)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pymysql.cursors

from harness.errors import ConfigError
from harness.workload import mysql
from harness.workload.oltp import (
    _WATCHDOG,
    LOADERS,
    SESSION_TYPES,
    TrackedSession,
    _op_ids,
    _record,
    _safe,
    one_line,
    table_names,
)


class MySQLConnection:
    """A PyMySQL connection with the psycopg-like calls the workloads make."""

    def __init__(self, raw: pymysql.connections.Connection) -> None:
        self.raw = raw
        self.closed = False
        self.broken = False

    def execute(self, query: str, params: Any = None) -> Any:
        """Run one statement; returns the cursor (``fetchone``, ``rowcount``)."""
        cur = self.raw.cursor()
        cur.execute(query, params)
        return cur

    def cursor(self, unbuffered: bool = False) -> Any:
        """A cursor (``unbuffered``: rows are read from the socket as they are iterated, PER-6)."""
        return self.raw.cursor(pymysql.cursors.SSCursor if unbuffered else None)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN ... COMMIT (ROLLBACK on an exception)."""
        self.execute("BEGIN")
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.execute("ROLLBACK")
            raise
        self.execute("COMMIT")

    def fileno(self) -> int:
        """The socket's file descriptor."""
        sock = self.raw._sock
        if sock is None:
            raise OSError("connection closed")
        return sock.fileno()

    def close(self) -> None:
        """Close (no error if already broken); an unfinished unbuffered result is abandoned, not read
        from the closed socket."""
        self.closed = True
        result = getattr(self.raw, "_result", None)
        if result is not None:
            result.unbuffered_active = False
        with contextlib.suppress(Exception):
            self.raw.close()


def _front_of(conn: MySQLConnection) -> str:
    try:
        name = conn.raw._sock.getsockname()
        return f"{name[0]}:{name[1]}"
    except (OSError, AttributeError):
        return "?"


class MySQLTrackedSession(TrackedSession):
    """One application session over the MySQL protocol through the client under test (PER-1..8)."""

    connect_errors = (pymysql.MySQLError, OSError)

    @property
    def connected(self) -> bool:
        """True while the session holds a usable connection."""
        return self.conn is not None and not self.conn.closed and not self.conn.broken

    def connect(self) -> Any:  # type: ignore[override]
        """Open the session's (next) front connection: ``session.open`` or ``session.reconnect``."""
        raw = mysql.connect(self._dsn(), timeout=self.connect_timeout, autocommit=self.autocommit)
        conn = MySQLConnection(raw)
        previous = self.generation
        self.generation += 1
        self.conn = conn  # type: ignore[assignment]
        self.front = _front_of(conn)
        pid = raw.thread_id()
        if previous == 0:
            _record(self.history, "session.open", process=self.process, conn=self.generation, front=self.front,
                    backend_pid=pid)
        else:
            _record(self.history, "session.reconnect", process=self.process, conn=self.generation,
                    previous=previous, front=self.front, backend_pid=pid, error=self.last_error)
        return conn

    def interrupt(self, op_id: int | None = None) -> None:
        """Give up on the running operation (watchdog): shut the socket down."""
        conn = self.conn
        if op_id is not None and (op_id != self.current_op_id or self._busy_until is None):
            return
        self._busy_until = None
        if conn is None:
            return
        self._interrupted = True
        with contextlib.suppress(OSError, AttributeError):
            conn.raw._sock.shutdown(socket.SHUT_RDWR)  # type: ignore[attr-defined]

    def close(self) -> None:
        """Close the session (``session.close`` when it had a live connection)."""
        _WATCHDOG.remove(self)
        conn, self.conn = self.conn, None
        if conn is not None:
            live = not conn.closed and not conn.broken
            conn.close()
            if live:
                _record(self.history, "session.close", process=self.process, conn=self.generation)

    def op(self, f: str, body: Callable[[Any], Any], value: Any = None, *, write: bool = False,
           timeout: float | None = None) -> tuple[bool, Any]:
        """Run ``body(conn)`` as one recorded operation (as :meth:`TrackedSession.op`)."""
        op_id = next(_op_ids)
        if not self.connected:
            if self.conn is not None and not self.reconnect:
                _record(self.history, "op.invoke", process=self.process, op_id=op_id, f=f, value=value,
                        conn=self.generation, front=self.front)
                error = f"ConnectionLost: the session's connection is closed ({self.last_error})"
                _record(self.history, "op.fail", process=self.process, op_id=op_id, f=f, error=error,
                        sqlstate=None, conn_lost=True, conn=self.generation, front=self.front)
                self.failed += 1
                return False, error
            _record(self.history, "op.invoke", process=self.process, op_id=op_id, f=f, value=value,
                    conn=None, front=None)
            try:
                self.connect()
            except self.connect_errors as exc:
                self.failed += 1
                self.conn = None
                self.last_error = one_line(exc)
                _record(self.history, "op.fail", process=self.process, op_id=op_id, f=f, error=self.last_error,
                        sqlstate=None, conn_lost=True, conn=None, front=None, phase="connect")
                return False, self.last_error
        else:
            _record(self.history, "op.invoke", process=self.process, op_id=op_id, f=f, value=value,
                    conn=self.generation, front=self.front)
        conn = self.conn
        assert conn is not None
        limit = timeout if timeout is not None else self.op_timeout
        if limit is not None:
            _WATCHDOG.add(self)
            self._busy_until = time.monotonic() + limit
        self._interrupted = False
        self.current_op_id = op_id
        try:
            result = body(conn)
        except (pymysql.MySQLError, OSError, ValueError, AttributeError) as exc:
            self._busy_until = None
            lost = mysql.outcome_of(exc) == "info" or self._lost(conn)
            error = one_line(exc)
            if self._interrupted:
                error = f"client timeout after {limit} s: {error}"
            self.last_error = error
            self.failed += 1
            fields = dict(process=self.process, op_id=op_id, f=f, error=error, sqlstate=None,
                          conn_lost=bool(lost), conn=self.generation, front=self.front,
                          timed_out=self._interrupted)
            if lost:
                self.lost += 1
                conn.broken = True
                conn.close()
                _record(self.history, "op.info" if write else "op.fail", **fields)
            else:
                _record(self.history, "op.fail", **fields)
            return False, error
        self._busy_until = None
        self.ok += 1
        _record(self.history, "op.ok", process=self.process, op_id=op_id, f=f, value=_safe(result),
                conn=self.generation, front=self.front)
        return True, result

    @staticmethod
    def _lost(conn: Any) -> bool:
        return bool(conn.closed or conn.broken or conn.raw._sock is None)

    def execute(self, f: str, query: str, params: Any = None, *, write: bool = False, fetch: bool = True,
                timeout: float | None = None, prepare: bool | None = None) -> tuple[bool, Any]:
        """One statement as operation ``f``: ``op.ok`` value = the first column of the first row
        (``fetch``) or the row count. ``prepare`` has no meaning for PyMySQL (text protocol)."""
        def body(conn: MySQLConnection) -> Any:
            cur = conn.execute(query, params)
            if fetch and cur.description is not None:
                row = cur.fetchone()
                return None if row is None else _text(row[0])
            return cur.rowcount

        return self.op(f, body, value=query, write=write, timeout=timeout)


def _text(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode(errors="replace")
    if isinstance(value, int | float | str) or value is None:
        return value
    return str(value)


def load_tables(dsn: str, tables: int = 20, rows: int = 10_000) -> float:
    """The sysbench tables on MariaDB (``sbtest1..N``, filled from the ``seq_1_to_N`` sequence
    engine in one statement each); returns the seconds taken."""
    if tables < 1 or rows < 1:
        raise ConfigError(f"OLTP load needs tables >= 1 and rows >= 1, not {tables} x {rows}")
    t0 = time.monotonic()
    raw = mysql.connect(dsn, timeout=10)
    try:
        for name in table_names(tables):
            mysql.execute(raw, f"DROP TABLE IF EXISTS {name}")
            mysql.execute(raw, f"CREATE TABLE {name} (id integer PRIMARY KEY, k integer NOT NULL DEFAULT 0, "
                               "c char(120) NOT NULL DEFAULT '', pad char(60) NOT NULL DEFAULT '', KEY k_idx (k)) "
                               "ENGINE=InnoDB")
            mysql.execute(raw, f"INSERT INTO {name} (id, k, c, pad) SELECT seq, (seq * 7919) % {rows}, md5(seq), "
                               f"md5(seq + 1) FROM seq_1_to_{rows}")
    finally:
        raw.close()
    return time.monotonic() - t0


def create_table(dsn: str, name: str) -> str:
    """``DROP TABLE IF EXISTS name; CREATE TABLE name (k int)`` on the principal."""
    raw = mysql.connect(dsn, timeout=10)
    try:
        mysql.execute(raw, f"DROP TABLE IF EXISTS {name}")
        mysql.execute(raw, f"CREATE TABLE {name} (k int) ENGINE=InnoDB")
    finally:
        raw.close()
    return name


SESSION_TYPES["mariadb"] = MySQLTrackedSession
LOADERS["mariadb"] = load_tables
