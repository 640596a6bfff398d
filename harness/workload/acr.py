"""The ACR workload (RULEBOOK ACR-1…9, DUR-1): an application running transactions through an ACR
client's connection, recording what *it* saw as ``op.*`` events under its ``process`` id.

Each call is one operation: ``f`` = ``connect`` / ``execute`` / ``commit`` / ``rollback``; an
``execute`` value is ``{"sql", "txn", "n"}`` (``n`` = 0 for the first statement of transaction
``txn``, ACR-2). A failure records the outcome class (``seamless`` is an ``op.ok``;
``rerouted-retry`` / ``communication-error`` / ``sql-error``) with the DB2 tokens (``sqlstate``,
``sqlcode``, ``reason_code``, ``failure_code``, ``error_code``, ``host``, ``port``). A transaction
that inserted keys and committed records ``op.ok f=write`` per key (DUR-1); a key whose COMMIT
failed is ``op.info`` (outcome unknown)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from harness.errors import AcrClientError, Sql30108N
from harness.redact import redact

TABLE = "acr_keys"
CLIENT_ERRORS: tuple[type[BaseException], ...] = (AcrClientError, psycopg.Error)


def prepare(dsn: str) -> None:
    """Create the workload's table on the group's database (``dsn``: a harness connection to the
    primary, not through the client under test)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (k bigint PRIMARY KEY, v text)")


def error_fields(exc: BaseException) -> dict[str, Any]:
    """What an ``op.fail`` records of an error: the outcome class and the DB2 tokens."""
    from harness.errors import Sql30081N

    fields: dict[str, Any] = {"error": redact(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"),
                              "error_class": type(exc).__name__}
    if isinstance(exc, Sql30108N):
        fields.update(outcome_class="rerouted-retry", sqlstate=exc.sqlstate, sqlcode=exc.sqlcode,
                      reason_code=exc.reason_code, failure_code=exc.failure_code, error_code=exc.error_code,
                      host=exc.host, port=exc.port)
    elif isinstance(exc, Sql30081N):
        fields.update(outcome_class="communication-error", sqlstate=exc.sqlstate, sqlcode=exc.sqlcode)
    else:
        fields.update(outcome_class="sql-error", sqlstate=getattr(exc, "sqlstate", None))
    return fields


class AcrApp:
    """The application side of one ACR connection (``process`` names it in the history)."""

    def __init__(self, client: Any, spec: Any, history: Any, process: str = "app") -> None:
        self.client = client
        self.spec = spec
        self.history = history
        self.process = process
        self.conn: Any = None
        self.txn = 0
        self.n = 0
        self._ops = itertools.count(1)
        self._keys: list[int] = []
        self.last_error: BaseException | None = None

    def _record(self, type_: str, **fields: Any) -> None:
        if self.history is not None:
            self.history.record(type_, process=self.process, **fields)

    def _op(self, f: str, value: Any, call: Any) -> Any:
        op_id = next(self._ops)
        self._record("op.invoke", op_id=op_id, f=f, value=value)
        try:
            result = call()
        except CLIENT_ERRORS as exc:
            self.last_error = exc
            self._record("op.fail", op_id=op_id, f=f, value=value, **error_fields(exc))
            raise
        self.last_error = None
        self._record("op.ok", op_id=op_id, f=f, value=value if f != "execute" else {**value, "rows": len(result)})
        return result

    def connect(self) -> Any:
        """``client.connect(spec)`` as one operation."""
        self.conn = self._op("connect", {"application": self.process}, lambda: self.client.connect(self.spec))
        self.txn, self.n = self.txn + 1, 0
        return self.conn

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """One statement of the current transaction (``n`` counts them; a SET outside a transaction is
        a special register and starts none)."""
        is_set = sql.lstrip().upper().startswith("SET ")
        value = {"sql": sql, "txn": self.txn, "n": self.n, "set": is_set}
        try:
            rows = self._op("execute", value, lambda: self.conn.execute(sql, params))
        except CLIENT_ERRORS as exc:
            if isinstance(exc, AcrClientError):
                self._new_txn()
            raise
        if not (is_set and self.n == 0):
            self.n += 1
        return rows

    def _new_txn(self) -> None:
        for k in self._keys:
            self._record("op.info", op_id=next(self._ops), f="write", value=k, error="transaction failed")
        self._keys = []
        self.txn, self.n = self.txn + 1, 0

    def write(self, key: int) -> None:
        """INSERT one key in the current transaction (acknowledged when the COMMIT succeeds, DUR-1)."""
        self.execute(f"INSERT INTO {TABLE} (k, v) VALUES (%s, %s)", (key, self.process))
        self._keys.append(key)

    def commit(self) -> None:
        """COMMIT as one operation (ACR-5); acknowledges the transaction's keys."""
        value = {"txn": self.txn, "n": self.n}
        try:
            self._op("commit", value, self.conn.commit)
        except CLIENT_ERRORS:
            self._new_txn()
            raise
        for k in self._keys:
            op_id = next(self._ops)
            self._record("op.invoke", op_id=op_id, f="write", value=k)
            self._record("op.ok", op_id=op_id, f="write", value=k)
        self._keys = []
        self.txn, self.n = self.txn + 1, 0

    def rollback(self) -> None:
        """ROLLBACK as one operation (ACR-5)."""
        value = {"txn": self.txn, "n": self.n}
        try:
            self._op("rollback", value, self.conn.rollback)
        finally:
            self._keys = []
            self.txn, self.n = self.txn + 1, 0

    def attempt(self, call: Any) -> BaseException | None:
        """Run ``call()``; return the client error it raised (recorded already), or None."""
        try:
            call()
        except CLIENT_ERRORS as exc:
            return exc
        return None

    def cancel_after(self, seconds: float) -> threading.Timer:
        """Interrupt the running statement after ``seconds`` (ACR-9), recorded as ``op.invoke/ok f=cancel``."""
        def fire() -> None:
            op_id = next(self._ops)
            self._record("op.invoke", op_id=op_id, f="cancel", value=None)
            self.conn.cancel()
            self._record("op.ok", op_id=op_id, f="cancel", value=None)

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        timer.start()
        return timer


def final_read(dsn: str, history: Any, process: str = "checker") -> list[int]:
    """Every key on the group's database, read by the harness (``op.ok f=read_all``, DUR-1)."""
    if history is not None:
        history.record("op.invoke", process=process, op_id=1, f="read_all", value=None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        keys = [r[0] for r in conn.execute(f"SELECT k FROM {TABLE} ORDER BY k").fetchall()]
    if history is not None:
        history.record("op.ok", process=process, op_id=1, f="read_all", value=keys, t=time.monotonic())
    return keys
