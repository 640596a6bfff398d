"""The OLTP workload's sessions over the MySQL protocol (docs/mariadb.md; PER-1..PER-8 on MariaDB): a
:class:`MySQLTrackedSession` records exactly the events a PostgreSQL
:class:`~harness.workload.oltp.TrackedSession` does (``session.open`` / ``reconnect`` / ``close``,
``op.*`` with ``conn``, ``front`` and ``conn_lost``, ``state.set`` / ``state.read``), so the PER
checkers judge both engines alike. Its connection is wrapped to offer the small psycopg-like surface
the OLTP operations use (``execute(...)`` returning a cursor, ``transaction()``)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pymysql
import pymysql.cursors

from harness.errors import ConfigError
from harness.workload import mysql
from harness.workload.oltp import LOADERS, SESSION_TYPES, TrackedSession, table_names


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
    """One application session over the MySQL protocol through the client under test (PER-1..8):
    :class:`TrackedSession`'s recording, with PyMySQL's connect, errors and socket."""

    connect_errors = (pymysql.MySQLError, OSError)
    op_errors = (pymysql.MySQLError, OSError, ValueError, AttributeError)

    def connect(self) -> Any:  # type: ignore[override]
        """Open the session's (next) front connection: ``session.open`` or ``session.reconnect``."""
        raw = mysql.connect(self._dsn(), timeout=self.connect_timeout, autocommit=self.autocommit)
        conn = MySQLConnection(raw)
        self._opened(conn, _front_of(conn), raw.thread_id())
        return conn

    @staticmethod
    def _shutdown(conn: Any) -> None:
        """Shut the socket down (the watchdog's ``op_timeout``)."""
        with contextlib.suppress(OSError, AttributeError):
            conn.raw._sock.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _close_quietly(conn: Any) -> None:
        """Close (:meth:`MySQLConnection.close` raises nothing)."""
        conn.close()

    @staticmethod
    def _lost(conn: Any) -> bool:
        return bool(conn.closed or conn.broken or conn.raw._sock is None)

    def _conn_lost_by(self, conn: Any, exc: BaseException) -> bool:
        """Lost when the error says the connection is gone (PyMySQL's 2006/2013 and kin) or the
        socket is."""
        return mysql.outcome_of(exc) == "info" or self._lost(conn)

    @staticmethod
    def _sqlstate(exc: BaseException) -> str | None:
        """PyMySQL reports no SQLSTATE."""
        return None

    def _drop_lost(self, conn: Any) -> None:
        """Mark the connection broken and close it (the next op reconnects, PER-1)."""
        conn.broken = True
        conn.close()

    def _after_failed_op(self, conn: Any) -> None:
        """Nothing to do: MySQL rolls back only the failed statement and the session stays usable
        (no aborted-transaction state as in PostgreSQL)."""

    def _statement(self, conn: Any, query: str, params: Any, prepare: bool | None) -> Any:
        """``prepare`` has no meaning for PyMySQL (text protocol)."""
        return conn.execute(query, params)

    @staticmethod
    def _cell(value: Any) -> Any:
        """Bytes as text (what the PostgreSQL session records for the same value)."""
        return _text(value)


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
