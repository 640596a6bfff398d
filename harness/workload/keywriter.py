"""A durability workload: one or more sessions insert ever-increasing keys, each recorded as an
operation (``f="write"``); afterwards one read of every key present on the principal
(``f="read_all"``) lets the DUR-1 checker find acknowledged writes that were lost.

Outcome classes (Jepsen): a write whose COMMIT was acknowledged is ``ok``; one that certainly did not
happen (no connection, rejected before sending) is ``fail``; one whose connection broke after the
statement was sent is ``info`` - its outcome is unknown and DUR-1 does not count it."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pymysql

from harness.workload import mysql

TABLE = "fh_keys"
_op_ids = itertools.count(1)


def _record(history: Any, type_: str, **fields: Any) -> None:
    if history is not None:
        history.record(type_, **fields)


MYSQL_ENGINES = ("mariadb",)


def ensure_table(dsn: str, engine: str = "postgres") -> None:
    """Create the key table on the principal reached by ``dsn`` (idempotent); ``engine`` says which
    protocol it speaks (``postgres``, ``mariadb``)."""
    if engine in MYSQL_ENGINES:
        conn = mysql.connect(dsn, timeout=5)
        try:
            mysql.execute(conn, f"CREATE TABLE IF NOT EXISTS {TABLE} (k bigint PRIMARY KEY, process varchar(64), "
                                "at timestamp(6) DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB")
        finally:
            conn.close()
        return
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (k bigint PRIMARY KEY, process text, at timestamptz "
                     f"DEFAULT now())")


class KeyWriter:
    """Background session writing keys ``start, start+step, ...`` through ``dsn()`` (called before
    every new connection, so it can follow the principal), recording every operation (DUR-1)."""

    def __init__(self, dsn: Callable[[], str] | str, history: Any = None, process: str = "writer-1",
                 start: int = 1, step: int = 1, pause: float = 0.0, retry_delay: float = 0.01,
                 engine: str = "postgres") -> None:
        self.engine = engine
        self._dsn = dsn if callable(dsn) else (lambda: dsn)
        self.history = history
        self.process = process
        self._keys = itertools.count(start, step)
        self.pause = pause
        self.retry_delay = retry_delay
        self.acknowledged: list[int] = []
        self.failed = 0
        self.indeterminate = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"keywriter-{process}", daemon=True)

    def start(self) -> KeyWriter:
        """Create the key table if needed, then start writing in the background."""
        ensure_table(self._dsn(), self.engine)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30) -> None:
        """Stop writing and wait for the session to end."""
        self._stop.set()
        self._thread.join(timeout)

    def __enter__(self) -> KeyWriter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        """Write keys until stopped, each one recorded as an operation (DUR-1): ``op.ok`` once the
        autocommit INSERT was acknowledged, ``op.fail`` when it certainly did not happen (no
        connection, refused by the server), ``op.info`` when the connection broke after it was sent."""
        proto = _protocol(self.engine)
        conn: Any = None
        while not self._stop.is_set():
            key = next(self._keys)
            op_id = next(_op_ids)
            _record(self.history, "op.invoke", process=self.process, op_id=op_id, f="write", value=key)
            if conn is None:
                try:
                    conn = proto.connect(self._dsn())
                except proto.connect_errors as exc:
                    self.failed += 1
                    _record(self.history, "op.fail", process=self.process, op_id=op_id, f="write", value=key,
                            error=_one_line(exc))
                    self._stop.wait(self.retry_delay)
                    continue
            try:
                proto.insert(conn, key, self.process)
            except proto.write_errors as exc:
                kind = proto.outcome(conn, exc)
                if kind == "fail":
                    self.failed += 1
                else:
                    self.indeterminate += 1
                _record(self.history, f"op.{kind}", process=self.process, op_id=op_id, f="write", value=key,
                        error=_one_line(exc))
                proto.close(conn)
                conn = None
                self._stop.wait(self.retry_delay)
                continue
            self.acknowledged.append(key)
            _record(self.history, "op.ok", process=self.process, op_id=op_id, f="write", value=key)
            if self.pause:
                self._stop.wait(self.pause)
        if conn is not None:
            proto.close(conn)


@dataclass(frozen=True)
class _Protocol:
    """How :class:`KeyWriter` talks to one engine's protocol (DUR-1's writes)."""

    connect: Callable[[str], Any]  # a new autocommit connection
    insert: Callable[[Any, int, str], None]  # INSERT one key
    close: Callable[[Any], None]  # close, raising nothing
    connect_errors: tuple[type[BaseException], ...]  # a failed connect: op.fail
    write_errors: tuple[type[BaseException], ...]  # a failed INSERT: outcome() says fail or info
    outcome: Callable[[Any, BaseException], str]  # "fail" (certainly no effect) or "info" (unknown)
    read_keys: Callable[[str], list[int]]  # every key present, for final_read
    read_errors: tuple[type[BaseException], ...]  # a failed read: retried until the deadline


def _protocol(engine: str) -> _Protocol:
    """The protocol ``engine``'s servers speak (DUR-1's writes and final read)."""
    return _MYSQL if engine in MYSQL_ENGINES else _POSTGRES


def _pg_connect(dsn: str) -> psycopg.Connection:
    # no server-side prepared statements: poolers in transaction mode mix them up
    return psycopg.connect(dsn, autocommit=True, connect_timeout=2, prepare_threshold=None)


def _pg_insert(conn: psycopg.Connection, key: int, process: str) -> None:
    conn.execute(f"INSERT INTO {TABLE} (k, process) VALUES (%s, %s)", (key, process))


def _pg_outcome(conn: psycopg.Connection, exc: BaseException) -> str:
    """The server answered with an error (the autocommit statement certainly did not take effect:
    fail), or the connection broke after the statement was sent (the commit may or may not have
    happened: info). ValueError: a driver confused by a pooler."""
    definite = not (conn.broken or conn.closed or isinstance(exc, psycopg.OperationalError))
    definite = definite or isinstance(exc, psycopg.errors.ReadOnlySqlTransaction)
    return "fail" if definite else "info"


def _pg_read_keys(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
        return [r[0] for r in conn.execute(f"SELECT k FROM {TABLE} ORDER BY k").fetchall()]


def _mysql_insert(conn: Any, key: int, process: str) -> None:
    mysql.execute(conn, f"INSERT INTO {TABLE} (k, process) VALUES (%s, %s)", (key, process))


def _read_keys_mysql(dsn: str) -> list[int]:
    conn = mysql.connect(dsn, timeout=2)
    try:
        return [int(r[0]) for r in mysql.execute(conn, f"SELECT k FROM {TABLE} ORDER BY k")]
    finally:
        mysql._close(conn)


_POSTGRES = _Protocol(connect=_pg_connect, insert=_pg_insert, close=lambda conn: conn.close(),
                      connect_errors=(psycopg.Error,), write_errors=(psycopg.Error, ValueError),
                      outcome=_pg_outcome, read_keys=_pg_read_keys, read_errors=(psycopg.Error,))
#: PyMySQL, autocommit
_MYSQL = _Protocol(connect=lambda dsn: mysql.connect(dsn, timeout=2), insert=_mysql_insert, close=mysql._close,
                   connect_errors=(pymysql.MySQLError,), write_errors=(pymysql.MySQLError, OSError),
                   outcome=lambda conn, exc: mysql.outcome_of(exc), read_keys=_read_keys_mysql,
                   read_errors=(pymysql.MySQLError,))


def final_read(dsn: str, history: Any = None, process: str = "checker", timeout: float = 30,
               engine: str = "postgres") -> list[int]:
    """Read every key present on the principal reached by ``dsn`` (retrying until it answers) and
    record it as ``op.ok f=read_all`` for the DUR-1 checker."""
    op_id = next(_op_ids)
    _record(history, "op.invoke", process=process, op_id=op_id, f="read_all", value=None)
    deadline = time.monotonic() + timeout
    proto = _protocol(engine)
    while True:
        try:
            keys = proto.read_keys(dsn)
            _record(history, "op.ok", process=process, op_id=op_id, f="read_all", value=keys)
            return keys
        except proto.read_errors as exc:
            if time.monotonic() >= deadline:
                _record(history, "op.fail", process=process, op_id=op_id, f="read_all", error=_one_line(exc))
                raise
            time.sleep(0.05)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
