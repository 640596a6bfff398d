"""Reference mirroring client over psycopg 3: the documented SQL Server behaviour (MIR-1…13), with
PostgreSQL standing in for SQL Server.

Variants: ``native`` (SQL Server Native Client: refreshes the cached failover partner from the
principal's ``mirroring.partner`` on every successful open) and ``managed`` (.NET provider: learns it
after the first successful open only), MIR-9.

How one open works (``open(spec)``):

* MIR-2: a connection string without a database is refused before any attempt.
* With a failover partner cached (given, or learned - MIR-9), attempts alternate initial, failover,
  initial … (MIR-1, MIR-4). Attempt ``k`` is in round ``r = ceil(k/2)`` and gets the retry time
  ``r × 0.08 × LT`` (MIR-5), cut to the time left before the login timeout (MIR-6). With no login
  timeout (MIR-8) the schedule uses ``retry_base`` (default 15 s) and the client alternates until it
  connects or is aborted.
* After a round in which every attempt was refused, reset within 50 ms (closed at once without an
  answer) or answered "inactive", the client waits 0.1, 0.2, 0.4, 0.8, then 1 s (MIR-7; cut to the login
  timeout); no delay after a round with a timed-out attempt.
* MIR-3: without a failover partner there is one attempt to the initial partner with the whole login
  timeout; its failure fails the open.
* MIR-13: a server that closes the connection ends the attempt at once (the wait is on the socket).
* A non-retryable answer (unknown database, authentication failure) fails the open at once.
* MIR-9 **(interpretation, RULEBOOK)**: when the published mirror is the initial partner (a redirected
  open in a pair), the server connected to is cached as the failover partner instead.
* MIR-10 follows: a stale failover partner simply fails every attempt; MIR-11: no reconnect;
  MIR-12: a connection presents the initial partner's name.

Attempt timing is exact to the scheduler's resolution: each attempt is libpq's non-blocking connect
(``PGconn.connect_start`` / ``connect_poll``) driven by ``select`` with the attempt's own deadline,
counted from the moment the connect is issued (the address is looked up once per open, before any
attempt's clock starts: MIR-5 times an attempt from its accept at the fault proxy); a MIR-7 delay
runs from the end of the round's last attempt, so the bookkeeping after it does not lengthen it;
at the deadline the client calls ``PGconn.finish()``, which closes the socket at once (the tests
measure it from the server side). The login is followed by ``SELECT pg_is_in_recovery(),
current_setting('mirroring.partner', true)`` under the same deadline: a server in recovery (a
readable standby) is treated as an inactive partner and the connection is closed.

Classification of a connect failure (psycopg hides the SQLSTATE at connect time, so by message):
``Connection refused`` → refused; "not accepting connections", "Hot standby mode is disabled",
"starting up", "shutting down", "in recovery mode", "not yet accepting connections", "too many
clients" (SQLSTATE 57P03 / 53300 texts) → inactive; "server closed the connection", "Connection
reset", "could not receive data", "EOF", network unreachable → reset; authentication / missing
database / missing role / bad parameters → error (non-retryable); anything else → reset
(retryable, a network-level failure).
"""

from __future__ import annotations

import math
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from harness.clients.mirroring.protocol import (
    RETRYABLE,
    AttemptRecord,
    ConnectionLostError,
    ConnectionOpenError,
    Recorder,
    close_quietly,
    first_line,
    parse_recorded,
    recorded_close,
    recorded_execute,
    spec_value,
)
from harness.errors import ConfigError
from harness.rules.connstring import Address, ConnectionSpec, ConnectionStringError

RETRY_FRACTION = 0.08
DEFAULT_DELAYS: tuple[float, ...] = (0.1, 0.2, 0.4, 0.8, 1.0)
DEFAULT_RETRY_BASE = 15.0
PARTNER_SETTING = "mirroring.partner"
VARIANTS = ("native", "managed")
#: MIR-7 (interpretation): a round whose attempts all ended in one of these gets a retry delay, and
#: so does a reset (accepted, then closed without an answer) within FAST_RESET seconds: a fault proxy
#: in front of a stopped server shows a refused connect exactly that way.
FAST_FAILURES = frozenset({"refused", "inactive"})
FAST_RESET = 0.050

_INACTIVE = ("not accepting connections", "hot standby mode is disabled", "is starting up",
             "is shutting down", "in recovery mode", "not yet accepting connections",
             "too many clients", "remaining connection slots", "cannot_connect_now",
             "read-only", "consistent recovery state")
_ERROR = ("password authentication failed", "authentication failed", "does not exist",
          "no pg_hba.conf entry", "invalid", "permission denied", "not permitted",
          "unsupported frontend protocol", "no password supplied", "fe_sendauth")
_RESET = ("server closed the connection", "connection reset", "could not receive data",
          "could not send data", "eof", "broken pipe", "network is unreachable", "no route to host",
          "connection timed out", "socket")


def classify_connect_error(message: str) -> str:
    """The attempt outcome for a libpq connect error message (MIR-7 needs refused / inactive apart
    from reset; ``error`` is non-retryable)."""
    text = message.lower()
    if "connection refused" in text:
        return "refused"
    if any(k in text for k in _INACTIVE):
        return "inactive"
    if any(k in text for k in _RESET):
        return "reset"
    if any(k in text for k in _ERROR):
        return "error"
    return "reset"


@dataclass
class _Outcome:
    outcome: str
    error: str | None = None
    pgconn: Any = None
    partner: str | None = None
    local: str | None = None


class _Aborted(Exception):
    pass


class ReferenceConnection:
    """An open connection of the reference client (autocommit). ``presented_server`` is the initial
    partner's name even when the connection was redirected to the failover partner (MIR-12);
    ``served_by`` is the partner it really reached."""

    def __init__(self, client: ReferenceMirroringClient, conn: psycopg.Connection, spec: ConnectionSpec,
                 served_by: Address, target: str) -> None:
        self._client = client
        self._conn = conn
        self.spec = spec
        self.served_by = served_by
        self.target = target
        self.broken = False
        self._lock = threading.Lock()

    @property
    def presented_server(self) -> str:
        """MIR-12: the initial partner name from the connection string."""
        return str(self.spec.initial)

    @property
    def closed(self) -> bool:
        """True once closed (by :meth:`close` or because it broke)."""
        return self._conn.closed

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement; a broken connection raises :class:`ConnectionLostError` (MIR-11: the
        application must open again; nothing reconnects by itself)."""
        rec = self._client.recorder
        if self.broken or self._conn.closed:
            op = rec.invoke("execute", sql)
            rec.fail(op, "execute", "ConnectionLostError: connection is closed")
            raise ConnectionLostError("the connection is closed; open a new one (MIR-11)")
        try:
            return recorded_execute(rec, self._conn, self._lock, sql, params,
                                    f"connection to {self.served_by.hostport} lost")
        except ConnectionLostError:
            self.broken = True
            raise

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if recorded_close(self._client.recorder, self._conn):
            self._client._forget(self)

    def __enter__(self) -> ReferenceConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReferenceMirroringClient:
    """The reference mirroring client (MIR-1…13) over psycopg 3.

    ``variant``: ``native`` or ``managed`` (MIR-9). ``history``/``process``: where the client
    records its own view. ``delays``: the MIR-7 retry delays. ``retry_base``: the base of the
    retry-time schedule when the spec has no login timeout (MIR-8). ``partner_setting``: the server
    setting that publishes the principal's current mirror (``host:port``)."""

    def __init__(self, variant: str = "native", *, history: Any = None, process: Any = None,
                 delays: Sequence[float] = DEFAULT_DELAYS, retry_base: float = DEFAULT_RETRY_BASE,
                 partner_setting: str = PARTNER_SETTING, application_name: str = "mirroring-reference"
                 ) -> None:
        if variant not in VARIANTS:
            raise ConfigError(f"unknown mirroring client variant {variant!r}; use 'native' or 'managed'")
        if not delays or any(float(d) < 0 for d in delays):
            raise ConfigError("delays must be a non-empty list of seconds >= 0")
        if not retry_base > 0:
            raise ConfigError("retry_base must be > 0 seconds")
        self.variant = variant
        self.recorder = Recorder(history, process)
        self.delays = tuple(float(d) for d in delays)
        self.retry_base = float(retry_base)
        self.partner_setting = partner_setting
        self.application_name = application_name
        self._cache: dict[tuple[Address, str], Address] = {}
        self._learned: set[tuple[Address, str]] = set()
        self._connections: list[ReferenceConnection] = []
        self._lock = threading.Lock()
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_fds, self._rfd, self._wfd)

    # ------------------------------------------------------------------------------ public API

    @property
    def process(self) -> Any:
        """The process id this client records under."""
        return self.recorder.process

    def cached_failover(self, spec: ConnectionSpec) -> Address | None:
        """The failover partner the next open of ``spec`` will use (MIR-9)."""
        return self._cache.get((spec.initial, spec.database), spec.failover)

    def open(self, spec: ConnectionSpec | str) -> ReferenceConnection:
        """Open a connection (MIR-1…10, MIR-13); raises :class:`ConnectionOpenError` or, for a
        refused connection string, :class:`ConnectionStringError` (MIR-2)."""
        rec = self.recorder
        parsed, text = parse_recorded(rec, spec)
        op = rec.invoke("open", spec_value(parsed, text))
        if self._closed:
            rec.fail(op, "open", "client is shut down", reason="aborted")
            raise ConnectionOpenError("the client is shut down", reason="aborted")
        self._drain()
        try:
            conn = self._open(parsed, op)
        except ConnectionOpenError as exc:
            rec.fail(op, "open", str(exc), reason=exc.reason)
            raise
        except BaseException as exc:
            rec.info(op, "open", f"{type(exc).__name__}: {exc}")
            raise
        return conn

    def abort(self) -> None:
        """Make a pending :meth:`open` give up at once (any thread)."""
        try:
            os.write(self._wfd, b"x")
        except OSError:
            pass

    def shutdown(self) -> None:
        """Abort a pending open, close every connection, refuse further opens."""
        self._closed = True
        self.abort()
        with self._lock:
            conns = list(self._connections)
        close_quietly(conns)

    def close(self) -> None:
        """:meth:`shutdown`, then release the abort pipe."""
        self.shutdown()
        self._finalizer()

    def __enter__(self) -> ReferenceMirroringClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------- internals

    def _forget(self, conn: ReferenceConnection) -> None:
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)

    def _drain(self) -> None:
        try:
            while os.read(self._rfd, 512):
                pass
        except (BlockingIOError, OSError):
            pass

    def _poll(self, fd: int | None, events: int, deadline: float) -> str | None:
        """Wait until ``fd`` is ready for ``events``, the abort pipe is written, or ``deadline``
        (monotonic; ``inf`` = no deadline). Uses poll(2), so descriptors above 1024 work."""
        poller = select.poll()
        poller.register(self._rfd, select.POLLIN)
        if fd is not None:
            poller.register(fd, events | select.POLLERR | select.POLLHUP)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            ready = poller.poll(None if math.isinf(remaining) else remaining * 1000.0)
            for rfd, _ in ready:
                if rfd == self._rfd:
                    return "aborted"
            if ready:
                return None

    def _aborted(self) -> bool:
        poller = select.poll()
        poller.register(self._rfd, select.POLLIN)
        return bool(poller.poll(0))

    def _sleep_until(self, deadline: float) -> None:
        """Sleep until monotonic ``deadline`` (an abort ends it: :class:`_Aborted`)."""
        if self._poll(None, 0, deadline) == "aborted":
            raise _Aborted

    def _open(self, spec: ConnectionSpec, op: int) -> ReferenceConnection:
        key = (spec.initial, spec.database)
        failover = self._cache.get(key, spec.failover)
        lt = spec.login_timeout
        t0 = time.monotonic()
        deadline = t0 + lt if lt is not None else math.inf
        base = lt if lt is not None else self.retry_base
        attempts: list[AttemptRecord] = []
        k = 0
        round_outcomes: list[str] = []
        conninfos: dict[Address, str] = {}  # looked up once per open, before any retry-time clock
        try:
            while True:
                k += 1
                if failover is None:  # MIR-3: one attempt with the whole login timeout
                    if k > 1:
                        last = attempts[-1]
                        raise ConnectionOpenError(
                            f"could not open {spec.initial.hostport} ({last.error or last.outcome}); "
                            "no failover partner", reason=last.outcome, attempts=attempts)
                    target, addr, rt = "initial", spec.initial, (lt if lt is not None else math.inf)
                else:
                    rnd = (k + 1) // 2
                    target = "initial" if k % 2 else "failover"
                    addr = spec.initial if k % 2 else failover
                    rt = rnd * RETRY_FRACTION * base
                # MIR-5: the retry time covers the TCP connect and the login, so its clock starts
                # when the connect is issued - the address lookup and the bookkeeping come first
                # (an attempt is observed from its accept at the fault proxy).
                if addr not in conninfos:
                    conninfos[addr] = self._conninfo(addr, spec)
                conninfo = conninfos[addr]
                if time.monotonic() >= deadline:
                    raise ConnectionOpenError(
                        f"login timeout {lt:g} s expired" if lt else "login timeout expired",
                        reason="timeout", attempts=attempts)
                self.recorder.record("attempt.start", op_id=op, attempt=k, target=target,
                                     address=addr.hostport,
                                     retry_time=None if math.isinf(rt)
                                     else round(min(rt, deadline - time.monotonic()), 6))
                now = time.monotonic()
                att_deadline = min(now + rt, deadline)
                res = self._attempt(conninfo, addr, att_deadline)
                end = time.monotonic()
                self.recorder.record("attempt.end", op_id=op, attempt=k, target=target,
                                     address=addr.hostport, outcome=res.outcome, error=res.error,
                                     local=res.local or None)
                attempts.append(AttemptRecord(k, target, addr.hostport, now, end, res.outcome, res.error,
                                              None if math.isinf(rt) else att_deadline - now))
                if res.outcome == "opened":
                    return self._opened(spec, op, res, addr, target, key, attempts)
                if res.outcome == "aborted":
                    raise _Aborted
                if res.outcome not in RETRYABLE:
                    raise ConnectionOpenError(f"{addr.hostport} answered: {res.error}", reason="error",
                                              attempts=attempts)
                if failover is None:
                    continue
                fast = res.outcome in FAST_FAILURES or (res.outcome == "reset" and end - now <= FAST_RESET)
                round_outcomes.append("fast" if fast else res.outcome)
                if k % 2 == 0:
                    if all(o == "fast" for o in round_outcomes):  # MIR-7
                        # MIR-7: the delay runs from the end of the round (this attempt's end),
                        # not from after the bookkeeping below
                        delay = self.delays[min(k // 2, len(self.delays)) - 1]
                        resume = min(end + delay, deadline)
                        if resume > time.monotonic():
                            self.recorder.record("attempt.delay", op_id=op, seconds=round(resume - end, 6),
                                                 round=k // 2)
                            self._sleep_until(resume)
                    round_outcomes = []
                if time.monotonic() >= deadline:
                    raise ConnectionOpenError(f"login timeout {lt:g} s expired", reason="timeout",
                                              attempts=attempts)
        except _Aborted:
            raise ConnectionOpenError("open aborted", reason="aborted", attempts=attempts) from None

    def _opened(self, spec: ConnectionSpec, op: int, res: _Outcome, addr: Address, target: str,
                key: tuple[Address, str], attempts: list[AttemptRecord]) -> ReferenceConnection:
        learned = None
        if res.partner:
            try:
                learned = _parse_partner(res.partner)
            except ConnectionStringError:
                learned = None
        if learned is not None and _same_server(learned, spec.initial):
            # MIR-9 (interpretation, RULEBOOK): the server's mirror is the initial partner - the open was
            # redirected to the failover partner, now the principal - so the server connected to is cached
            learned = addr
        if learned is not None and (self.variant == "native" or key not in self._learned):
            self._cache[key] = learned  # MIR-9; the initial partner is never replaced
            self._learned.add(key)
        conn = psycopg.Connection(res.pgconn)
        conn.autocommit = True
        wrapped = ReferenceConnection(self, conn, spec, addr, target)
        with self._lock:
            self._connections.append(wrapped)
        self.recorder.ok(op, "open", {"presented_server": wrapped.presented_server,
                                      "served_by": addr.hostport, "target": target,
                                      "partner": res.partner or None, "attempts": len(attempts)})
        return wrapped

    def _conninfo(self, addr: Address, spec: ConnectionSpec) -> str:
        try:
            infos = socket.getaddrinfo(addr.host, addr.port, type=socket.SOCK_STREAM)
            hostaddr = infos[0][4][0]
        except (OSError, IndexError):
            hostaddr = None
        params: dict[str, Any] = {"host": addr.host, "port": addr.port, "dbname": spec.database,
                                  "sslmode": "disable", "gssencmode": "disable",
                                  "application_name": self.application_name}
        if hostaddr:
            params["hostaddr"] = hostaddr
        if spec.user is not None:
            params["user"] = spec.user
        if spec.password is not None:
            params["password"] = spec.password
        return make_conninfo("", **params)

    def _wait(self, sock: int, write: bool, deadline: float) -> str | None:
        """Wait for the socket; returns ``timeout`` / ``aborted`` or None when ready."""
        return self._poll(sock, select.POLLOUT if write else select.POLLIN, deadline)

    def _attempt(self, conninfo: str, addr: Address, deadline: float) -> _Outcome:
        """One attempt to ``addr`` (its ``conninfo``, already looked up): TCP connect + login +
        recovery check, all before ``deadline``. The result carries the socket's local
        ``host:port`` when known (the fault proxy sees it as ``client``)."""
        box: dict[str, str] = {}
        result = self._attempt_inner(conninfo, addr, deadline, box)
        result.local = box.get("local")
        return result

    def _attempt_inner(self, conninfo: str, addr: Address, deadline: float,
                       box: dict[str, str]) -> _Outcome:
        if self._aborted():
            return _Outcome("aborted", "open aborted")
        try:
            pgconn = pq.PGconn.connect_start(conninfo.encode())
        except Exception as exc:  # noqa: BLE001 - libpq refused the parameters
            return _Outcome("error", str(exc))
        try:
            while True:
                if pgconn.status == pq.ConnStatus.BAD:
                    msg = first_line(pgconn.get_error_message())
                    return _Outcome(classify_connect_error(msg), msg)
                status = pgconn.connect_poll()
                if status == pq.PollingStatus.OK:
                    break
                if status == pq.PollingStatus.FAILED:
                    msg = first_line(pgconn.get_error_message())
                    return _Outcome(classify_connect_error(msg), msg)
                if "local" not in box:
                    box["local"] = _local_address(pgconn.socket)
                why = self._wait(pgconn.socket, status == pq.PollingStatus.WRITING, deadline)
                if why is not None:
                    return _Outcome(why, f"retry time expired: attempt to {addr.hostport} abandoned"
                                    if why == "timeout" else "open aborted")
            pgconn.nonblocking = 1
            query = ("SELECT pg_catalog.pg_is_in_recovery(), "
                     f"pg_catalog.current_setting('{self.partner_setting}', true)")
            pgconn.send_query(query.encode())
            while pgconn.flush() != 0:
                why = self._wait(pgconn.socket, True, deadline)
                if why is not None:
                    return _Outcome(why, "retry time expired during the login check")
            results = []
            while True:
                pgconn.consume_input()
                if pgconn.is_busy():
                    why = self._wait(pgconn.socket, False, deadline)
                    if why is not None:
                        return _Outcome(why, "retry time expired during the login check")
                    continue
                res = pgconn.get_result()
                if res is None:
                    break
                results.append(res)
            ok = [r for r in results if r.status == pq.ExecStatus.TUPLES_OK]
            if not ok:
                msg = first_line(pgconn.get_error_message()) or "login check failed"
                return _Outcome(classify_connect_error(msg), msg)
            in_recovery = ok[0].get_value(0, 0) == b"t"
            raw = ok[0].get_value(0, 1)
            partner = raw.decode() if raw else None
            if in_recovery:
                return _Outcome("inactive", "server is in recovery (a read-only standby)")
            result = _Outcome("opened", None, pgconn, partner)
            pgconn = None  # handed over
            return result
        except psycopg.OperationalError as exc:
            msg = first_line(str(exc))
            return _Outcome(classify_connect_error(msg), msg)
        finally:
            if pgconn is not None:
                pgconn.finish()


def _local_address(fd: int) -> str:
    """``host:port`` of a socket descriptor's local end ("" when unknown)."""
    try:
        with socket.socket(fileno=os.dup(fd)) as s:  # family detected from the descriptor
            host, port = s.getsockname()[:2]
    except OSError:
        return ""
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _close_fds(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _same_server(a: Address, b: Address) -> bool:
    """Whether two addresses name one server (MIR-9): same port and host, case-insensitive (an
    instance name is for display only)."""
    return a.port == b.port and a.host.lower() == b.host.lower()


def _parse_partner(value: str) -> Address:
    """``host:port`` (or the SQL Server ``host,port``) as published by the principal (MIR-9)."""
    text = value.strip()
    if text.count(":") == 1 and "," not in text:
        host, _, port = text.partition(":")
        text = f"{host},{port}"
    from harness.rules.connstring import parse_address

    return parse_address(text, what=PARTNER_SETTING)


def native(history: Any = None, process: Any = None, **options: Any) -> ReferenceMirroringClient:
    """Factory of the ``reference-native`` client (MIR-9 native variant)."""
    return ReferenceMirroringClient("native", history=history, process=process, **options)


def managed(history: Any = None, process: Any = None, **options: Any) -> ReferenceMirroringClient:
    """Factory of the ``reference-managed`` client (MIR-9 managed variant)."""
    return ReferenceMirroringClient("managed", history=history, process=process, **options)
