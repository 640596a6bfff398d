"""The persistent-connection proxy (RULEBOOK PER-1..PER-8): a PostgreSQL wire-protocol proxy in
asyncio that keeps each client's front connection open across a switchover or failover of the
principal, re-attaching the session to the new principal and replaying its state.

One :class:`Session` per front connection; the proxy (:class:`PersistentProxy`) owns the listener,
the drain/resume machinery and the counters. Data path: the commonest request and answer (one
statement's [Parse/]Bind/[Describe/]Execute/Sync and its [ParseComplete/]BindComplete ... ReadyForQuery)
are framed and tracked in one compiled call each (:mod:`.fastpath`) straight from the read callbacks
and relayed with one write; any other chunk is framed in one call of the compiled walk (:mod:`.frames`,
a run of DataRows as one entry) and relayed as raw byte blocks, one write per chunk, and only the few
message types that change tracked state are decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import secrets
import struct
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError
from harness.secrets import protect_logger

from . import protocol as pq
from .backend import (
    Address,
    BackConn,
    BackendError,
    connect_backend,
    probe_candidates,
    send_cancel,
)
from .fastpath import simple_answer, simple_request
from .frames import DATA_ROW, NO_RUNS, frames
from .relay import Tap, give_back, take_over
from .scram import MECHANISM, ScramError, ScramServer, ScramVerifier
from .state import NOT_SETTABLE, SessionState, quote_literal
from .warm import WarmSet

log = protect_logger(logging.getLogger(__name__))  # log lines hold no password (issue 17)

EventCallback = Callable[..., Any]

_FRONT_TYPES = frozenset(b"QPBEDCSHFXdcf")
# Types relayed as a stream once they exceed _STREAM_FROM bytes: the proxy needs only their first
# bytes (Bind: the portal and statement names) or nothing of them (CopyData, FunctionCall).
_STREAMED = frozenset(b"dBF")
_STREAM_FROM = 256 << 10
_CHUNK = 256 << 10
_MIN_MESSAGE_SIZE = 64 << 10
_MAX_AUTH_MESSAGE = 65535  # PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH
_FALSE = ("0", "false", "off", "no")
_LENGTH = struct.Struct("!i").unpack_from  # a message's length field
_KINDS = [bytes([i]) for i in range(256)]
# CopyData, CopyDone, CopyFail, Flush: part of a request already started (no switchover gate, PER-4)
_CONTINUING = frozenset(b"dcfH")  # a message's type as the 1-byte ``kind`` (no allocation)
_NAMING = frozenset(b"BDCPQ")  # messages that may name a prepared statement (lazy re-prepare)

# PER-10 endpoint kinds: the default listener is the cluster endpoint (the principal); custom
# endpoints route to read-only nodes, balanced by active requests (a session on a removed node moves
# to another one, kept) or by connections (a session on a removed node is disconnected).
CLUSTER = "cluster"
READONLY_ENDPOINTS = ("custom-active", "custom-connection")

# SQLSTATEs used when the proxy closes a session
ADMIN_SHUTDOWN = "57P01"
CONNECTION_FAILURE = "08006"
CANNOT_CONNECT_NOW = "57P03"  # the server is starting up or refuses logins during recovery
PROTOCOL_VIOLATION = "08P01"

_SNAPSHOT_SQL = (
    "SELECT (SELECT count(*) FROM pg_catalog.pg_class "
    "WHERE relnamespace = pg_catalog.pg_my_temp_schema()), "
    "(SELECT count(*) FROM pg_catalog.pg_cursors); "
    "SELECT name, setting FROM pg_catalog.pg_settings WHERE source = 'session'"
)


@dataclass
class ProxyConfig:
    """Configuration of a :class:`PersistentProxy`.

    ``user``/``password``: credentials the proxy logs in with on the principal (back side).
    ``front_users``: name -> password accepted from front clients (default ``{user: password}``).
    ``front_auth``: ``scram`` (SCRAM-SHA-256), ``password`` (cleartext) or ``trust``.
    ``resolver``: callable (sync or async) returning the current principal ``(host, port)``; without
    it, ``candidates`` are probed with ``SELECT pg_is_in_recovery()`` (one candidate is used as is).
    ``drain_window`` (PER-4) and ``recovery_window`` (PER-3) default to 60 s.
    ``on_event``: called as ``on_event(type, **fields)`` (``History.record`` fits).
    ``database``: database of the proxy's own probe logins (sessions use their own).
    ``auto_resume``: after a drain, resume by itself once the resolver names a new principal.
    ``max_message_size``: the largest frontend message a session may announce (default 64 MiB); a
    larger one is answered with a FATAL 08P01 naming the limit and closes that session only.
    ``allowed_principals``: addresses, besides ``candidates``, that the admin ``POST /resume`` may
    name (e.g. every node of the topology), or a callable returning them, asked at every check (the
    topology's nodes as they are now: a node added later may be resumed on, a removed one no longer);
    any other address is refused with 403, and so is every one but ``candidates`` when it raises.
    ``readonly_resolver``: callable (sync or async) returning the read-only nodes now, each as
    ``(host, port)`` or ``(host, port, node)`` where ``node`` names the node for good (a name never
    given to another node): a node removed at an address is never picked again, but another node
    listed later at the same address is (PER-9); without names the address stays excluded.
    ``lazy_prepare``: after a re-attach, send each protocol-level prepared statement's Parse only
    just before the client's first message that names it (Bind, Describe; all of them before SQL
    that may name them: EXECUTE, DEALLOCATE, ``pg_prepared_statements``), instead of all of them in
    the replay (issue 15 stall: sysbench prepares ~180 statements per session). Off: all at once.
    ``pre_attach``: let :meth:`PersistentProxy.prepare` open the sessions' next back connections on
    the node about to be promoted while the switchover runs (one extra login per session there,
    briefly; issue 15 stall). Off: every session re-attaches after the promotion.
    ``release_after_logins``: at a resume, the held statements go on once every kept session's
    login on the new principal is done (each still waits for its own session's replay), or after
    this many seconds at most (issue 15 stall: a session released while the others still log in
    runs its workload against their logins for the same cores). 0: each as soon as its own session
    is re-attached.
    """

    user: str
    password: str | None = None
    listen: Address = ("127.0.0.1", 0)
    front_users: dict[str, str] | None = None
    front_auth: str = "scram"
    resolver: Callable[[], Any] | None = None
    candidates: Sequence[Address] = ()
    drain_window: float = 60.0
    recovery_window: float = 60.0
    connect_timeout: float = 5.0
    retry_interval: float = 0.1
    on_event: EventCallback | None = None
    snapshot_at_drain: bool = True
    pre_attach: bool = True
    lazy_prepare: bool = True
    release_after_logins: float = 0.3
    database: str = "postgres"  # database used by the proxy's own probes
    auth_timeout: float = 60.0  # startup + authentication of a front client
    eager_reattach: bool = True  # unplanned failover: re-attach idle sessions at once
    auto_resume: bool = False
    max_message_size: int = pq.DEFAULT_MAX_MESSAGE_SIZE
    allowed_principals: Sequence[Address] | Callable[[], Sequence[Address]] = ()
    readonly_resolver: Callable[[], Any] | None = None  # PER-9: the read-only nodes now
    endpoints: Sequence[tuple[str, Address]] = ()  # PER-10: extra listeners (kind, address)
    removal_window: float = 60.0  # PER-9: how long a query running on a removed node may take
    # issue 15, a process per core (harness.persistproxy.workers): this proxy is worker ``worker`` of
    # ``workers``; ``sockets`` are listening sockets made by the supervisor (listen, then one per
    # endpoint) used instead of binding; ``cancel_forward(owner, pid, secret)`` hands a CancelRequest
    # whose key another worker issued to that worker.
    worker: int = 0
    workers: int = 1
    sockets: Sequence[Any] = ()
    cancel_forward: Callable[[int, int, int], Any] | None = None

    def __post_init__(self) -> None:
        if self.front_auth not in ("scram", "password", "trust"):
            raise ConfigError(f"front_auth must be scram, password or trust, not {self.front_auth!r}")
        if self.resolver is None and not self.candidates:
            raise ConfigError("give a resolver or at least one candidate backend address")
        if (isinstance(self.max_message_size, bool) or not isinstance(self.max_message_size, int)
                or not _MIN_MESSAGE_SIZE <= self.max_message_size <= pq.MAX_MESSAGE_LEN):
            raise ConfigError(f"max_message_size must be an integer number of bytes from {_MIN_MESSAGE_SIZE} "
                              f"to {pq.MAX_MESSAGE_LEN} (1 GiB), not {self.max_message_size!r}")
        for kind, _ in self.endpoints:
            if kind not in READONLY_ENDPOINTS:
                raise ConfigError(f"endpoint kind must be one of {', '.join(READONLY_ENDPOINTS)}, not {kind!r}")
        if self.endpoints and self.readonly_resolver is None:
            raise ConfigError("read-only endpoints need a readonly_resolver (the read-only nodes' addresses)")
        if not 0 <= self.worker < self.workers:
            raise ConfigError(f"worker must be from 0 to workers - 1 ({self.workers - 1}), not {self.worker}")
        if self.sockets and len(self.sockets) != 1 + len(self.endpoints):
            raise ConfigError("sockets must hold one listening socket for listen and one per endpoint")
        if self.front_users is None:
            self.front_users = {self.user: self.password or ""}


class SessionClosed(Exception):
    """The session was closed by the proxy (reason already sent to the client)."""


class Session:
    """One front connection and its current back connection (PER-1 two layers)."""

    def __init__(self, proxy: PersistentProxy, sid: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, endpoint: str = CLUSTER) -> None:
        self.proxy = proxy
        self.id = sid
        self.endpoint = endpoint
        self.fr = reader
        self.fw = writer
        self.fbuf = bytearray()
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.client = f"{peer[0]}:{peer[1]}"
        self.state: SessionState | None = None
        self.back: BackConn | None = None
        self.back_task: asyncio.Task[None] | None = None
        self.task: asyncio.Task[Any] | None = None
        self.back_lock = asyncio.Lock()
        self.key = proxy.new_cancel_key()
        self.user = ""
        self.database = ""
        self.closed = False
        self.ready = False  # startup finished (ReadyForQuery sent)
        self.detached = False  # back dropped on purpose by a planned drain
        self.held = False
        self.close_reason: str | None = None
        self.opened_at = time.monotonic()
        self.lost_at: float | None = None  # when an unplanned failover broke the back connection
        self.reattach_task: asyncio.Task[None] | None = None
        # the data path (:mod:`.relay`): set by _relay / the back relay
        self.done: asyncio.Future[None] | None = None
        self.ftransport: Any = writer.transport
        self.slow = False  # a coroutine serves the client now (gate, re-attach); its reading is paused
        self.slow_task: asyncio.Task[None] | None = None
        self.pending_out = bytearray()  # client bytes that arrived while no back connection was attached
        self.front_rest = 0  # bytes still to come of a large message relayed as a stream
        self.stream_back: BackConn | None = None
        self.front_eof = False
        self.front_paused = False
        self.front_full = False  # the client's side is not taking data: back reading paused
        self.back_full = False  # the back connection is not taking data: client reading paused
        self.back_error: str | None = None  # FATAL/protocol error seen on the back connection
        self.limit = proxy.config.max_message_size

    # ------------------------------------------------------------------ helpers
    async def _read_exact(self, n: int) -> bytes:
        while len(self.fbuf) < n:
            chunk = await self.fr.read(65536)
            if not chunk:
                raise ConnectionError("client closed the connection")
            self.fbuf += chunk
        out = bytes(self.fbuf[:n])
        del self.fbuf[:n]
        return out

    async def _read_front_message(self) -> tuple[bytes, bytes]:
        header = await self._read_exact(5)
        length = struct.unpack_from("!i", header, 1)[0]
        if length < 4 or length > _MAX_AUTH_MESSAGE:
            raise pq.ProtocolError(f"invalid length {length} of an authentication message "
                                   f"(4 to {_MAX_AUTH_MESSAGE} bytes)")
        body = await self._read_exact(length - 4)
        return header[:1], header + body

    async def _send(self, data: bytes) -> None:
        self.fw.write(data)
        await self.fw.drain()

    async def fail(self, code: str, message: str, *, rule: str | None = None, reason: str | None = None,
                   detail: str | None = None, severity: str = "FATAL") -> None:
        """Send a FATAL ErrorResponse to the client and close both layers of this session only."""
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason or message
        with contextlib.suppress(OSError, RuntimeError):
            if not self.fw.is_closing():
                self.fw.write(pq.error_response(severity, code, message, detail))
                await asyncio.wait_for(self.fw.drain(), 1.0)
        self._teardown()
        if rule is not None:
            self.proxy._count_closed(self, reason or message, rule)

    def _teardown(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError, RuntimeError):
            self.fw.close()
        if self.back is not None:
            self.back.close()
            self.back = None
        current = asyncio.current_task()
        for task in (self.back_task, self.task, self.reattach_task, self.slow_task):
            if task is not None and task is not current and not task.done():
                task.cancel()

    # ------------------------------------------------------------------ startup
    async def run(self) -> None:
        """Serve the session until either side ends it. Never raises (other sessions unaffected)."""
        self.task = asyncio.current_task()
        try:
            try:
                params = await asyncio.wait_for(self._handshake(), self.proxy.config.auth_timeout)
            except TimeoutError:
                await self.fail(PROTOCOL_VIOLATION, "startup/authentication not finished within "
                                f"{self.proxy.config.auth_timeout:g} s")
                return
            if params is None or not await self._open(params):
                return
            await self._relay()
        except pq.ProtocolError as exc:  # the client's fault: answered and logged, no traceback
            log.info("session %s: protocol violation: %s", self.id, exc)
            await self.fail(PROTOCOL_VIOLATION, f"protocol violation: {exc}")
        except SessionClosed:
            pass
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # never let one session take the proxy down
            log.exception("session %s failed", self.id)
            await self.fail("XX000", f"persistent proxy internal error: {exc}")
        finally:
            self._teardown()
            self.proxy._forget(self)

    async def _handshake(self) -> dict[str, str] | None:
        """SSL/GSS refusal, cancel requests, startup packet and front authentication; returns the
        startup parameters once AuthenticationOk was sent, or None if the session ended."""
        while True:
            raw_len = await self._read_exact(4)
            length = struct.unpack("!i", raw_len)[0]
            if length < 8 or length > pq.MAX_STARTUP_LEN:
                raise pq.ProtocolError(f"invalid startup packet length {length}")
            body = await self._read_exact(length - 4)
            code = struct.unpack_from("!i", body, 0)[0]
            if code in (pq.SSL_REQUEST, pq.GSSENC_REQUEST):
                await self._send(b"N")
                continue
            if code == pq.CANCEL_REQUEST:
                if len(body) >= 12:
                    pid, secret = struct.unpack_from("!ii", body, 4)
                    await self.proxy._cancel(pid, secret)
                self._teardown()
                return None
            break
        code, params = pq.parse_startup(body)
        if code >> 16 != 3:
            await self.fail("0A000", f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: "
                            "the persistent proxy speaks protocol 3.0")
            return None
        unsupported = [k for k in params if k.startswith("_pq_.")]
        if code & 0xFFFF or unsupported:
            await self._send(pq.negotiate_protocol_version(0, unsupported))
            for k in unsupported:
                params.pop(k)
        if params.get("replication", "false").lower() not in _FALSE:
            await self.fail("0A000", "replication connections are not supported by the persistent proxy")
            return None
        params.pop("replication", None)
        self.user = params.get("user", "")
        if not self.user:
            await self.fail("28000", "no PostgreSQL user name specified in startup packet")
            return None
        self.database = params.setdefault("database", self.user)
        if not await self._authenticate():
            return None
        await self._send(pq.auth_request(0))
        return params

    async def _open(self, params: dict[str, str]) -> bool:
        """Attach the first back connection (held during a drain) and finish the startup."""
        self.state = SessionState({k: v for k, v in params.items() if k != "user"})
        self.proxy._emit("persist.session_open", session=self.id, client=self.client, user=self.user,
                         database=self.database)
        await self.proxy._wait_gate(self)
        try:
            async with self.back_lock:
                await self._attach(self.proxy._recovery_deadline(), replay=False)
        except BackendError as exc:
            await self.fail(exc.code if exc.code.startswith(("28", "3D", "53")) else CONNECTION_FAILURE,
                            f"persistent proxy: cannot open a session on the principal: {exc}")
            return False
        assert self.back is not None
        out = [pq.parameter_status(k, v) for k, v in self.back.params.items()]
        out.append(pq.backend_key_data(*self.key))
        out.append(pq.ready_for_query(b"I"))
        await self._send(b"".join(out))
        self.state.reported = dict(self.back.params)
        self.ready = True
        return True

    async def _authenticate(self) -> bool:
        cfg = self.proxy.config
        users = cfg.front_users or {}
        if cfg.front_auth == "trust":
            if self.user not in users:
                await self.fail("28000", f'role "{self.user}" is not allowed by the persistent proxy')
                return False
            return True
        known = self.user in users
        if cfg.front_auth == "password":
            await self._send(pq.auth_request(3))
            kind, message = await self._read_front_message()
            supplied = pq.read_cstr(pq.payload(message), 0)[0] if kind == b"p" else None
            if not known or supplied != users[self.user]:
                await self.fail("28P01", f'password authentication failed for user "{self.user}"')
                return False
            return True
        verifier = self.proxy._verifier(self.user)
        server = ScramServer(verifier)
        await self._send(pq.auth_request(10, pq.cstr(MECHANISM) + b"\0"))
        try:
            kind, message = await self._read_front_message()
            data = pq.payload(message)
            mech, pos = pq.read_cstr(data, 0)
            if kind != b"p" or mech != MECHANISM:
                raise ScramError(f"unsupported SASL mechanism {mech!r}")
            n = struct.unpack_from("!i", data, pos)[0]
            first = data[pos + 4:pos + 4 + n]
            await self._send(pq.auth_request(11, server.server_first(first)))
            kind, message = await self._read_front_message()
            if kind != b"p":
                raise ScramError("expected a SASLResponse")
            final = server.server_final(pq.payload(message))
        except (ScramError, ValueError, struct.error, pq.ProtocolError):
            await self.fail("28P01", f'password authentication failed for user "{self.user}"')
            return False
        if not known:
            await self.fail("28P01", f'password authentication failed for user "{self.user}"')
            return False
        await self._send(pq.auth_request(12, final))
        return True

    # ------------------------------------------------------------------ back side
    async def _attach(self, deadline: float, replay: bool, address: Address | None = None,
                      check: bool = False, on_login: Callable[[], None] | None = None) -> None:
        """Open a back connection to the principal (retrying until ``deadline``, PER-3), replay the
        session's state on it when ``replay`` (PER-2) and start relaying its messages. ``check``:
        ``address`` was not probed first, so this login itself must show a server out of recovery
        (:meth:`PersistentProxy.principal_at_login`) before anything is replayed on it. ``on_login``
        is called once the login is done (or has failed for good)."""
        try:
            back = await self._login_back(deadline, address, check)
        finally:
            if on_login is not None:
                on_login()
        if replay:
            try:
                await self._replay(back)
            except (BackendError, OSError) as exc:
                back.close()
                raise BackendError(f"session state could not be replayed: {exc}", "REPLAY") from exc
            self._replayed(back)
        self._install(back)

    async def _login_back(self, deadline: float, address: Address | None, check: bool) -> BackConn:
        """Log in to the principal (``address``, else the session's resolver), retrying until
        ``deadline`` (PER-3); see :meth:`_attach` for ``check``."""
        assert self.state is not None
        cfg = self.proxy.config
        last: Exception | None = None
        while True:
            try:
                target = address or await self.proxy.resolve_for(self)
                back = await connect_backend(target, cfg.user, cfg.password, self.state.startup,
                                             cfg.connect_timeout)
                if not check or await self.proxy.principal_at_login(back, target, deadline):
                    break
                back.close()
                last = BackendError(f"{target[0]}:{target[1]} is still in recovery (not a principal)")
            except BackendError as exc:
                last = exc
                if exc.code.startswith(("28", "3D")):  # bad credentials / database: no retry
                    raise
                if check and exc.code == CANNOT_CONNECT_NOW:  # starting up, or no hot standby: one probe waits
                    await self.proxy.wait_principal(target, deadline)
            if time.monotonic() >= deadline:
                raise BackendError(f"no principal within the recovery window: {last}", CONNECTION_FAILURE)
            await asyncio.sleep(cfg.retry_interval)
        return back

    def _install(self, back: BackConn) -> None:
        self.back = back
        self.detached = False
        self._start_back_relay(back)

    async def _replay(self, back: BackConn) -> None:
        """Replay GUCs, LISTENs and prepared statements on ``back`` (PER-2); :meth:`_replayed` counts
        it once the connection is used."""
        assert self.state is not None
        st = self.state
        await back.simple_query(";\n".join(st.replay_sql()))
        # settings the server reports (ParameterStatus) whose value differs now: the client encoding
        # (replay ran in UTF8) and anything changed outside SET, e.g. set_config() inside a query
        fixes = [f"SELECT pg_catalog.set_config({quote_literal(k)}, {quote_literal(v)}, false)"
                 for k, v in st.reported.items()
                 if k not in NOT_SETTABLE and back.params.get(k) != v]
        if fixes:
            await back.simple_query(";\n".join(fixes))
        if self.proxy.config.lazy_prepare:  # each Parse goes just before its first use (_lazy_parses)
            back.missing = set(st.prepared_parse)
            return
        parses = st.replay_parse()  # raw bytes, in the client's encoding: after it is restored
        if parses:
            back.writer.write(b"".join(parses) + pq.SYNC)
            await back.writer.drain()
            error = None
            while True:
                kind, message = await back.read_message()
                if kind == b"E":
                    error = pq.parse_error(message)
                elif kind == b"S":
                    name, value = pq.parse_parameter_status(message)
                    back.params[name] = value
                elif kind == b"Z":
                    break
            if error is not None:
                raise BackendError(f"re-preparing statements failed: {error}")

    def _replayed(self, back: BackConn, warm: bool = False) -> None:
        st = self.state
        assert st is not None
        st.counters["replays"] += 1
        self.proxy._emit("persist.replayed", session=self.id, address=f"{back.address[0]}:{back.address[1]}",
                         gucs=len(st.committed.gucs) + len(st.snapshot_gucs),
                         prepared=len(st.prepared_parse) + len(st.prepared_sql), lazy=len(back.missing), warm=warm)
        self.proxy.counters["replays"] += 1

    async def reattach(self, deadline: float, address: Address | None = None, check: bool = False,
                       on_login: Callable[[], None] | None = None) -> None:
        """Re-open the back connection on the (new) principal and replay state (PER-1, PER-2); a
        connection pre-attached to ``address`` during the drain (:mod:`.warm`) is taken as it is.
        ``check``, ``on_login``: see :meth:`_attach` (``on_login`` is called in every case)."""
        called = False

        def logged_in() -> None:
            nonlocal called
            if not called and on_login is not None:
                called = True
                on_login()

        try:
            await self._reattach(deadline, address, check, logged_in)
        finally:
            logged_in()

    async def _reattach(self, deadline: float, address: Address | None, check: bool,
                        on_login: Callable[[], None]) -> None:
        async with self.back_lock:
            if self.closed or self.back is not None:
                return
            warm = await self.proxy.warm.take(self.id, address) if address is not None else None
            if warm is not None and not self.closed:
                on_login()
                self._replayed(warm, warm=True)
                self.proxy.counters["pre_attached"] += 1
                self._install(warm)
            else:
                if warm is not None:
                    warm.close()
                await self._attach(deadline, replay=True, address=address, check=check, on_login=on_login)
            self.lost_at = None
            self.proxy._kept.discard(self.id)
            self.proxy.counters["reconnects"] += 1

    async def _ensure_back(self) -> None:
        if self.back is not None:
            return
        try:
            start = self.lost_at if self.lost_at is not None and not self.proxy._holding else None
            await self.reattach(self.proxy._recovery_deadline(start))
        except BackendError as exc:
            if exc.code == "REPLAY":
                await self.fail(CONNECTION_FAILURE, f"persistent connection lost: {exc} (PER-2)",
                                rule="PER-2", reason="state replay failed")
            else:
                await self.fail(CONNECTION_FAILURE,
                                "persistent connection closed: no principal accepted the session within "
                                f"the recovery window of {self.proxy.config.recovery_window:g} s (PER-3)",
                                rule="PER-3", reason="no principal within the recovery window",
                                detail=str(exc))
            raise SessionClosed() from exc
        if self.back is None:
            raise SessionClosed()

    # ------------------------------------------------------------------ back side (data path)
    def _start_back_relay(self, back: BackConn) -> None:
        """Relay ``back``'s messages to the client from now on (PER-1 data path, :mod:`.relay`)."""
        self.back_error = None
        tap = Tap(functools.partial(self._back_data, back), functools.partial(self._back_gone, back),
                  self._back_full, self._back_drained)
        leftover, ended = take_over(back.reader, back.writer, tap)
        if leftover:
            back.buf += leftover
        if self.front_full:
            back.writer.transport.pause_reading()
        if back.buf:
            data = bytes(back.buf)
            back.buf.clear()
            self._back_data(back, data)
        if ended:
            asyncio.get_running_loop().call_soon(self._back_gone, back, None)

    def _stop_back_relay(self, back: BackConn) -> None:
        """Hand ``back`` to its stream again (the proxy reads it itself, e.g. the drain snapshot);
        bytes the relay had not passed on stay in ``back.buf``, where :meth:`BackConn.read_message`
        looks first."""
        give_back(back.writer)
        if self.front_full:
            back.writer.transport.resume_reading()

    def _back_data(self, back: BackConn, data: bytes) -> None:
        """A chunk from the back connection: frame it, track the state-changing messages, relay it
        whole to the client (DataRows untouched), one write per chunk."""
        if back is not self.back:
            return
        buf = back.buf
        if buf:
            buf += data
            data = bytes(buf)
            buf.clear()
        st = self.state
        assert st is not None
        n = len(data)
        out_start = 0
        pieces: list[bytes] | None = None
        try:
            pos = simple_answer(st, data)  # the commonest answer, tracked in one call (.fastpath)
            if pos == n:
                try:
                    self.ftransport.write(data)
                except (ConnectionError, OSError, RuntimeError):
                    pass  # the client is gone: its relay ends the session
                return
            # else the message loop: a run of DataRows is one entry (nothing left when pos > 0)
            kinds, ends = frames(data, DATA_ROW) if pos == 0 else (b"", [])
            for t, end in zip(kinds, ends, strict=True):
                if t == 68:  # DataRows: the hot path, relayed untouched
                    st.rows_started = True
                elif t == 50:  # BindComplete
                    st.on_bind_complete()
                elif st.injected and (t == 49 or t == 69 or t == 90) and st.on_injected_answer(t):
                    # the answer to the proxy's own Parse / Sync (lazy re-prepare): not the client's
                    if pieces is None:
                        pieces = []
                    pieces.append(data[out_start:pos])
                    out_start = pos = end
                    continue
                elif t == 90 and end - pos == 6:  # ReadyForQuery
                    st.on_ready(data[pos + 5])
                elif t == 67:  # CommandComplete: its tag, undecoded
                    tag_end = data.find(b"\0", pos + 5, end)
                    if tag_end < 0:
                        raise pq.ProtocolError("backend sent a CommandComplete with no NUL-terminated tag")
                    st.on_command_complete(data[pos + 5:tag_end])
                elif t == 84 or t == 110:  # RowDescription, NoData
                    st.on_description()
                else:
                    message = data[pos:end]
                    if t == 69 and not st.inflight and not st.unsynced:
                        # an error while nothing was asked: the server is ending this connection
                        err = pq.parse_error(message)
                        if err.severity in ("FATAL", "PANIC"):
                            self.back_error = str(err)
                            if pieces is None:
                                pieces = []
                            pieces.append(data[out_start:pos])
                            out_start = pos = end
                            continue
                    st.on_back(_KINDS[t], message)
                pos = end
            if n - pos >= 5 and _LENGTH(data, pos + 1)[0] < 4:  # where the walk stopped: a bad frame?
                raise pq.ProtocolError(f"backend sent invalid length {_LENGTH(data, pos + 1)[0]}")
        except pq.ProtocolError as exc:
            self.back_error = str(exc)
            back.writer.transport.abort()  # connection_lost follows: handled as a lost back connection
            return
        except Exception as exc:  # a bug must close this session, not leave it hanging
            log.exception("session %s: relaying from the server failed", self.id)
            self._spawn_fail("XX000", f"persistent proxy internal error: {exc}")
            return
        if pos < n:
            buf += data[pos:]
        if pieces is not None:
            pieces.append(data[out_start:pos])
            out = b"".join(pieces)
        else:
            out = data if pos == n else data[:pos]
        if out:
            try:
                self.ftransport.write(out)
            except (ConnectionError, OSError, RuntimeError):
                pass  # the client is gone: its relay ends the session

    def _back_gone(self, back: BackConn, exc: BaseException | None) -> None:
        """The back connection ended; unless that was on purpose (drain, detach, a newer back
        connection, the session closing), it is an unplanned failover (:meth:`_back_lost`)."""
        if back is not self.back or self.detached or self.closed:
            return
        error = self.back_error or (str(exc) if exc is not None else None)
        self.back_task = asyncio.create_task(self._back_lost(error), name=f"persist-back-lost-{self.id}")

    def _back_full(self) -> None:
        """The back connection's send buffer is full: stop reading the client until it drains."""
        self.back_full = True
        self._pause_front()

    def _back_drained(self) -> None:
        self.back_full = False
        self._resume_front()

    def _spawn_fail(self, code: str, message: str) -> None:
        """Close this session from a data-path callback (``fail`` is a coroutine)."""
        self.back_task = asyncio.create_task(self.fail(code, message))

    async def _back_lost(self, server_error: str | None) -> None:
        """Unplanned failover: the back connection broke without a drain. Idle sessions are kept
        (re-attached on next use, PER-1); the others are closed with their reason (PER-4..8)."""
        assert self.state is not None
        back = self.back
        self.back = None
        if back is not None:
            back.close()
        self.proxy.counters["back_lost"] += 1
        self.lost_at = time.monotonic()
        blocker = self.state.blocker()
        if blocker is None:
            self.proxy._emit("persist.back_lost", session=self.id, kept=True, error=server_error)
            self.proxy._count_kept(self)
            if self.proxy.config.eager_reattach and not self.proxy._holding:
                self.reattach_task = asyncio.create_task(self._reattach_now())
            return
        reason, rule = blocker
        self.proxy._emit("persist.back_lost", session=self.id, kept=False, error=server_error)
        await self.fail(CONNECTION_FAILURE,
                        f"persistent connection not kept across failover: {reason} ({rule})",
                        rule=rule, reason=reason, detail=f"back connection lost: {server_error}")

    def detach_back(self) -> None:
        """Drop the back connection of an idle session on purpose (no failover handling, PER-9): the
        next attach picks a node again."""
        self.detached = True
        if self.back_task is not None:
            self.back_task.cancel()
        if self.back is not None:
            self.back.close()
            self.back = None
        self.lost_at = time.monotonic()

    async def _reattach_now(self) -> None:
        """Unplanned failover, eager mode: re-attach at once (retrying for the recovery window),
        so that an idle client is closed with PER-3 at the end of the window, not at its next use."""
        try:
            await self._ensure_back()
        except SessionClosed:
            pass

    # ------------------------------------------------------------------ front side (data path)
    async def _relay(self) -> None:
        """Serve the logged-in session until it ends (PER-1 data path): the client's chunks go to
        :meth:`_front_data` as they arrive (:mod:`.relay`); returns when the client leaves, raises
        what ended the session otherwise (a protocol violation, :class:`SessionClosed`)."""
        self.done = asyncio.get_running_loop().create_future()
        self.ftransport = self.fw.transport
        tap = Tap(self._front_data, self._front_lost, self._front_full_on, self._front_drained)
        leftover, ended = take_over(self.fr, self.fw, tap)
        data = bytes(self.fbuf) + leftover
        self.fbuf.clear()
        if ended:
            self.front_eof = True
        if data:
            self._consume(data)
        if self.front_eof and not self.slow:
            self._end()
        await self.done

    def _end(self, exc: BaseException | None = None) -> None:
        """End :meth:`_relay`: normally (``exc`` None) or with ``exc``."""
        done = self.done
        if done is not None and not done.done():
            if exc is None:
                done.set_result(None)
            else:
                done.set_exception(exc)

    def _front_data(self, data: bytes) -> None:
        """A chunk from the client."""
        back = self.back
        if back is not None and not (self.front_rest or self.fbuf or self.slow or self.pending_out or back.missing
                                     or self.proxy._holding) and len(data) <= self.limit:
            try:
                took = simple_request(self.state, data)  # type: ignore[arg-type]
            except Exception as exc:  # a bug must end this session (as in _consume), not the loop's callback
                self._end(exc)
                return
            if took:
                # the commonest request, tracked in one call (.fastpath); the gate is open (nothing
                # held, a back connection attached), so it goes on at once, as _scan_front would send it
                try:
                    back.writer.transport.write(data)
                except (ConnectionError, OSError, RuntimeError):
                    pass  # the back relay sees the broken connection and decides (PER-1 / PER-4..8)
                return
        if self.front_rest:
            data = self._stream_rest(data)
            if not data:
                return
        if self.fbuf or self.slow:
            self.fbuf += data
            if self.slow:
                return
            data = bytes(self.fbuf)
            self.fbuf.clear()
        self._consume(data)

    def _front_lost(self, exc: BaseException | None) -> None:
        self.front_eof = True
        if not self.slow:
            self._end()

    def _front_full_on(self) -> None:
        """The client's receive side is full: stop reading the back connection until it drains."""
        self.front_full = True
        if self.back is not None:
            with contextlib.suppress(RuntimeError):  # uvloop: the transport closed meanwhile
                self.back.writer.transport.pause_reading()

    def _front_drained(self) -> None:
        self.front_full = False
        if self.back is not None:
            with contextlib.suppress(RuntimeError):
                self.back.writer.transport.resume_reading()

    def _pause_front(self) -> None:
        if not self.front_paused:
            self.front_paused = True
            with contextlib.suppress(RuntimeError):
                self.ftransport.pause_reading()

    def _resume_front(self) -> None:
        if self.front_paused and not self.slow and not self.back_full and not self.closed:
            self.front_paused = False
            with contextlib.suppress(RuntimeError):
                self.ftransport.resume_reading()

    def _consume(self, data: bytes) -> None:
        """Frame, track and relay ``data`` (whole messages; an incomplete last one waits in
        ``fbuf``), or hand over to :meth:`_slow_front` where a coroutine must wait first."""
        try:
            pos = self._scan_front(data)
        except BaseException as exc:  # a protocol violation, SessionClosed: ends the session
            self._end(exc)
            return
        if pos < len(data):
            self.fbuf[:0] = data[pos:]
        if self.pending_out and not self.slow:
            self._go_slow(gate=False)

    def _scan_front(self, buf: bytes) -> int:
        """The relay loop over the client's messages in ``buf``; returns how far it consumed."""
        st = self.state
        assert st is not None
        proxy = self.proxy
        limit = proxy.config.max_message_size
        n = len(buf)
        pos = 0
        block_start = 0
        missing = self.back.missing if self.back is not None else None
        if not missing and n <= limit and not proxy._holding and self.back is not None and simple_request(st, buf):
            # the commonest request, tracked in one call (.fastpath); the gate is open (nothing held,
            # a back connection attached), so it goes on at once, as the loop below would send it
            self._write_back(buf)
            return n
        kinds, ends = frames(buf, NO_RUNS)  # compiled: the complete messages in one call
        stop = ends[-1] if ends else 0
        rest = 0
        if n - stop >= 5:  # where the walk stopped: a bad header, or an incomplete message
            t = buf[stop]
            length = _LENGTH(buf, stop + 1)[0]
            if t not in _FRONT_TYPES or length < 4 or length > limit:
                _check_front_header(t, length, limit)  # raises the ProtocolError naming the problem
            if _streamable(t, length, buf, stop, n):  # a large message the proxy does not need whole:
                kinds += _KINDS[t]  # its head is handled as a message, the rest relayed as it comes
                ends.append(n)
                rest = stop + 1 + length - n
        for t, end in zip(kinds, ends, strict=True):
            if t not in _FRONT_TYPES or end - pos > limit + 1:
                _check_front_header(t, end - pos - 1, limit)  # raises the ProtocolError naming the problem
            if t == 88:  # Terminate
                self._terminate(buf[block_start:pos] if pos > block_start else b"")
                return n
            if t not in _CONTINUING and not st.inflight and not st.unsynced and st.txn_status == "I":
                # a new request from an idle session: the switchover gate (PER-4 hold)
                if pos > block_start:
                    self._write_back(buf[block_start:pos])
                    block_start = pos
                if proxy._holding or self.back is None:
                    self._go_slow(gate=True)
                    return pos
            if missing and t in _NAMING:  # lazy re-prepare: the statements this message names first
                inject = self._lazy_parses(t, buf[pos:end], missing)
                if inject:
                    if pos > block_start:
                        self._write_back(buf[block_start:pos])
                    block_start = pos
                    self._write_back(inject)
            if t != 100:  # CopyData carries no state
                try:
                    st.on_front(_KINDS[t], buf[pos:end])
                except pq.ProtocolError as exc:
                    raise pq.ProtocolError(f"malformed {pq.FRONT_NAMES[t]} message: {exc}") from None
            pos = end
        if rest:
            self._write_back(buf[block_start:n])
            self.front_rest = rest
            self.stream_back = self.back
            return n
        if pos > block_start:
            self._write_back(buf if block_start == 0 and pos == n else buf[block_start:pos])
        return pos

    def _terminate(self, before: bytes) -> None:
        """The client's Terminate: relay what came before it, drop the back connection, end."""
        if before:
            self._write_back(before)
        if self.back is not None:
            self.back.close()
            self.back = None
        self.proxy._emit("persist.session_close", session=self.id, by="client")
        self._end()

    def _lazy_parses(self, t: int, message: bytes, missing: set[str]) -> bytes:
        """Lazy re-prepare (PER-2, issue 15 stall): the Parse messages to send on this back connection
        before the client's ``message`` so that every prepared statement it may name exists there -
        the one a Bind or Describe names; all of them before a Parse or Query whose SQL may name
        them (EXECUTE, DEALLOCATE, ``pg_prepared_statements``). A Close or a new Parse of a name
        only forgets it. Before a new request each Parse is followed by a Sync of the proxy's, and
        their answers, an error included, are the proxy's (a statement that cannot be prepared again
        then fails at its use, as on the server); inside one, an error answers the client's request."""
        st = self.state
        assert st is not None
        if t == 66:  # Bind: portal, statement
            name = pq.read_cstr(message, pq.read_cstr(message, 5)[1])[0]
            return self._inject([name], missing, quiet=False) if name in missing else b""
        if t == 68 or t == 67:  # Describe / Close: 'S' + statement name, or 'P' + portal
            if message[5] != 83:
                return b""
            name = pq.read_cstr(message, 6)[0]
            if t == 67:
                missing.discard(name)
                return b""
            return self._inject([name], missing, quiet=False) if name in missing else b""
        if t == 80:  # Parse: the client defines this name itself
            missing.discard(pq.read_cstr(message, 5)[0])
        low = message.lower()
        if b"execute" in low or b"deallocate" in low or b"prepared_statements" in low:
            return self._inject(sorted(missing), missing, quiet=not st.unsynced)
        return b""

    def _inject(self, names: list[str], missing: set[str], quiet: bool) -> bytes:
        st = self.state
        assert st is not None
        out = []
        for name in names:
            missing.discard(name)
            raw = st.prepared_parse.get(name)
            if raw is not None:
                out.append(raw)
                st.on_injected_parse(raw, quiet)
                self.proxy.counters["lazy_prepares"] += 1
                if quiet:  # one Sync each: a Parse that fails does not make the server skip the next
                    out.append(pq.SYNC)
                    st.on_injected_sync()
        return b"".join(out)

    def _stream_rest(self, data: bytes) -> bytes:
        """Relay the next bytes of a large CopyData/Bind/FunctionCall message to the back connection
        as they arrive, never holding more than one read chunk (issue 17: bounded memory); returns
        what follows the message."""
        take = data if len(data) <= self.front_rest else data[:self.front_rest]
        self.front_rest -= len(take)
        back = self.back
        if back is None or back is not self.stream_back:
            self.front_rest = 0
            self._spawn_fail(CONNECTION_FAILURE, "persistent connection lost: the back connection broke "
                             "while a large message was being relayed")
            self._end(SessionClosed())
            return b""
        self._write_back(take)
        return data[len(take):]

    def _write_back(self, data: bytes) -> None:
        back = self.back
        if back is None:  # re-attached by _slow_front before anything else is sent
            if not self.closed:
                self.pending_out += data
            return
        try:
            back.writer.transport.write(data)
        except (ConnectionError, OSError, RuntimeError):
            pass  # the back relay sees the broken connection and decides (PER-1 / PER-4..8)

    def _go_slow(self, gate: bool) -> None:
        """Stop reading the client and let a coroutine wait for the switchover gate (``gate``) and
        a back connection, then go on with what the client sent meanwhile."""
        self.slow = True
        self._pause_front()
        self.slow_task = asyncio.create_task(self._slow_front(gate), name=f"persist-gate-{self.id}")

    async def _slow_front(self, gate: bool) -> None:
        try:
            if gate:
                await self.proxy._wait_gate(self)
            await self._ensure_back()
        except asyncio.CancelledError:
            self._end()
            return
        except BaseException as exc:  # SessionClosed (the client was told), or a bug: ends the session
            self._end(exc)
            return
        self.slow = False
        out, self.pending_out = self.pending_out, bytearray()
        if out:
            self._write_back(bytes(out))
        data = bytes(self.fbuf)
        self.fbuf.clear()
        if data:
            self._consume(data)
        if not self.slow:
            if self.front_eof:
                self._end()
            else:
                self._resume_front()


async def _is_principal(address: Address, cfg: ProxyConfig) -> bool:
    """Whether the server at ``address`` accepts a login and is out of recovery (PER-1 resume)."""
    probe = await connect_backend(address, cfg.user, cfg.password, {"database": cfg.database}, cfg.connect_timeout)
    try:
        rows = await asyncio.wait_for(probe.simple_query("SELECT pg_catalog.pg_is_in_recovery()"),
                                      cfg.connect_timeout)
    finally:
        probe.close()
    return rows[0][0][0] == "f"


def _check_front_header(t: int, length: int, limit: int) -> None:
    """Refuse a frontend message of an unknown type, an impossible length or one above
    ``max_message_size`` (issue 17) with a :class:`ProtocolError` naming the problem."""
    if t not in _FRONT_TYPES:
        raise pq.ProtocolError(f"unexpected message type {chr(t)!r}")
    name = pq.FRONT_NAMES[t]
    if length < 4:
        raise pq.ProtocolError(f"invalid length {length} of a {name} message (at least 4)")
    if length > limit:
        raise pq.ProtocolError(f"{name} message of {length} bytes exceeds the persistent proxy's limit of "
                               f"{limit} bytes (max_message_size)")


def _streamable(t: int, length: int, buf: bytearray, pos: int, n: int) -> bool:
    """Whether the incomplete message at ``pos`` can be relayed as a stream now: a large CopyData or
    FunctionCall at once, a large Bind once its portal and statement names have arrived."""
    if t not in _STREAMED or length < _STREAM_FROM:
        return False
    if t != 66:  # 'B'
        return True
    first = buf.find(b"\0", pos + 5, n)
    return first >= 0 and buf.find(b"\0", first + 1, n) >= 0


def _track_front(st: SessionState, t: int, message: bytes) -> None:
    """Record a frontend message in the session state; a malformed one is a :class:`ProtocolError`
    naming the message (08P01 for the client, no traceback)."""
    try:
        st.on_front(message[:1], message)
    except pq.ProtocolError as exc:
        raise pq.ProtocolError(f"malformed {pq.FRONT_NAMES[t]} message: {exc}") from None


class PersistentProxy:
    """Reference implementation of PolarProxy persistent connections for PostgreSQL (PER-1..8).

    Use from asyncio: ``await proxy.start()``, ``await proxy.drain()``, ``await proxy.resume()``,
    ``proxy.status()``, ``await proxy.stop()``. See :class:`ThreadedPersistentProxy` for threads."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self._server: asyncio.AbstractServer | None = None
        self.sessions: dict[int, Session] = {}
        self._next_id = config.worker + 1  # session IDs unique across the workers of a supervisor
        self._holding = False
        self._gate: asyncio.Event | None = None
        self._drained_at: float | None = None
        self._recovery_task: asyncio.Task[None] | None = None
        self._verifiers: dict[str, ScramVerifier] = {}
        self._kept: set[int] = set()
        #: per address, the one probe loop the re-attaches that found it in recovery wait on (resume)
        self._recovery_waits: dict[Address, asyncio.Task[bool]] = {}
        self.counters: Counter[str] = Counter()
        self.closed_by_reason: Counter[str] = Counter()
        self.address: Address | None = None
        self._principal: Address | None = None
        self._lock: asyncio.Lock | None = None
        self._extra_servers: list[asyncio.AbstractServer] = []
        #: the read-only endpoints' bound addresses, ``[(kind, (host, port))]`` (PER-10)
        self.endpoint_addresses: list[tuple[str, Address]] = []
        # read-only nodes removed (PER-9): address -> the name of the node removed there (None: unknown,
        # then nothing at that address is picked again); never picked again, another node there is
        self._removed: dict[Address, str | None] = {}
        self.warm = WarmSet()  # back connections opened ahead on the node about to be promoted
        self._warm_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> Address:
        """Start listening; returns the bound ``(host, port)``."""
        self._gate = asyncio.Event()
        self._gate.set()
        self._lock = asyncio.Lock()
        socks = list(self.config.sockets)
        where: dict[str, Any] = {"sock": socks[0]} if socks else {"host": self.config.listen[0],
                                                                 "port": self.config.listen[1]}
        self._server = await asyncio.start_server(self._accept, **where, backlog=512)
        sock = self._server.sockets[0].getsockname()
        self.address = (sock[0], sock[1])
        for i, (kind, listen) in enumerate(self.config.endpoints):
            where = {"sock": socks[1 + i]} if socks else {"host": listen[0], "port": listen[1]}
            server = await asyncio.start_server(functools.partial(self._accept, endpoint=kind), **where, backlog=512)
            self._extra_servers.append(server)
            bound = server.sockets[0].getsockname()
            self.endpoint_addresses.append((kind, (bound[0], bound[1])))
        return self.address

    async def stop(self) -> None:
        """Stop listening and close every session."""
        if self._server is not None:
            self._server.close()
        for server in self._extra_servers:
            server.close()
        for s in list(self.sessions.values()):
            s._teardown()
        self.warm.discard()
        if self._recovery_task is not None:
            self._recovery_task.cancel()
        tasks = [s.task for s in self.sessions.values() if s.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      endpoint: str = CLUSTER) -> None:
        sid = self._next_id
        self._next_id += self.config.workers
        session = Session(self, sid, reader, writer, endpoint)
        self.sessions[sid] = session
        self.counters["sessions"] += 1
        await session.run()

    def _forget(self, session: Session) -> None:
        self.sessions.pop(session.id, None)
        self._kept.discard(session.id)

    # ------------------------------------------------------------------ helpers
    def _emit(self, type_: str, **fields: Any) -> None:
        cb = self.config.on_event
        if cb is None:
            return
        try:
            cb(type_, **fields)
        except Exception:  # an observer must not break the data path
            log.exception("event callback failed for %s", type_)

    def _verifier(self, user: str) -> ScramVerifier:
        users = self.config.front_users or {}
        if user not in users:  # a throw-away secret: the exchange fails like a wrong password
            return ScramVerifier(secrets.token_hex(16))
        if user not in self._verifiers:
            self._verifiers[user] = ScramVerifier(users[user])
        return self._verifiers[user]

    def _count_closed(self, session: Session, reason: str, rule: str) -> None:
        self.counters["closed"] += 1
        self.closed_by_reason[f"{rule} {reason}"] += 1
        self._kept.discard(session.id)
        self._emit("persist.closed", session=session.id, reason=reason, rule=rule)

    def _count_kept(self, session: Session) -> None:
        self.counters["kept"] += 1
        self._kept.add(session.id)
        self._emit("persist.kept", session=session.id)

    def _recovery_deadline(self, start: float | None = None) -> float:
        if start is None:
            start = self._drained_at if self._drained_at is not None else time.monotonic()
        return start + self.config.recovery_window

    async def resolve(self) -> Address:
        """The current principal: the resolver's answer, or the first candidate that is not in
        recovery (PER-1). Raises :class:`BackendError` when none is found."""
        cfg = self.config
        if cfg.resolver is not None:
            try:
                result = cfg.resolver()
                if inspect.isawaitable(result):
                    result = await result
            except BackendError:
                raise
            except Exception as exc:
                raise BackendError(f"resolver failed: {exc}") from exc
            address = (str(result[0]), int(result[1]))
        elif len(cfg.candidates) == 1:
            address = tuple(cfg.candidates[0])  # type: ignore[assignment]
        else:
            address = await probe_candidates(cfg.candidates, cfg.user, cfg.password, cfg.database,
                                             cfg.connect_timeout)
        self._principal = address
        return address

    async def resolve_for(self, session: Session) -> Address:
        """Where ``session`` goes: the principal for the cluster endpoint (PER-1), else the read-only
        node with the fewest sessions attached that has not been removed (PER-9, PER-10)."""
        if session.endpoint == CLUSTER:
            return await self.resolve()
        return await self.pick_readonly(exclude=session)

    async def _listed_readonly(self) -> list[tuple[Address, str | None]]:
        """The ``readonly_resolver``'s answer as ``[(address, node name or None)]``."""
        resolver = self.config.readonly_resolver
        if resolver is None:
            raise BackendError("no read-only nodes configured (readonly_resolver)")
        try:
            result = resolver()
            if inspect.isawaitable(result):
                result = await result
            return [((str(entry[0]), int(entry[1])), str(entry[2]) if len(entry) > 2 and entry[2] is not None
                     else None) for entry in result]
        except Exception as exc:
            raise BackendError(f"readonly_resolver failed: {exc}") from exc

    async def readonly_nodes(self) -> list[Address]:
        """The read-only nodes now (``readonly_resolver``), without the removed ones (PER-9). A node
        listed at a removed node's address under another name is a new node there: the removal
        entry goes and the new node is routed to (a node added later that got a freed address)."""
        out = []
        for address, name in await self._listed_readonly():
            if address in self._removed:
                gone = self._removed[address]
                if gone is None or name is None or name == gone:
                    continue
                del self._removed[address]
                self._emit("persist.readmitted", address=f"{address[0]}:{address[1]}", node=name, removed=gone)
            out.append(address)
        return out

    async def pick_readonly(self, exclude: Session | None = None) -> Address:
        """The least-loaded read-only node (sessions attached to it), not removed (PER-9/PER-10)."""
        nodes = await self.readonly_nodes()
        if not nodes:
            raise BackendError("no read-only node left to route to", CONNECTION_FAILURE)
        load = Counter(s.back.address for s in self.sessions.values()
                       if s is not exclude and s.back is not None and not s.closed)
        return min(nodes, key=lambda a: (load[a], nodes.index(a)))

    async def remove_node(self, address: Address, window: float | None = None,
                          node: str | None = None) -> dict[str, Any]:
        """Remove a read-only node (PER-9, PER-10): it is picked for nothing from now on; every session
        attached to it is handled as soon as it is idle (a running query gets up to ``window``,
        default ``removal_window`` = 60 s): through a ``custom-active`` (or cluster) endpoint it is
        moved to another node with its state replayed (kept), through ``custom-connection`` it is
        disconnected (57P01). A session still busy at the end of the window is closed (PER-9).
        ``node`` names the node removed (default: the name the ``readonly_resolver`` lists at
        ``address``): another node listed there later is routed to again."""
        address = (str(address[0]), int(address[1]))
        window = self.config.removal_window if window is None else float(window)
        self._removed[address] = node  # routed away at once (PER-9), named below when the caller did not
        if node is None and self.config.readonly_resolver is not None:
            with contextlib.suppress(BackendError):
                node = next((name for a, name in await self._listed_readonly() if a == address), None)
            self._removed[address] = node
        t0 = time.monotonic()
        self._emit("persist.remove_start", address=f"{address[0]}:{address[1]}", node=node, window=window)
        waiting = [s for s in self.sessions.values()
                   if s.ready and not s.closed and s.back is not None and s.back.address == address]
        moved: list[int] = []
        closed: list[dict[str, Any]] = []
        while waiting:
            still = []
            for s in waiting:
                if s.closed or s.back is None or s.back.address != address:
                    continue
                assert s.state is not None
                if not s.state.is_idle() and time.monotonic() - t0 < window:
                    still.append(s)
                    continue
                if not s.state.is_idle():
                    reason, rule = "query still running on a removed read-only node", "PER-9"
                elif s.endpoint == "custom-connection":
                    reason, rule = "its read-only node was removed (connection-based endpoint)", "PER-10"
                else:
                    s.detach_back()
                    s.reattach_task = asyncio.create_task(s._reattach_now())
                    moved.append(s.id)
                    self._emit("persist.moved", session=s.id, endpoint=s.endpoint)
                    continue
                await s.fail(ADMIN_SHUTDOWN, f"persistent connection closed: {reason} ({rule})", rule=rule,
                             reason=reason)
                closed.append({"session": s.id, "reason": reason, "rule": rule})
            waiting = still
            if waiting:
                await asyncio.sleep(0.005)
        seconds = time.monotonic() - t0
        self._emit("persist.remove_end", address=f"{address[0]}:{address[1]}", moved=len(moved),
                   closed=len(closed), seconds=seconds)
        return {"moved": moved, "closed": closed, "seconds": seconds}

    def allowed_principals(self) -> list[Address]:
        """The addresses an admin ``POST /resume`` may name: the configured ``candidates`` and
        ``allowed_principals`` - asked now when it is a callable (the topology's nodes as they are:
        one added later is allowed), only the candidates when that fails (issue 17: the proxy logs
        in there with its real credentials, so the list never widens beyond the nodes)."""
        extra: Any = self.config.allowed_principals
        if callable(extra):
            try:
                extra = list(extra())
            except Exception as exc:  # fail closed: an unreadable topology allows no node of it
                log.warning("allowed_principals failed, allowing the candidates only: %s", exc)
                extra = []
        out: list[Address] = []
        for host, port in [*self.config.candidates, *extra]:
            if (str(host), int(port)) not in out:
                out.append((str(host), int(port)))
        return out

    def allows_principal(self, address: Address) -> bool:
        """Whether ``address`` is one of :meth:`allowed_principals` (host compared case-insensitively)."""
        host, port = str(address[0]).lower(), int(address[1])
        return any(h.lower() == host and p == port for h, p in self.allowed_principals())

    async def _wait_gate(self, session: Session) -> None:
        assert self._gate is not None
        if not self._holding:
            return
        session.held = True
        try:
            await self._gate.wait()
        finally:
            session.held = False
        if session.closed:
            raise SessionClosed()

    def new_cancel_key(self) -> tuple[int, int]:
        """The BackendKeyData ``(pid, secret)`` handed to a new session: random, with
        ``pid % workers == worker`` so that any worker can route a CancelRequest to its owner."""
        n = self.config.workers
        return secrets.randbelow((1 << 31) // n) * n + self.config.worker, secrets.randbits(31)

    async def _cancel(self, pid: int, secret: int) -> None:
        cfg = self.config
        if cfg.workers > 1 and pid % cfg.workers != cfg.worker and cfg.cancel_forward is not None:
            result = cfg.cancel_forward(pid % cfg.workers, pid, secret)  # another worker's session
            if inspect.isawaitable(result):
                await result
            return
        for s in list(self.sessions.values()):
            if s.key == (pid, secret) and s.back is not None:
                self.counters["cancels"] += 1
                await send_cancel(s.back.address, s.back.pid, s.back.secret)
                return

    # ------------------------------------------------------------------ switchover API
    async def drain(self, timeout: float | None = None) -> dict[str, Any]:
        """Start a planned switchover (PER-4): hold new statements of idle sessions, wait up to
        ``timeout`` (default ``drain_window``, 60 s) for every session to become idle, then drop
        the back connections of the sessions that can be kept (PER-1) and close the others with
        their reason: temporary tables (PER-5), partial result (PER-6), open transaction (PER-7),
        cursor or COPY (PER-8), request still running (PER-4). Returns the kept and closed lists."""
        assert self._gate is not None and self._lock is not None
        window = self.config.drain_window if timeout is None else float(timeout)
        async with self._lock:
            if self._holding:  # already drained, waiting for resume: nothing more to do
                return {"kept": sorted(self._kept), "closed": [], "seconds": 0.0, "already_draining": True}
            t0 = time.monotonic()
            self._holding = True
            self._gate.clear()
            if self._recovery_task is not None:
                self._recovery_task.cancel()
            self.counters["drains"] += 1
            if self._warm_timer is not None:
                self._warm_timer.cancel()
            self._emit("persist.drain_start", sessions=len(self.sessions), window=window)
            deadline = t0 + window
            # a session that is idle stays idle while the gate holds its next statement: its snapshot
            # is taken at once, beside the wait for the busy ones (not all of them after it)
            snapshots: dict[int, asyncio.Task[tuple[str, str] | None]] = {}
            while True:
                busy = False
                for s in list(self.sessions.values()):
                    if not s.ready or s.closed or s.back is None or s.state is None:
                        continue
                    if not s.state.is_idle():
                        busy = True
                    elif (self.config.snapshot_at_drain and s.id not in snapshots
                          and s.state.blocker() is None):
                        s.detached = True
                        snapshots[s.id] = asyncio.ensure_future(self._snapshot(s))
                if not busy or time.monotonic() >= deadline:
                    break
                await asyncio.sleep(0.005)
            idle_at = time.monotonic()
            kept: list[int] = []
            closed: list[dict[str, Any]] = []
            candidates = [s for s in list(self.sessions.values())
                          if s.ready and not s.closed and s.state is not None]
            blockers = [s.state.blocker() for s in candidates]  # type: ignore[union-attr]
            for s in candidates:
                s.detached = True
            found = dict(zip(snapshots, await asyncio.gather(*snapshots.values()), strict=True))
            for i, s in enumerate(candidates):
                if blockers[i] is None and s.id in found:
                    blockers[i] = found[s.id]
            for s, blocker in zip(candidates, blockers, strict=True):
                if s.closed:
                    continue
                if blocker is not None:
                    reason, rule = blocker
                    await s.fail(ADMIN_SHUTDOWN,
                                 f"persistent connection not kept across switchover: {reason} ({rule})",
                                 rule=rule, reason=reason)
                    closed.append({"session": s.id, "reason": reason, "rule": rule})
                    continue
                if s.back is not None:
                    s.back.close()
                    s.back = None
                if s.back_task is not None:
                    s.back_task.cancel()
                kept.append(s.id)
                self._count_kept(s)
            self._warm_replay(kept)
            self._drained_at = time.monotonic()
            seconds = self._drained_at - t0
            self._emit("persist.drain_end", kept=len(kept), closed=len(closed), seconds=seconds,
                       idle_seconds=idle_at - t0)
            self._recovery_task = asyncio.create_task(self._recovery_timer())
            return {"kept": kept, "closed": closed, "seconds": seconds}

    async def _snapshot(self, s: Session) -> tuple[str, str] | None:
        """Ask the old principal what the tracker may have missed: temporary objects (PER-5),
        open cursors (PER-8) and settings changed outside SET (kept for replay, PER-2)."""
        back, state = s.back, s.state
        if back is not None:  # stop relaying: the proxy reads this connection itself now
            s._stop_back_relay(back)
        if back is None or state is None or s.closed:  # the client left meanwhile
            return None
        try:
            results = await asyncio.wait_for(back.simple_query(_SNAPSHOT_SQL, state.codec),
                                             self.config.connect_timeout)
        except (TimeoutError, BackendError, OSError):
            return None  # old principal already gone: rely on the tracked state
        counts = results[0][0]
        if int(counts[0] or 0) > 0:
            return "session holds temporary tables", "PER-5"
        if int(counts[1] or 0) > 0:
            return "session has an open cursor", "PER-8"
        tracked = state.committed.gucs
        state.snapshot_gucs = {
            name: value or "" for name, value in results[1]
            if name is not None and name.lower() not in tracked
            and name.lower() not in ("role", "session_authorization", "client_encoding")
            and not name.startswith("transaction_")
        }
        return None

    async def _recovery_timer(self) -> None:
        """PER-3 timer; with ``auto_resume`` it also resumes as soon as the resolver names a
        principal other than the one drained from and that principal accepts a login."""
        cfg = self.config
        deadline = self._recovery_deadline()
        old = self._principal
        try:
            while time.monotonic() < deadline:
                await asyncio.sleep(min(cfg.retry_interval, max(0.0, deadline - time.monotonic())))
                if not cfg.auto_resume or not self._holding:
                    continue
                try:
                    current = await self.resolve()
                except BackendError:
                    continue
                if current != old:
                    await self.resume()
                    return
        except asyncio.CancelledError:
            return
        if self._holding:
            await self._give_up("no principal within the recovery window")

    async def _give_up(self, why: str) -> list[dict[str, Any]]:
        """No principal within the recovery window (PER-3): close every kept session; returns them
        as :meth:`resume` lists its closed sessions."""
        closed = []
        for sid in list(self._kept):
            s = self.sessions.get(sid)
            if s is not None and s.back is None and not s.closed:
                await s.fail(CONNECTION_FAILURE,
                             "persistent connection closed: no principal accepted the session within the "
                             f"recovery window of {self.config.recovery_window:g} s (PER-3)",
                             rule="PER-3", reason=why)
                closed.append({"session": sid, "reason": "no principal within the recovery window", "rule": "PER-3"})
        self._holding = False
        self._drained_at = None
        self.warm.discard()
        assert self._gate is not None
        self._gate.set()
        return closed

    async def principal_at_login(self, back: BackConn, address: Address, deadline: float) -> bool:
        """Whether the server ``back`` just logged in to is out of recovery (PER-1 resume without a
        probe login, issue 15 stall): its ``in_hot_standby`` report (PostgreSQL 14 and later), else
        one query on ``back``. A server still in recovery is then waited for by one shared probe
        loop per address (not by every session's logins) until it is promoted or ``deadline``; False
        tells the caller to log in again."""
        reported = back.params.get("in_hot_standby")
        if reported is None:
            rows = await asyncio.wait_for(back.simple_query("SELECT pg_catalog.pg_is_in_recovery()"),
                                          self.config.connect_timeout)
            reported = "on" if rows[0][0][0] == "t" else "off"
        if reported == "off":
            return True
        await self.wait_principal(address, deadline)
        return False

    async def wait_principal(self, address: Address, deadline: float) -> None:
        """Wait until ``address`` is out of recovery or ``deadline`` passes, on the one probe loop
        of this resume for that address (started here if there is none)."""
        wait = self._recovery_waits.get(address)
        if wait is None or (wait.done() and not wait.cancelled() and not wait.result()):
            wait = self._recovery_waits[address] = asyncio.ensure_future(self._until_principal(address, deadline))
        await asyncio.shield(wait)

    async def _until_principal(self, address: Address, deadline: float) -> bool:
        """Probe ``address`` every ``retry_interval`` until it is out of recovery (True) or
        ``deadline`` passes (False)."""
        cfg = self.config
        while True:
            with contextlib.suppress(BackendError, OSError, TimeoutError):
                if await _is_principal(address, cfg):
                    return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(cfg.retry_interval)

    async def resume(self, address: Address | None = None) -> dict[str, Any]:
        """End a switchover: find the new principal (``address``, else the resolver/probe, retried
        until the recovery window ends, PER-3), re-attach every kept session and replay its state
        (PER-1, PER-2), then release the held statements. Sessions that cannot be re-attached are
        closed with the reason; if no principal answers in time every kept session is closed
        (PER-3)."""
        assert self._gate is not None and self._lock is not None
        async with self._lock:
            if not self._holding:
                return {"resumed": 0, "closed": [], "principal": None}
            if self._recovery_task is not None and self._recovery_task is not asyncio.current_task():
                self._recovery_task.cancel()
            deadline = self._recovery_deadline()
            principal: Address | None = None
            last: Exception | None = None
            cfg = self.config
            at_login = False  # each re-attach's own login shows the principal: no probe login first
            while principal is None:
                try:
                    target = address or await self.resolve()
                    writable = await self.warm.is_principal(target)  # no login when pre-attached
                    if writable is None and address is not None:
                        principal, at_login = target, True
                        break
                    if writable is None:
                        writable = await _is_principal(target, cfg)
                    if not writable:
                        raise BackendError(f"{target[0]}:{target[1]} is still in recovery (not a principal)")
                    principal = target
                except (BackendError, OSError, TimeoutError) as exc:
                    last = exc
                    if time.monotonic() >= deadline:
                        break
                    await asyncio.sleep(cfg.retry_interval)
            if principal is None:
                closed = await self._give_up(f"no principal within the recovery window: {last}")
                return {"resumed": 0, "closed": closed, "principal": None, "error": str(last)}
            kept = [self.sessions[sid] for sid in list(self._kept) if sid in self.sessions]
            logging_in = len(kept)
            logins_done = asyncio.Event()

            def logged_in() -> None:
                nonlocal logging_in
                logging_in -= 1
                if logging_in <= 0:
                    logins_done.set()

            if not kept:
                logins_done.set()
            attaching = asyncio.gather(*(s.reattach(deadline, principal, check=at_login, on_login=logged_in)
                                         if s.endpoint == CLUSTER else s.reattach(deadline, on_login=logged_in)
                                         for s in kept),
                                       return_exceptions=True)
            # release the held statements once every login is done (bounded): each still waits for
            # its own session's replay (it takes the session's back_lock first), not for every
            # session's; released earlier, sessions run their workload against the others' logins
            # for the same cores (PER-1 stall, issue 15: the last re-attach took up to 0.56 s so, 0.14 s not)
            if cfg.release_after_logins > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(logins_done.wait(), cfg.release_after_logins)
            self._holding = False
            self._gate.set()
            results = await attaching
            closed = []
            for s, res in zip(kept, results, strict=True):
                if isinstance(res, BaseException):
                    if res.__class__ is BackendError and getattr(res, "code", "") == "REPLAY":
                        reason, rule = "state replay failed", "PER-2"
                    else:
                        reason, rule = "no principal within the recovery window", "PER-3"
                    await s.fail(CONNECTION_FAILURE,
                                 f"persistent connection not kept across switchover: {reason} ({rule})",
                                 rule=rule, reason=reason, detail=str(res))
                    closed.append({"session": s.id, "reason": reason, "rule": rule})
            self._kept.clear()
            self._drained_at = None
            for wait in self._recovery_waits.values():  # nobody waits on them any more
                wait.cancel()
            self._recovery_waits.clear()
            warm = self.warm.summary()
            self.warm.discard()
            return {"resumed": len(kept) - len(closed), "closed": closed,
                    "principal": f"{principal[0]}:{principal[1]}", **warm}

    async def prepare(self, address: Address) -> dict[str, Any]:
        """Pre-attach for a planned switchover to ``address`` - the hot standby about to be promoted
        (issue 15 stall, :mod:`.warm`): log in there once per session now, in the background (the
        clients still run), and replay each kept session's state there (PER-2) as soon as the drain
        has fixed it, so that :meth:`resume` on that address only swaps the connections in. Called
        before :meth:`drain` (or after it: then the replays start at once). Sessions of read-only
        endpoints and sessions that LISTEN (refused during recovery) are left to the usual
        re-attach, and so is every session whose pre-attach fails. Connections not taken are closed
        at the resume, the give-up (PER-3), the proxy's stop, or when no drain follows within the
        drain window plus 30 s. Returns at once: ``{"warming": n, "address": "host:port"}``."""
        assert self._lock is not None
        target = (str(address[0]), int(address[1]))
        where = f"{target[0]}:{target[1]}"
        if not self.config.pre_attach:
            return {"warming": 0, "address": where, "reason": "pre-attach is off"}
        async with self._lock:
            cfg = self.config
            openers = {}
            for s in list(self.sessions.values()):
                if (s.ready and not s.closed and s.state is not None and s.endpoint == CLUSTER
                        and not s.state.committed.listens and (not self._holding or s.id in self._kept)):
                    openers[s.id] = functools.partial(connect_backend, target, cfg.user, cfg.password,
                                                      s.state.startup, cfg.connect_timeout)
            self.warm.start(target, openers, functools.partial(
                connect_backend, target, cfg.user, cfg.password, {"database": cfg.database}, cfg.connect_timeout))
            if self._warm_timer is not None:
                self._warm_timer.cancel()
            if self._holding:
                self._warm_replay(self._kept)
            else:
                self._warm_timer = asyncio.get_running_loop().call_later(
                    cfg.drain_window + 30.0, lambda: None if self._holding else self.warm.discard())
            self._emit("persist.prepare", address=where, sessions=len(openers))
            return {"warming": len(openers), "address": where}

    def _warm_replay(self, kept: Any) -> None:
        if self.warm.target is not None:
            self.warm.replay({sid: self.sessions[sid]._replay for sid in kept if sid in self.sessions})

    async def switchover(self, action: Callable[[], Any], timeout: float | None = None) -> dict[str, Any]:
        """``drain()``, run ``action`` (the topology's switchover; sync callables run in a thread),
        then ``resume()`` (PER-1, PER-4)."""
        drained = await self.drain(timeout)
        result = action()
        if inspect.isawaitable(result):
            await result
        resumed = await self.resume()
        return {"drain": drained, "resume": resumed}

    def status(self) -> dict[str, Any]:
        """Sessions with their state sizes and flags, and counters (kept, closed by reason,
        reconnects, replays) - the admin ``status`` (PER-1..8 evidence)."""
        sessions = []
        for s in self.sessions.values():
            entry: dict[str, Any] = {
                "session": s.id, "client": s.client, "user": s.user, "database": s.database,
                "ready": s.ready, "held": s.held, "kept": s.id in self._kept,
                "back": f"{s.back.address[0]}:{s.back.address[1]}" if s.back else None,
            }
            if s.state is not None:
                entry.update(s.state.summary())
            sessions.append(entry)
        return {
            "listen": f"{self.address[0]}:{self.address[1]}" if self.address else None,
            "principal": f"{self._principal[0]}:{self._principal[1]}" if self._principal else None,
            "draining": self._holding,
            "sessions": sessions,
            "counters": {
                "sessions_opened": self.counters["sessions"],
                "kept": self.counters["kept"],
                "closed": self.counters["closed"],
                "closed_by_reason": dict(self.closed_by_reason),
                "reconnects": self.counters["reconnects"],
                "replays": self.counters["replays"],
                "pre_attached": self.counters["pre_attached"],
                "lazy_prepares": self.counters["lazy_prepares"],
                "drains": self.counters["drains"],
                "back_lost": self.counters["back_lost"],
                "cancels": self.counters["cancels"],
            },
            "drain_window": self.config.drain_window,
            "recovery_window": self.config.recovery_window,
        }
