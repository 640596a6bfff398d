"""What a mirroring client adapter offers the harness (profile ``mirroring``, RULEBOOK MIR-1…13).

An adapter is constructed as ``factory(history=None, process=None, **options)`` and offers:

* ``open(spec)`` - ``spec`` is a :class:`~harness.rules.connstring.ConnectionSpec` or a connection
  string; returns a :class:`MirroringConnection`, or raises :class:`ConnectionOpenError` carrying the
  attempts the client made (its own view) - or :class:`~harness.rules.connstring.ConnectionStringError`
  (a ConfigError) for a string it refuses, e.g. without a database (MIR-2).
* ``abort()`` - from any thread: a pending ``open`` gives up at once (raises ``ConnectionOpenError``
  with ``reason="aborted"``); later opens work again.
* ``shutdown()`` - abort, close every connection this client opened, and refuse further opens.

A connection offers ``execute(sql, params=None) -> list[tuple]``, ``close()`` and
``presented_server`` (the server name the connection presents, MIR-12). A connection that breaks
raises :class:`ConnectionLostError` from ``execute`` and stays broken: nothing reconnects by itself
(MIR-11).

The client records its own view into the optional :class:`~harness.history.History` given at
construction, under its ``process`` id (docs/events.md): ``op.invoke``/``op.ok``/``op.fail`` for
``open``, ``execute`` and ``close``; ``attempt.start``/``attempt.end`` per connection attempt (when
it can see them) and ``attempt.delay`` per retry delay. :class:`Recorder` does the bookkeeping.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from harness.errors import ConnectionLostError as ConnectionLostError  # re-exported
from harness.errors import ConnectionOpenError as ConnectionOpenError
from harness.errors import MirroringClientError as MirroringClientError
from harness.redact import redact as redact  # the one redaction (re-exported for adapters)
from harness.rules.connstring import ConnectionSpec, ConnectionStringError, parse_connection_string

#: Outcomes of one attempt (``attempt.end`` ``outcome``).
OUTCOMES = ("opened", "refused", "timeout", "reset", "inactive", "error", "aborted")
#: Outcomes after which a mirroring client tries the other partner (everything but ``error``).
RETRYABLE = frozenset({"refused", "timeout", "reset", "inactive"})


@dataclass(frozen=True)
class AttemptRecord:
    """One connection attempt as the client saw it (monotonic seconds)."""

    n: int
    target: str  # "initial" / "failover"
    address: str  # host:port
    start: float
    end: float
    outcome: str
    error: str | None = None
    retry_time: float | None = None

    @property
    def duration(self) -> float:
        """Seconds the attempt took."""
        return self.end - self.start


@runtime_checkable
class MirroringConnection(Protocol):
    """An open connection of a mirroring client."""

    @property
    def presented_server(self) -> str:
        """The server name this connection presents itself as connected to (MIR-12)."""
        ...

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement (autocommit) and return its rows ([] when it returns none)."""
        ...

    def close(self) -> None:
        """Close the connection (idempotent)."""
        ...


@runtime_checkable
class MirroringClient(Protocol):
    """A mirroring client under test (a reference implementation or an adapter of a real driver)."""

    def open(self, spec: ConnectionSpec | str) -> MirroringConnection:
        """Open a connection following the client's failover behaviour (MIR-1…10, MIR-13)."""
        ...

    def abort(self) -> None:
        """Make a pending open give up at once (callable from another thread)."""
        ...

    def shutdown(self) -> None:
        """Abort, close every connection, refuse further opens."""
        ...


class Recorder:
    """Writes a client's own view into an optional History under one ``process`` id."""

    _ids = itertools.count(1)

    def __init__(self, history: Any = None, process: Any = None) -> None:
        self.history = history
        self.process = process if process is not None else f"mirroring-{next(self._ids)}"
        self._op_ids = itertools.count(1)
        self._lock = threading.Lock()

    def record(self, type_: str, **fields: Any) -> Any:
        """Record one event (no-op without a history)."""
        if self.history is None:
            return None
        return self.history.record(type_, process=self.process, **fields)

    def invoke(self, f: str, value: Any = None) -> int:
        """``op.invoke``; returns the op_id."""
        with self._lock:
            op_id = next(self._op_ids)
        self.record("op.invoke", op_id=op_id, f=f, value=value)
        return op_id

    def ok(self, op_id: int, f: str, value: Any = None) -> None:
        """``op.ok``."""
        self.record("op.ok", op_id=op_id, f=f, value=value)

    def fail(self, op_id: int, f: str, error: str, **extra: Any) -> None:
        """``op.fail`` (the operation certainly did not take effect); ``extra`` e.g. ``reason``. The
        error text is redacted (no password in the history: harness.redact)."""
        self.record("op.fail", op_id=op_id, f=f, error=redact(error), **extra)

    def info(self, op_id: int, f: str, error: str) -> None:
        """``op.info`` (outcome unknown); the error text is redacted."""
        self.record("op.info", op_id=op_id, f=f, error=redact(error))


def spec_value(spec: ConnectionSpec | None, text: str | None = None) -> dict[str, Any]:
    """The ``op.invoke`` value of an open (read by the MIR-2 and MIR-12 checkers); never holds the
    password."""
    if text is not None:
        text = redact(text)
    if spec is None:
        return {"connstring": text}
    return {"initial": str(spec.initial), "failover": str(spec.failover) if spec.failover else None,
            "database": spec.database, "login_timeout": spec.login_timeout,
            **({"connstring": text} if text is not None else {})}


def first_line(text: str) -> str:
    """A server message on one line (its first three non-empty lines joined)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[:3])


def recorded_execute(rec: Recorder, conn: Any, lock: Any, sql: str, params: Sequence[Any] | None,
                     lost_message: str) -> list[tuple[Any, ...]]:
    """Run one statement on a psycopg connection, recording it as an ``execute`` operation. A
    connection that broke raises :class:`ConnectionLostError` (recorded as ``info``: the outcome is
    unknown, MIR-11); a statement error is recorded as ``fail`` and re-raised."""
    import psycopg

    op = rec.invoke("execute", sql)
    try:
        with lock:
            cur = conn.execute(sql, params)
            rows = cur.fetchall() if cur.description is not None else []
    except psycopg.OperationalError as exc:
        if conn.broken or conn.closed:
            rec.info(op, "execute", f"ConnectionLostError: {first_line(str(exc))}")
            raise ConnectionLostError(f"{lost_message}: {first_line(str(exc))}") from exc
        rec.fail(op, "execute", f"{type(exc).__name__}: {first_line(str(exc))}")
        raise
    except psycopg.Error as exc:
        rec.fail(op, "execute", f"{type(exc).__name__}: {first_line(str(exc))}")
        raise
    rec.ok(op, "execute", len(rows))
    return [tuple(r) for r in rows]


def recorded_close(rec: Recorder, conn: Any) -> bool:
    """Close a psycopg connection once, recording a ``close`` operation; False if already closed."""
    if conn.closed:
        return False
    op = rec.invoke("close")
    conn.close()
    rec.ok(op, "close")
    return True


def close_quietly(connections: Sequence[Any]) -> None:
    """Close every psycopg connection of a client that shuts down (MIR-13: further opens are refused
    by the caller); a connection that is already broken is simply dropped."""
    import psycopg

    for conn in connections:
        try:
            conn.close()
        except psycopg.Error:
            pass


def parse_recorded(rec: Recorder, spec: ConnectionSpec | str) -> tuple[ConnectionSpec, str | None]:
    """The :class:`ConnectionSpec` of an ``open`` argument and its original text (None when a spec
    was given). A refused connection string (e.g. no database, MIR-2) is recorded as a failed open
    with no attempt and re-raised as :class:`ConnectionStringError`."""
    if not isinstance(spec, str):
        return spec, None
    try:
        return parse_connection_string(spec), spec
    except ConnectionStringError as exc:
        op = rec.invoke("open", spec_value(None, spec))
        rec.fail(op, "open", f"ConnectionStringError: {exc}")
        raise
