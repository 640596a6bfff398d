"""One persistent-proxy session (PER-1 two layers): a client's front connection and its current back
connection - the client's startup and authentication, attaching a back connection and replaying the
session's state on it (PER-2), re-attaching it after a switchover or failover. The relay itself is
:class:`~harness.persistproxy.datapath.SessionDataPath`, its base class."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.redact import protect_logger

from . import protocol as pq
from .backend import Address, BackConn, BackendError, connect_backend
from .closing import CANNOT_CONNECT_NOW, CONNECTION_FAILURE, PROTOCOL_VIOLATION, SessionClosed
from .datapath import SessionDataPath
from .scram import MECHANISM, ScramError, ScramServer
from .state import NOT_SETTABLE, SessionState, quote_literal

if TYPE_CHECKING:
    from .proxy import PersistentProxy

log = protect_logger(logging.getLogger(__name__))  # log lines hold no password

_MAX_AUTH_MESSAGE = 65535  # PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH
_FALSE = ("0", "false", "off", "no")

# PER-10 endpoint kinds: the default listener is the cluster endpoint (the principal); custom
# endpoints route to read-only nodes, balanced by active requests (a session on a removed node moves
# to another one, kept) or by connections (a session on a removed node is disconnected).
CLUSTER = "cluster"
READONLY_ENDPOINTS = ("custom-active", "custom-connection")


class Session(SessionDataPath):
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
        connection pre-attached to ``address`` during the drain (:mod:`.pre_attach`) is taken as it is.
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
