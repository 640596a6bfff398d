"""The reference ACR client (``--client reference`` of profile ``acr``): DB2 automatic client reroute
(RULEBOOK ACR-1…9, seed 003) on psycopg, as written. See docs/acr.md.

* **ACR-1**: after connecting and after each COMMIT it reads what the server returns - the member
  list with weights (``acr.members``, ``acr.alternate``) and whether the transport is reusable (no
  held cursor, no temporary table left: ``pg_cursors`` / ``pg_class``) - and it tracks every ``SET``
  the application issues (the special registers), noting the set at each COMMIT point.
* **ACR-2**: a transaction's failed first statement is run again on the next available member
  (server list order, highest weight first) after the registers are replayed; no error.
* **ACR-3**: a later statement's failure with a reusable transport: reconnect, replay, SQL30108N.
* **ACR-4**: a non-reusable transport: registers back to the last COMMIT point, SQL30081N.
* **ACR-5**: COMMIT / ROLLBACK after the server became unreachable, with every result fully fetched
  and no session resource declared in the transaction, fails over seamlessly. **(interpretation)**
  a COMMIT of a transaction that *wrote* is never seamless: whether it committed is unknown, so the
  client says SQL30108N rather than acknowledge a write that may be lost (DUR-1).
* **ACR-6**: when every member of the list failed, the group-wide address is tried last; rounds
  follow ``max_acr_retries`` / ``acr_retry_interval`` (DB2 defaults: no retry count, a retry period
  of 10 min, 2 min with an alternate group).
* **ACR-7** (``seamless=False``, the WLB non-seamless mode): no transport until the application's
  first SQL or SET statement; after a failure SQL30108N at once and a new transport only at the
  next statement, registers set to the last COMMIT point first.
* **ACR-8**: reason code 2 for a member of the current group, 4 when every member of the primary
  group failed and the alternate group is next (in seamless mode too, unless
  ``seamless_alternate=True``); failed members are remembered per connection and not used again.
* **ACR-9**: ``receive_timeout`` (failure code 2), ``query_timeout`` (a cancel first; if that gets no
  answer the connection has failed: failure code 3, error code 1 - the rulebook's 1-3; the seed's
  Interrupt=2 variant says failure code 4), ``cancel()`` (failure code 4, error code 2).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from harness.errors import Sql30081N, Sql30108N
from harness.redact import redact
from harness.topology.acr import ALTERNATE, PRIMARY, AcrSpec, Member, parse_members

_SET = re.compile(r"^\s*SET\s+(?!TRANSACTION\b|SESSION\s+CHARACTERISTICS\b|CONSTRAINTS\b)", re.I)
_HOLD = re.compile(r"^\s*DECLARE\b.*\bWITH\s+HOLD\b", re.I | re.S)
_CURSOR = re.compile(r"^\s*DECLARE\b", re.I)
_TEMP = re.compile(r"^\s*(CREATE\s+(GLOBAL\s+|LOCAL\s+)?TEMP(ORARY)?\s+TABLE|DECLARE\s+GLOBAL\s+TEMPORARY)", re.I)
_WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|MERGE|CREATE|DROP|ALTER|TRUNCATE|COPY)\b", re.I)
#: What the client asks after connect and after each COMMIT (ACR-1: the "COMMIT reply").
STATE_QUERY = ("SELECT current_setting('acr.members', true), current_setting('acr.alternate', true), "
               "(SELECT count(*) FROM pg_cursors WHERE is_holdable), "
               "(SELECT count(*) FROM pg_class WHERE relpersistence = 't' AND pg_table_is_visible(oid))")
DEFAULT_RETRY_PERIOD = 600.0
DEFAULT_RETRY_PERIOD_ALTERNATE = 120.0


class _Broken(Exception):
    """The transport failed under a statement (internal): carries the failure code."""

    def __init__(self, failure_code: int, error_code: int | None, text: str) -> None:
        super().__init__(text)
        self.failure_code, self.error_code, self.text = failure_code, error_code, text


class ReferenceAcrClient:
    """Factory result of ``reference`` (see the module docstring for the options)."""

    _ids = itertools.count(1)

    def __init__(self, history: Any = None, process: Any = None, *, seamless: bool = True,
                 max_acr_retries: int | None = None, acr_retry_interval: float = 0.0,
                 retry_period: float | None = None, connect_timeout: float = 2.0,
                 receive_timeout: float | None = None, query_timeout: float | None = None,
                 seamless_alternate: bool = False) -> None:
        self.history = history
        self.process = process if process is not None else f"acr-{next(self._ids)}"
        self.mode = "seamless" if seamless else "non-seamless"
        self.max_acr_retries = max_acr_retries
        self.acr_retry_interval = acr_retry_interval
        self.retry_period = retry_period
        self.connect_timeout = connect_timeout
        self.receive_timeout = receive_timeout
        self.query_timeout = query_timeout
        self.seamless_alternate = seamless_alternate
        self._connections: list[ReferenceAcrConnection] = []

    def record(self, type_: str, **fields: Any) -> None:
        """The client's own view into the history (no-op without one)."""
        if self.history is not None:
            self.history.record(type_, process=self.process, **fields)

    def connect(self, spec: AcrSpec) -> ReferenceAcrConnection:
        """A lazily bound connection (no transport until the first statement, ACR-7)."""
        conn = ReferenceAcrConnection(self, spec)
        self._connections.append(conn)
        return conn

    def shutdown(self) -> None:
        """Close every connection."""
        for conn in self._connections:
            conn.close()


class ReferenceAcrConnection:
    """One application connection of :class:`ReferenceAcrClient`."""

    def __init__(self, client: ReferenceAcrClient, spec: AcrSpec) -> None:
        self.c = client
        self.spec = spec
        self.group = PRIMARY
        self.server_list: dict[str, list[Member]] = {PRIMARY: list(spec.members), ALTERNATE: list(spec.alternate)}
        self.registers: list[str] = []  # every SET the application issued, in order
        self.committed_registers: list[str] = []  # the registers at the last COMMIT point
        self.failed: set[str] = set()  # members that failed on this connection since its last COMMIT (ACR-8)
        self.session_resources = False  # held cursors / temp tables at the last COMMIT reply (ACR-1)
        self.txn_open = False
        self.txn_statements = 0
        self.txn_resources = False
        self.txn_wrote = False
        self.rc4_pending = False  # the primary group is exhausted; the next statement goes to the alternate
        self._conn: psycopg.Connection[Any] | None = None
        self._member: Member | None = None
        self._last_member: Member | None = None
        self._abort_reason: tuple[int, int | None] | None = None
        self._lock = threading.Lock()
        self.closed = False

    # ------------------------------------------------------------------ transports (ACR-6, ACR-8)
    def _candidates(self, group: str) -> list[Member]:
        listed = self.server_list.get(group) or []
        return [m for m in listed if m.name not in self.failed]

    def _group_address(self, group: str) -> Member | None:
        return self.spec.group_address if group == PRIMARY else self.spec.alternate_address

    def _try(self, member: Member) -> psycopg.Connection[Any] | None:
        t0 = time.monotonic()
        self.c.record("acr.transport", member=member.name, address=member.address, phase="start")
        try:
            conn = psycopg.connect(self.spec.conninfo(member, connect_timeout=max(1, round(self.c.connect_timeout))),
                                   autocommit=True)
        except psycopg.Error as exc:
            self.c.record("acr.transport", member=member.name, address=member.address, phase="end",
                          outcome="failed", seconds=time.monotonic() - t0, error=redact(_line(exc)))
            return None
        self.c.record("acr.transport", member=member.name, address=member.address, phase="end",
                      outcome="opened", seconds=time.monotonic() - t0)
        return conn

    def _round(self, group: str) -> tuple[psycopg.Connection[Any], Member] | None:
        """One pass over the group's list, then its group-wide address (ACR-6)."""
        for m in self._candidates(group):
            conn = self._try(m)
            if conn is not None:
                return conn, m
        addr = self._group_address(group)
        if addr is not None:
            conn = self._try(addr)
            if conn is not None:
                return conn, addr
        return None

    def _connect_group(self, group: str) -> tuple[psycopg.Connection[Any], Member] | None:
        """Rounds over ``group`` per ``max_acr_retries`` / ``acr_retry_interval`` (ACR-2, ACR-6)."""
        period = self.c.retry_period
        if period is None:
            period = DEFAULT_RETRY_PERIOD_ALTERNATE if self.spec.alternate else DEFAULT_RETRY_PERIOD
        deadline = time.monotonic() + period
        for n in itertools.count():
            got = self._round(group)
            if got is not None:
                return got
            if self.c.max_acr_retries is not None and n >= self.c.max_acr_retries:
                return None
            if time.monotonic() + self.c.acr_retry_interval > deadline:
                return None
            self.c.record("attempt.delay", seconds=self.c.acr_retry_interval, group=group)
            time.sleep(self.c.acr_retry_interval)
        return None  # pragma: no cover

    def _bind(self, registers: list[str]) -> None:
        """Allocate a transport in the current group and set ``registers`` (ACR-2, ACR-7); raises
        SQL30108N rc 4 when the primary group is exhausted and an alternate group exists (ACR-8),
        SQL30081N when nothing can be reached."""
        if self.rc4_pending:
            self.rc4_pending = False
            self.group = ALTERNATE
        got = self._connect_group(self.group)
        if got is None:
            if self.group == PRIMARY and self.spec.alternate:
                if not self.c.seamless_alternate:
                    self.rc4_pending = True
                    last = self._last_member or self.spec.members[0]
                    raise Sql30108N(4, 3, last.host, last.port, underlying="every member of the primary group failed")
                self.group = ALTERNATE
                got = self._connect_group(ALTERNATE)
            if got is None:
                raise Sql30081N("127.0.0.1", "connect", ("111", "*", "0"),
                                reason="no member, group-wide address or alternate group could be reached")
        self._conn, self._member = got
        self._last_member = self._member
        self.c.record("acr.replay", member=self._member.name, sets=list(registers))
        for stmt in registers:
            self._conn.execute(stmt)
        self._read_state()

    def _read_state(self) -> None:
        """The stand-in of the COMMIT reply (ACR-1): server list and transport reusability."""
        assert self._conn is not None
        members, alternate, held, temps = self._conn.execute(STATE_QUERY).fetchone()  # type: ignore[misc]
        for group, text in ((PRIMARY, members), (ALTERNATE, alternate)):
            if text:
                self.server_list[group] = [Member(n, group, h, p, w, "") for n, h, p, w in parse_members(text)]
        self.session_resources = bool(held) or bool(temps)

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        if self._member is not None:
            self.failed.add(self._member.name)
        self._conn, self._member = None, None

    # ------------------------------------------------------------------ running a statement (ACR-9)
    def _run(self, sql: str, params: Sequence[Any] | None) -> list[tuple[Any, ...]]:
        assert self._conn is not None
        conn = self._conn
        timers: list[threading.Timer] = []
        if self.c.receive_timeout:
            timers.append(threading.Timer(self.c.receive_timeout, self._abort, (2, None)))
        done = threading.Event()
        if self.c.query_timeout:
            timers.append(threading.Timer(self.c.query_timeout, self._query_timeout, (conn, done)))
        self._abort_reason = None
        for t in timers:
            t.daemon = True
            t.start()
        try:
            cur = conn.execute(sql, params)
            return [tuple(r) for r in cur.fetchall()] if cur.description is not None else []
        except psycopg.OperationalError as exc:
            if conn.broken or conn.closed or self._abort_reason is not None:
                fc, ec = self._abort_reason or (_failure_code(exc), None)
                raise _Broken(fc, ec, _line(exc)) from exc
            raise
        finally:
            done.set()
            for t in timers:
                t.cancel()

    def _abort(self, failure_code: int, error_code: int | None) -> None:
        """Give up on the transport under a running statement (timeout or interrupt)."""
        conn = self._conn
        if conn is None or self._abort_reason is not None:
            return
        self._abort_reason = (failure_code, error_code)
        with contextlib.suppress(Exception):
            fd = conn.pgconn.socket
            s = socket.socket(fileno=__import__("os").dup(fd))
            s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _query_timeout(self, conn: psycopg.Connection[Any], done: threading.Event) -> None:
        """QueryTimeout: a cancel request to the server (libpq's non-blocking cancel, bounded); if it
        gets no answer, or the statement still runs after it, the connection has failed (SQL30108N
        failure code 3, error code 1, ACR-9)."""
        try:
            conn.cancel_safe(timeout=0.5)
        except Exception:  # noqa: BLE001 - any failure of the cancel means the member does not answer
            self._abort(3, 1)
            return
        if not done.wait(0.5):
            self._abort(3, 1)

    def cancel(self) -> None:
        """Interrupt (``SQLCancel``, Interrupt=2): SQL30108N failure code 4, error code 2 (ACR-9)."""
        self._abort(4, 2)

    # ------------------------------------------------------------------ the application's calls
    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement (see the module docstring for what a failure does)."""
        is_set = bool(_SET.match(sql))
        with self._lock:
            if self._conn is None:
                self._bind(list(self.registers))  # non-seamless: the registers are at the last COMMIT point
            try:
                if not self.txn_open and not is_set:
                    self._run("BEGIN", None)
                    self.txn_open, self.txn_statements = True, 0
                rows = self._run(sql, params)
            except _Broken as broken:
                rows = self._failed(sql, params, broken, is_set)
            self._note(sql, is_set)
            return rows

    def _note(self, sql: str, is_set: bool) -> None:
        if is_set:
            self.registers.append(sql)
            if not self.txn_open:
                self.committed_registers = list(self.registers)
        if self.txn_open:
            self.txn_statements += 1
        if _HOLD.match(sql) or _TEMP.match(sql):
            self.session_resources = True
        if _CURSOR.match(sql):
            self.txn_resources = True
        if _WRITE.match(sql):
            self.txn_wrote = True

    def _end_txn(self) -> None:
        self.txn_open, self.txn_statements, self.txn_resources, self.txn_wrote = False, 0, False, False

    def _failed(self, sql: str, params: Sequence[Any] | None, broken: _Broken, is_set: bool) -> list[tuple[Any, ...]]:
        """A statement's transport failed (ACR-2, ACR-3, ACR-4, ACR-7, ACR-8, ACR-9)."""
        first = not self.txn_open or self.txn_statements == 0
        reusable = not self.session_resources and not self.txn_resources
        failed = self._member
        self._drop()
        self._end_txn()
        host, port = (failed.host, failed.port) if failed else ("", 0)
        self.c.record("acr.failure", member=failed.name if failed else None, first=first, reusable=reusable,
                      failure_code=broken.failure_code, error=redact(broken.text))
        if not reusable:  # ACR-4
            self.registers = list(self.committed_registers)
            self.session_resources = False
            raise Sql30081N(f"{host}:{port}", "recv", ("104", "*", "0"), reason="transport not reusable")
        if self.c.mode == "non-seamless" or broken.failure_code == 4:  # ACR-7, ACR-9: no new transport now
            if self.c.mode == "non-seamless":
                self.registers = list(self.committed_registers)
            raise Sql30108N(2 if self.group == PRIMARY else 4, broken.failure_code, host, port, broken.error_code,
                            broken.text)
        group_before = self.group
        try:
            self._bind(list(self.registers))  # seamless mode: reconnect now
        except Sql30108N as exc:  # the primary group is exhausted: first rc 2 (this connection failed),
            self.rc4_pending = False  # rc 4 when the next statement cannot reach it either (ACR-8)
            raise Sql30108N(2, broken.failure_code, host, port, broken.error_code, str(exc.underlying)) from None
        assert self._member is not None
        if first and group_before == self.group:  # ACR-2: run it again, no error
            try:
                if not is_set:
                    self._run("BEGIN", None)
                    self.txn_open, self.txn_statements = True, 0
                return self._run(sql, params)
            except _Broken as again:
                return self._failed(sql, params, again, is_set)
        raise Sql30108N(2 if self.group == PRIMARY else 4, broken.failure_code, self._member.host,
                        self._member.port, broken.error_code, broken.text)  # ACR-3

    def _finish(self, verb: str) -> None:
        with self._lock:
            if self._conn is None or not self.txn_open:
                self._end_txn()
                if verb == "COMMIT":
                    self.committed_registers = list(self.registers)
                return
            try:
                self._run(verb, None)
            except _Broken as broken:
                seamless = not self.txn_resources and not self.session_resources and \
                    (verb == "ROLLBACK" or not self.txn_wrote)
                failed = self._member
                wrote = self.txn_wrote
                self._drop()
                self._end_txn()
                self.c.record("acr.failure", member=failed.name if failed else None, first=False,
                              reusable=seamless, failure_code=broken.failure_code, error=redact(broken.text),
                              at=verb)
                if seamless and self.c.mode == "seamless":  # ACR-5
                    if verb == "COMMIT":
                        self.committed_registers = list(self.registers)
                    self._bind(list(self.registers))
                    return
                host, port = (failed.host, failed.port) if failed else ("", 0)
                if self.txn_resources or self.session_resources:
                    raise Sql30081N(f"{host}:{port}", "recv", ("104", "*", "0"),
                                    reason="transport not reusable") from None
                raise Sql30108N(2, broken.failure_code, host, port, broken.error_code,
                                "the transaction wrote: its COMMIT outcome is unknown" if wrote else broken.text) \
                    from None
            self._end_txn()
            if verb == "COMMIT":
                self.committed_registers = list(self.registers)
                self.failed.clear()  # a COMMIT on the new member ends the failure episode (ACR-8)
                with contextlib.suppress(psycopg.Error, AssertionError):
                    self._read_state()

    def commit(self) -> None:
        """COMMIT (ACR-1 state read after it; ACR-5 seamless when nothing is at stake)."""
        self._finish("COMMIT")

    def rollback(self) -> None:
        """ROLLBACK (ACR-5)."""
        self._finish("ROLLBACK")

    def close(self) -> None:
        """Close the transport, if any."""
        self.closed = True
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None


def _line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {' | '.join(lines[:2])}"


def _failure_code(exc: BaseException) -> int:
    """1 send, 2 receive, 3 the connection ended (ACR-9 failure codes)."""
    text = str(exc).lower()
    if "send" in text or "write" in text:
        return 1
    if "closed" in text or "terminat" in text or "eof" in text:
        return 3
    return 2


def make(history: Any = None, process: Any = None, **options: Any) -> ReferenceAcrClient:
    """The ``reference`` factory (seamless mode unless ``seamless=False``)."""
    return ReferenceAcrClient(history, process, **options)


def non_seamless(history: Any = None, process: Any = None, **options: Any) -> ReferenceAcrClient:
    """The ``reference-non-seamless`` factory (the WLB non-seamless mode, ACR-7)."""
    options.setdefault("seamless", False)
    return ReferenceAcrClient(history, process, **options)
