"""A sysbench-like OLTP workload (RULEBOOK PER-1's measurement: 20 tables x 10,000 rows, 20 sessions)
driven through the client under test, with every operation recorded in the history.

* :func:`load_tables` creates ``sbtest1..N`` (``id`` primary key, ``k``, ``c``, ``pad``) and fills them
  with one ``INSERT ... SELECT generate_series`` per table (fast: ≈0.3 s for 20 x 10,000 rows).
* :class:`TrackedSession` is one application session: a psycopg connection through the client under
  test whose every operation is recorded as ``op.invoke`` then ``op.ok`` / ``op.fail`` / ``op.info``
  (``process`` = the session id), each carrying ``conn`` (the session's front-connection generation,
  1 for the first connection, +1 per reconnect) and ``front`` (the ``host:port`` of the application's
  own socket - independent of whatever backend the client routes to). A new connection is
  ``session.open`` (first) or ``session.reconnect`` (later; ``previous`` = the lost generation).
  So "the connection was kept" is observable: the same ``conn`` before and after a fault.
* :class:`OltpWorkload` runs N such sessions in threads doing point selects, updates and short
  transactions until stopped.

Outcome classes (Jepsen): ``op.ok``; ``op.fail`` = certainly no effect (a read, a refused connect, an
error the server raised on a live connection); ``op.info`` = a write whose connection broke after it
was sent (outcome unknown). Failed ops carry ``error`` (one line), ``sqlstate`` (or null) and
``conn_lost`` (true when the front connection is gone afterwards - the "closed" of PER-3..PER-8).

Extra event types (documented in ``docs/persistent.md``):

| type | fields |
|---|---|
| ``session.open`` | ``process``, ``conn``, ``front``, ``backend_pid`` (what the server - or proxy - announced) |
| ``session.reconnect`` | ``process``, ``conn``, ``previous``, ``front``, ``backend_pid``, ``error`` (why) |
| ``session.close`` | ``process``, ``conn`` (closed by the application) |
| ``state.set`` | ``process``, ``conn``, ``key``, ``kind``, ``value`` (state set, PER-2/5/8) |
| ``state.read`` | ``process``, ``conn``, ``key``, ``value`` or ``error``, ``phase`` (``before``/``after``) |
| ``stream.progress`` | ``process``, ``op_id``, ``conn``, ``rows`` (a result is being delivered, PER-6) |
"""

from __future__ import annotations

import itertools
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from harness.errors import ConfigError

_op_ids = itertools.count(1)
TABLE_PREFIX = "sbtest"
DSN = str | Callable[[], str]


def _record(history: Any, type_: str, **fields: Any) -> None:
    if history is not None:
        history.record(type_, **fields)


def one_line(exc: BaseException) -> str:
    """``ClassName: first line of the message`` (what the history keeps of an error)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _front_of(conn: psycopg.Connection) -> str:
    """``host:port`` of the application's side of the connection (the front-connection identity)."""
    try:
        sock = socket.socket(fileno=socket.dup(conn.fileno()))
    except (OSError, psycopg.Error):
        return "?"
    try:
        name = sock.getsockname()
        return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
    except OSError:
        return "?"
    finally:
        sock.close()


# ------------------------------------------------------------------------------------ watchdog


class _Watchdog:
    """One daemon thread that interrupts sessions whose operation runs past its ``op_timeout``
    (the socket is shut down, so the blocked call returns with a connection error)."""

    def __init__(self) -> None:
        self._sessions: set[TrackedSession] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, session: TrackedSession) -> None:
        with self._lock:
            self._sessions.add(session)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="oltp-watchdog", daemon=True)
                self._thread.start()

    def remove(self, session: TrackedSession) -> None:
        with self._lock:
            self._sessions.discard(session)

    def _run(self) -> None:
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            with self._lock:
                due = [(s, s.current_op_id) for s in self._sessions
                       if s._busy_until is not None and now >= s._busy_until]
            for s, op_id in due:
                s.interrupt(op_id)


_WATCHDOG = _Watchdog()


# ------------------------------------------------------------------------------- one session


class TrackedSession:
    """One application session through the client under test, every operation recorded (PER-1..8).

    ``dsn`` is a connection string (or a callable returning one, read at each connect). A lost
    connection is re-opened by the next :meth:`op` when ``reconnect`` is true (``session.reconnect``);
    otherwise later ops fail with ``conn_lost``. ``op_timeout`` (s) bounds each operation: past it
    the client gives up (socket shut down; ``op.info``/``op.fail`` with ``timed_out: true``).

    The recording (:meth:`op`, :meth:`close`, :meth:`interrupt`) is the same for every protocol; a
    subclass for another driver overrides :meth:`connect` and the small hooks below it."""

    #: what a failed connect raises (``op.fail`` with ``phase: connect``)
    connect_errors: tuple[type[BaseException], ...] = (psycopg.Error,)
    #: what a failed operation raises (ValueError: psycopg confused by the server's answer)
    op_errors: tuple[type[BaseException], ...] = (psycopg.Error, OSError, ValueError)

    def __init__(self, dsn: DSN, history: Any = None, process: str = "s1", *, reconnect: bool = True,
                 connect_timeout: float = 5, op_timeout: float | None = None,
                 prepare_threshold: int | None = None, autocommit: bool = True) -> None:
        self._dsn = dsn if callable(dsn) else (lambda: dsn)
        self.history = history
        self.process = process
        self.reconnect = reconnect
        self.connect_timeout = connect_timeout
        self.op_timeout = op_timeout
        self.prepare_threshold = prepare_threshold
        self.autocommit = autocommit
        self.conn: psycopg.Connection | None = None
        self.generation = 0
        self.front: str | None = None
        self.last_error: str | None = None
        self.ok = 0
        self.failed = 0
        self.lost = 0
        self._busy_until: float | None = None
        self._interrupted = False
        self.current_op_id: int | None = None  # the running operation's op_id (for stream.progress)
        if op_timeout is not None:
            _WATCHDOG.add(self)

    # ------------------------------------------------------------------------- connection
    @property
    def connected(self) -> bool:
        """True while the session holds a usable connection."""
        return self.conn is not None and not self.conn.closed and not self.conn.broken

    def connect(self) -> psycopg.Connection:
        """Open the session's (next) front connection: ``session.open`` or ``session.reconnect``."""
        conn = psycopg.connect(self._dsn(), autocommit=self.autocommit,
                               connect_timeout=max(1, int(self.connect_timeout)))
        conn.prepare_threshold = self.prepare_threshold
        self._opened(conn, _front_of(conn), conn.info.backend_pid)
        return conn

    def _opened(self, conn: Any, front: str, backend_pid: Any) -> None:
        """Adopt a just-opened front connection as the next generation and record it (PER-1's
        "kept" is the same ``conn`` before and after a fault): ``session.open`` for the first,
        ``session.reconnect`` (``previous`` = the lost generation) for every later one."""
        previous = self.generation
        self.generation += 1
        self.conn = conn
        self.front = front
        if previous == 0:
            _record(self.history, "session.open", process=self.process, conn=self.generation, front=self.front,
                    backend_pid=backend_pid)
        else:
            _record(self.history, "session.reconnect", process=self.process, conn=self.generation,
                    previous=previous, front=self.front, backend_pid=backend_pid, error=self.last_error)

    def interrupt(self, op_id: int | None = None) -> None:
        """Give up on the running operation (watchdog): shut the socket down. With ``op_id``, only if
        that operation is still the one running."""
        conn = self.conn
        if op_id is not None and (op_id != self.current_op_id or self._busy_until is None):
            return
        self._busy_until = None
        if conn is None:
            return
        self._interrupted = True
        self._shutdown(conn)

    @staticmethod
    def _shutdown(conn: Any) -> None:
        """Shut the connection's socket down in both directions (the watchdog's ``op_timeout``)."""
        try:
            sock = socket.socket(fileno=socket.dup(conn.fileno()))
        except (OSError, psycopg.Error):
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.close()

    @staticmethod
    def _close_quietly(conn: Any) -> None:
        """Close the connection; an error closing an already broken one is not an outcome."""
        try:
            conn.close()
        except psycopg.Error:
            pass

    def close(self) -> None:
        """Close the session (``session.close`` when it had a live connection)."""
        _WATCHDOG.remove(self)
        conn, self.conn = self.conn, None
        if conn is not None:
            live = not conn.closed and not conn.broken
            self._close_quietly(conn)
            if live:
                _record(self.history, "session.close", process=self.process, conn=self.generation)

    def __enter__(self) -> TrackedSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------- operations
    def op(self, f: str, body: Callable[[psycopg.Connection], Any], value: Any = None, *,
           write: bool = False, timeout: float | None = None) -> tuple[bool, Any]:
        """Run ``body(conn)`` as one recorded operation ``f``: ``op.invoke`` then ``op.ok`` (value =
        what ``body`` returned) or ``op.fail`` / ``op.info``. ``write=True``: a connection lost after
        sending makes the outcome unknown (``op.info``). Returns ``(ok, result_or_error_text)``."""
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
        except self.op_errors as exc:
            self._busy_until = None
            lost = self._conn_lost_by(conn, exc)
            error = one_line(exc)
            if self._interrupted:
                error = f"client timeout after {limit} s: {error}"
            self.last_error = error
            self.failed += 1
            fields = dict(process=self.process, op_id=op_id, f=f, error=error, sqlstate=self._sqlstate(exc),
                          conn_lost=bool(lost), conn=self.generation, front=self.front,
                          timed_out=self._interrupted)
            if lost:
                self.lost += 1
                self._drop_lost(conn)
                _record(self.history, "op.info" if write else "op.fail", **fields)
            else:
                self._after_failed_op(conn)
                _record(self.history, "op.fail", **fields)
            return False, error
        self._busy_until = None
        self.ok += 1
        _record(self.history, "op.ok", process=self.process, op_id=op_id, f=f, value=_safe(result),
                conn=self.generation, front=self.front)
        return True, result

    @staticmethod
    def _lost(conn: psycopg.Connection) -> bool:
        if conn.closed or conn.broken:
            return True
        try:
            return conn.pgconn.status != psycopg.pq.ConnStatus.OK
        except Exception:  # noqa: BLE001 - a torn pgconn counts as lost
            return True

    # ------------------------------------------------------- per-protocol hooks of op()
    def _conn_lost_by(self, conn: Any, exc: BaseException) -> bool:
        """Whether the failed operation left the front connection gone (``conn_lost``, the
        "closed" of PER-3..PER-8; a lost write is ``op.info``)."""
        return bool(conn.closed or conn.broken or isinstance(exc, psycopg.OperationalError) and self._lost(conn))

    @staticmethod
    def _sqlstate(exc: BaseException) -> str | None:
        """The SQLSTATE the server answered with (PER-3..PER-8 evidence), or None."""
        return getattr(exc, "sqlstate", None)

    def _drop_lost(self, conn: Any) -> None:
        """Let go of a connection a failed operation lost (the next op reconnects, PER-1)."""
        self._close_quietly(conn)

    def _after_failed_op(self, conn: Any) -> None:
        """Leave a live connection usable after an error the server raised: roll back the open
        transaction when the session does not autocommit (the next op does not start inside a
        failed transaction, which PER-7 would read as one still open)."""
        if not self.autocommit and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            try:
                conn.rollback()
            except psycopg.Error:
                pass

    def _statement(self, conn: Any, query: str, params: Any, prepare: bool | None) -> Any:
        """Run one statement on ``conn``; returns the cursor (``description``, ``fetchone``, ``rowcount``)."""
        return conn.execute(query, params, prepare=prepare)

    @staticmethod
    def _cell(value: Any) -> Any:
        """A fetched value as the history keeps it (``op.ok`` value, ``state.read`` of PER-2)."""
        return value

    def execute(self, f: str, query: str, params: Any = None, *, write: bool = False,
                fetch: bool = True, timeout: float | None = None, prepare: bool | None = None) -> tuple[bool, Any]:
        """One statement as operation ``f`` (value = the SQL text): ``op.ok`` value = the first column
        of the first row (``fetch``) or the row count."""
        def body(conn: psycopg.Connection) -> Any:
            cur = self._statement(conn, query, params, prepare)
            if fetch and cur.description is not None:
                row = cur.fetchone()
                return None if row is None else self._cell(row[0])
            return cur.rowcount

        return self.op(f, body, value=query, write=write, timeout=timeout)

    # ------------------------------------------------------------------------- state (PER-2)
    def set_state(self, key: str, kind: str, statement: str, value: Any) -> bool:
        """Establish session state with ``statement`` and record ``state.set`` (PER-2/5/8) on success."""
        ok, _ = self.execute(f"set:{key}", statement, fetch=False)
        if ok:
            _record(self.history, "state.set", process=self.process, conn=self.generation, key=key, kind=kind,
                    value=value)
        return ok

    def read_state(self, key: str, query: str, phase: str, params: Any = None,
                   prepare: bool | None = None) -> tuple[bool, Any]:
        """Read back session state and record ``state.read`` (value, or error) for the PER-2 checker."""
        conn_before = self.generation
        ok, result = self.execute(f"read:{key}", query, params, prepare=prepare)
        fields: dict[str, Any] = {"process": self.process, "conn": self.generation if ok else conn_before,
                                  "key": key, "phase": phase}
        if ok:
            fields["value"] = _safe(result)
        else:
            fields["error"] = result
        _record(self.history, "state.read", **fields)
        return ok, result


def _safe(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_safe(v) for v in value]
    return str(value)


# ------------------------------------------------------------------------------------ tables


def table_names(tables: int) -> list[str]:
    """``sbtest1 .. sbtestN``."""
    return [f"{TABLE_PREFIX}{i}" for i in range(1, tables + 1)]


def load_tables(dsn: str, tables: int = 20, rows: int = 10_000) -> float:
    """Create and fill ``tables`` sysbench tables of ``rows`` rows each (dropped first) with one
    ``INSERT ... SELECT generate_series`` per table in one transaction; returns the seconds taken."""
    if tables < 1 or rows < 1:
        raise ConfigError(f"OLTP load needs tables >= 1 and rows >= 1, not {tables} x {rows}")
    t0 = time.monotonic()
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        for name in table_names(tables):
            ident = sql.Identifier(name)
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
            conn.execute(sql.SQL("CREATE TABLE {} (id integer PRIMARY KEY, k integer NOT NULL DEFAULT 0, "
                                 "c char(120) NOT NULL DEFAULT '', pad char(60) NOT NULL DEFAULT '')").format(ident))
            conn.execute(sql.SQL("INSERT INTO {} (id, k, c, pad) SELECT g, (g * 7919) % {}, md5(g::text), "
                                 "md5((g + 1)::text) FROM generate_series(1, {}) g").format(
                                     ident, sql.Literal(rows), sql.Literal(rows)))
        conn.commit()
    return time.monotonic() - t0


# ---------------------------------------------------------------------------------- workload


@dataclass
class OltpConfig:
    """Shape of the OLTP workload. Defaults are the seed's measurement (PER-1): 20 tables x 10,000
    rows, 20 sessions. ``scale`` multiplies tables, rows and sessions for quick runs (at least 1 of
    each). ``mix`` weighs the operations: ``point_select``, ``update``, ``transaction`` (BEGIN; 2 point
    selects; 1 update; COMMIT)."""

    tables: int = 20
    rows: int = 10_000
    sessions: int = 20
    scale: float = 1.0
    mix: dict[str, float] = field(default_factory=lambda: {"point_select": 0.7, "update": 0.2, "transaction": 0.1})
    think: float = 0.0          # seconds between a session's operations
    op_timeout: float | None = 30.0
    reconnect: bool = True
    reconnect_delay: float = 0.05
    prepare_threshold: int | None = None  # psycopg's server-side prepares: off by default (a plain client)
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.scale <= 0:
            raise ConfigError(f"OLTP scale must be > 0, not {self.scale}")
        unknown = set(self.mix) - set(OPERATIONS)
        if unknown or not self.mix or sum(self.mix.values()) <= 0:
            raise ConfigError(f"OLTP mix must weigh some of {', '.join(OPERATIONS)}; got {self.mix}")

    @property
    def n_tables(self) -> int:
        """Tables after scaling."""
        return max(1, round(self.tables * self.scale))

    @property
    def n_rows(self) -> int:
        """Rows per table after scaling."""
        return max(1, round(self.rows * self.scale))

    @property
    def n_sessions(self) -> int:
        """Sessions after scaling."""
        return max(1, round(self.sessions * self.scale))


def _point_select(conn: psycopg.Connection, table: str, key: int) -> Any:
    row = conn.execute(f"SELECT c FROM {table} WHERE id = %s", (key,)).fetchone()
    return None if row is None else 1


def _update(conn: psycopg.Connection, table: str, key: int) -> Any:
    return conn.execute(f"UPDATE {table} SET k = k + 1 WHERE id = %s", (key,)).rowcount


def _transaction(conn: psycopg.Connection, table: str, key: int) -> Any:
    with conn.transaction():
        conn.execute(f"SELECT c FROM {table} WHERE id = %s", (key,))
        conn.execute(f"SELECT k FROM {table} WHERE id = %s", (key + 1,))
        n = conn.execute(f"UPDATE {table} SET k = k + 1 WHERE id = %s", (key,)).rowcount
    return n


OPERATIONS: dict[str, tuple[Callable[[psycopg.Connection, str, int], Any], bool]] = {
    "point_select": (_point_select, False),
    "update": (_update, True),
    "transaction": (_transaction, True),
}


class OltpWorkload:
    """``with OltpWorkload(client_dsn, history, config): ...`` - N sessions (threads) running the
    OLTP mix through the client under test until stopped (PER-1 keep rate, DUR-1, stall). Call
    :meth:`load` first (or :func:`load_tables`) on the principal. ``dsn`` may be a callable."""

    def __init__(self, dsn: DSN, history: Any = None, config: OltpConfig | None = None,
                 process_prefix: str = "oltp", engine: str = "postgres") -> None:
        self.config = config or OltpConfig()
        self.history = history
        self._dsn = dsn
        self.engine = engine
        kind = session_class(engine)
        self.sessions = [kind(dsn, history, f"{process_prefix}-{i + 1}", reconnect=self.config.reconnect,
                              op_timeout=self.config.op_timeout, prepare_threshold=self.config.prepare_threshold)
                         for i in range(self.config.n_sessions)]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ready = threading.Barrier(len(self.sessions) + 1)
        self.errors: list[BaseException] = []
        self.started_at: float | None = None
        self.stopped_at: float | None = None

    def load(self, dsn: str) -> float:
        """Create and fill the tables on the principal reached by ``dsn``; returns the seconds."""
        return LOADERS[self.engine](dsn, self.config.n_tables, self.config.n_rows)

    def start(self, wait_connected: float = 30) -> OltpWorkload:
        """Start every session; returns once each has opened its first connection (or failed to)."""
        names = table_names(self.config.n_tables)
        ops = list(self.config.mix)
        weights = [self.config.mix[o] for o in ops]
        for i, session in enumerate(self.sessions):
            rng = random.Random(None if self.config.seed is None else self.config.seed + i)
            t = threading.Thread(target=self._run, args=(session, rng, names, ops, weights),
                                 name=f"oltp-{session.process}", daemon=True)
            self._threads.append(t)
            t.start()
        try:
            self._ready.wait(wait_connected)
        except threading.BrokenBarrierError:
            pass
        self.started_at = time.monotonic()
        return self

    def _run(self, session: TrackedSession, rng: random.Random, names: list[str], ops: list[str],
             weights: list[float]) -> None:
        try:
            try:
                session.connect()
            except (psycopg.Error, *getattr(session, "connect_errors", ())) as exc:
                session.last_error = one_line(exc)
            try:
                self._ready.wait(30)
            except threading.BrokenBarrierError:
                pass
            rows = self.config.n_rows
            while not self._stop.is_set():
                name = rng.choices(ops, weights)[0]
                fn, write = OPERATIONS[name]
                table = rng.choice(names)
                key = rng.randint(1, max(1, rows - 1))
                ok, _ = session.op(name, lambda c, fn=fn, table=table, key=key: fn(c, table, key),
                                   value=[table, key], write=write)
                if not ok and not session.connected:
                    self._stop.wait(self.config.reconnect_delay)
                elif self.config.think:
                    self._stop.wait(self.config.think)
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self.errors.append(exc)
        finally:
            session.close()

    def stop(self, timeout: float = 30) -> None:
        """Stop every session and wait for them; a crash inside a session thread is re-raised."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        self.stopped_at = time.monotonic()
        if self.errors:
            raise self.errors[0]

    def __enter__(self) -> OltpWorkload:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def totals(self) -> dict[str, int]:
        """Operations ok / failed and connections lost, over every session."""
        return {"ok": sum(s.ok for s in self.sessions), "failed": sum(s.failed for s in self.sessions),
                "lost": sum(s.lost for s in self.sessions),
                "reconnects": sum(max(0, s.generation - 1) for s in self.sessions)}


#: Session type and table loader per engine; :mod:`harness.workload.mysql_oltp` adds ``mariadb``
#: when the package is imported (``harness/workload/__init__.py``).
SESSION_TYPES: dict[str, type[TrackedSession]] = {"postgres": TrackedSession}
LOADERS: dict[str, Callable[[str, int, int], float]] = {"postgres": load_tables}


def session_class(engine: str = "postgres") -> type[TrackedSession]:
    """The session type speaking ``engine``'s protocol: :class:`TrackedSession` (PostgreSQL) or
    :class:`~harness.workload.mysql_oltp.MySQLTrackedSession` (MariaDB), recording the same events."""
    if engine not in SESSION_TYPES:
        raise ConfigError(f"no OLTP session type for engine {engine!r}; known: {', '.join(SESSION_TYPES)}")
    return SESSION_TYPES[engine]


#: ``session_factory(process, **options)`` in the PER suites: a started :class:`TrackedSession`.
SessionFactory = Callable[..., TrackedSession]
