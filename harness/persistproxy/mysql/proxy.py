"""The reference MySQL-protocol persistent-connection proxy (the MariaDB profile, docs/persistent.md; RULEBOOK
PER-1..PER-8 on MariaDB/MySQL): clients log in to the proxy (protocol 10, ``mysql_native_password``), each client
session gets a server connection to the current principal, and a planned switchover keeps the
client's TCP connection: :meth:`MySQLPersistentProxy.drain` holds new commands and waits up to the
drain window for every session to reach a boundary (PER-4), closes those it cannot keep (temporary
tables PER-5, partial result PER-6, open transaction PER-7, cursor / unfinished long data PER-8) and
snapshots the others' variables; :meth:`resume` logs them in on the new principal and replays their
state - database, system variables (``SET NAMES`` included), user variables, prepared statements
(re-prepared, ids mapped, parameter types re-sent) - within the recovery window (PER-3), or closes
them with an error.

One thread per client session (blocking sockets); a small product of its own that imports nothing of
the harness (an import contract checks the ``harness.persistproxy`` package). Over 600 lines: its
sessions and the proxy share one switchover state machine (drain, gate, resume) under the proxy's
condition variable."""

from __future__ import annotations

import itertools
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.persistproxy.mysql import wire
from harness.persistproxy.mysql.backend import Address, Backend, BackendError, describe, literal, probe_version
from harness.persistproxy.mysql.state import SessionState, Statement

log = logging.getLogger("harness.persistproxy.mysql")

ER_CONNECTION_KILLED = 1927  # MariaDB: "Connection was killed" (SQLSTATE 70100)
ER_ACCESS_DENIED = 1045
ER_UNKNOWN_COM = 1047
ER_SERVER_SHUTDOWN = 1053


@dataclass
class MySQLProxyConfig:
    """Credentials (the proxy logs clients in with them and uses them toward the servers), where the
    principal is (``resolver``), the windows (PER-3/4) and an event callback (``persist.*``)."""

    user: str
    password: str = field(repr=False)
    resolver: Callable[[], Address]
    drain_window: float = 60.0
    recovery_window: float = 60.0
    listen: Address = ("127.0.0.1", 0)
    connect_timeout: float = 2.0
    on_event: Callable[..., Any] | None = None


class SessionClosed(Exception):
    """The proxy closed this session (it was not kept)."""


class Session:
    """One client connection and its current server connection."""

    def __init__(self, proxy: MySQLPersistentProxy, sid: int, client: socket.socket, peer: str) -> None:
        self.proxy = proxy
        self.id = sid
        self.client = client
        self.peer = peer
        self.back: Backend | None = None
        self.state = SessionState()
        self.caps = 0
        self.charset = 45
        self.busy = False  # a command is being relayed
        self.answering = False  # ... and the server's answer has begun reaching the client (PER-6)
        self.held = False  # waiting at the gate
        self.closed = False
        self.snapshot: list[str] = []  # SET statements replaying its variables (PER-2)
        self._next_stmt = itertools.count(1)
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ login
    def login(self) -> None:
        """Greet the client, check its password, log in to the principal for it."""
        cfg = self.proxy.config
        scramble = os.urandom(20).replace(b"\0", b"\x01")
        wire.write_packet(self.client, 0, wire.build_handshake(self.proxy.server_version, self.id, scramble))
        seq, p = wire.read_packet(self.client)
        resp = wire.parse_handshake_response(p)
        auth = resp.auth
        if resp.plugin != wire.NATIVE:  # ask for the plugin the proxy checks
            seq += 1
            wire.write_packet(self.client, seq, b"\xfe" + wire.NATIVE.encode() + b"\0" + scramble + b"\0")
            seq, auth = wire.read_packet(self.client)
        if resp.user != cfg.user or auth != wire.native_token(cfg.password, scramble):
            wire.write_packet(self.client, seq + 1, wire.build_err(
                ER_ACCESS_DENIED, "28000", f"Access denied for user '{resp.user}' (persistent proxy)"))
            raise SessionClosed("access denied")
        self.caps = resp.capabilities & wire.PROXY_CAPABILITIES
        self.charset = resp.charset
        self.state.database = resp.database
        try:
            self.back = self._connect(self.proxy.principal())
        except BackendError as exc:
            wire.write_packet(self.client, seq + 1, wire.build_err(2003, "HY000", f"persistent proxy: {exc}"))
            raise SessionClosed(str(exc)) from None
        wire.write_packet(self.client, seq + 1, wire.build_ok(self.back.status))
        self.proxy.emit("persist.session_open", session=self.id, client=self.peer, user=resp.user,
                        backend=f"{self.back.address[0]}:{self.back.address[1]}")

    def _connect(self, address: Address) -> Backend:
        return Backend(address, self.proxy.config.user, self.proxy.config.password,
                       self.caps & ~wire.HANDSHAKE_ONLY, self.charset, self.state.database,
                       timeout=self.proxy.config.connect_timeout)

    # ------------------------------------------------------------------ command loop
    def run(self) -> None:
        """Relay commands until the client quits or the session is closed."""
        try:
            self.login()
            while not self.closed:
                _, cmd = wire.read_packet(self.client)
                if not cmd:
                    continue
                self.proxy.wait_gate(self)
                if cmd[0] == wire.COM_QUIT:
                    self.proxy.emit("persist.session_close", session=self.id, by="client")
                    break
                try:
                    self._command(cmd)
                finally:
                    with self.proxy.cond:
                        self.busy = False
                        self.proxy.cond.notify_all()
        except SessionClosed:
            pass
        except (wire.WireError, OSError, struct.error, IndexError, ValueError) as exc:
            if not self.closed:
                self.proxy.emit("persist.session_close", session=self.id, by="client", error=describe(exc))
        except BackendError as exc:
            self.proxy.emit("persist.back_lost", session=self.id, kept=False, error=describe(exc))
            self.fail(ER_CONNECTION_KILLED, f"persistent proxy: the server connection broke ({exc})",
                      rule="", reason="back_lost")
        finally:
            self.close()

    def _command(self, cmd: bytes) -> None:
        back = self.back
        if back is None:
            raise BackendError("no server connection")
        code = cmd[0]
        st = self.state
        if code == wire.COM_QUERY:
            st.note_query(cmd[1:].decode(errors="replace"))
        elif code == wire.COM_INIT_DB:
            pass  # the database changes when the OK arrives
        elif code == wire.COM_CHANGE_USER:
            self._to_client(1, wire.build_err(ER_UNKNOWN_COM, "08S01",
                                              "COM_CHANGE_USER is not supported by the persistent proxy"))
            return
        elif code in (wire.COM_STMT_EXECUTE, wire.COM_STMT_CLOSE, wire.COM_STMT_RESET,
                      wire.COM_STMT_SEND_LONG_DATA, wire.COM_STMT_FETCH):
            cmd = self._map_statement(cmd)
            if cmd is None:
                return
        try:
            back.send(cmd)
            self._relay(code, cmd)
        except (OSError, wire.WireError) as exc:
            raise BackendError(str(exc)) from None
        if code == wire.COM_INIT_DB:
            st.database = cmd[1:].decode(errors="replace") or None

    def _map_statement(self, cmd: bytes) -> bytes | None:
        """Client statement id -> the current server's; parameter types re-sent to a re-prepared
        statement that has not received them yet."""
        code = cmd[0]
        cid = struct.unpack_from("<I", cmd, 1)[0]
        stmt = self.state.statements.get(cid)
        if stmt is None:
            if code in (wire.COM_STMT_CLOSE, wire.COM_STMT_SEND_LONG_DATA):
                return None  # no answer expected
            self._to_client(1, wire.build_err(1243, "HY000", f"Unknown prepared statement handler ({cid})"))
            return None
        out = bytearray(cmd)
        struct.pack_into("<I", out, 1, stmt.server_id)
        if code == wire.COM_STMT_CLOSE:
            del self.state.statements[cid]
        elif code == wire.COM_STMT_SEND_LONG_DATA:
            stmt.long_data = True
        elif code == wire.COM_STMT_RESET:
            stmt.long_data = stmt.cursor = False
        elif code == wire.COM_STMT_EXECUTE:
            stmt.long_data = False
            if stmt.params:
                nb = (stmt.params + 7) // 8
                flag_at = 10 + nb
                if out[flag_at] == 1:
                    stmt.types = bytes(out[flag_at + 1:flag_at + 1 + 2 * stmt.params])
                    stmt.types_sent = True
                elif not stmt.types_sent and stmt.types is not None:
                    out = out[:flag_at] + b"\x01" + stmt.types + out[flag_at + 1:]
                    stmt.types_sent = True
        return bytes(out)

    def _to_client(self, seq: int, payload: bytes) -> None:
        wire.write_packet(self.client, seq, payload)

    def _relay(self, code: int, cmd: bytes) -> None:
        """Forward the server's answer to ``cmd`` to the client, packet by packet, reading the status
        flags (transaction, cursor, more results) and session-state tracking on the way."""
        back = self.back
        assert back is not None
        if code in (wire.COM_STMT_CLOSE, wire.COM_STMT_SEND_LONG_DATA):
            return  # no answer
        if code == wire.COM_STMT_PREPARE:
            self._relay_prepare(cmd)
            return
        while True:
            seq, p = back.read()
            self._to_client(seq, p)
            if wire.is_err(p):
                return
            self.answering = True
            ok_first = p[:1] == b"\x00" and code != wire.COM_STMT_FETCH  # (a fetched binary row starts 0x00)
            if ok_first or (code == wire.COM_SET_OPTION and wire.is_eof(p)):
                more = self._end(p)
                if code == wire.COM_RESET_CONNECTION:
                    self.state.reset()
                if not more:
                    return
                continue
            if code in (wire.COM_PING, wire.COM_INIT_DB, wire.COM_RESET_CONNECTION, wire.COM_STMT_RESET,
                        wire.COM_STATISTICS):
                return
            if code == wire.COM_FIELD_LIST:
                if self._read_until_eof():
                    return
                continue
            if code == wire.COM_STMT_FETCH:  # rows then EOF (p is the first row or the EOF)
                if wire.is_eof(p):
                    self._fetch_end(cmd, p)
                    return
                self._fetch_end(cmd, self._read_until_eof(rows=True))
                return
            more = self._result_set(p, code, cmd)
            if not more:
                return

    def _end(self, p: bytes) -> bool:
        ok = wire.parse_ok(p, self.back.caps if self.back else 0)
        self.state.in_transaction = bool(ok.status & wire.IN_TRANS)
        if ok.variables or ok.schema is not None:
            self.state.note_tracked(ok.variables, ok.schema)
        return bool(ok.status & wire.MORE_RESULTS)

    def _read_until_eof(self, rows: bool = False) -> bytes:
        back = self.back
        assert back is not None
        while True:
            seq, p = back.read()
            self._to_client(seq, p)
            if wire.is_err(p) or wire.is_eof(p):
                if not wire.is_err(p):
                    self._end(p)
                return p

    def _result_set(self, first: bytes, code: int, cmd: bytes) -> bool:
        """Columns, rows and the closing EOF/OK of one result set; True when more results follow."""
        back = self.back
        assert back is not None
        ncols, _ = wire.lenenc_int(first, 0)
        for _ in range(ncols or 0):
            seq, p = back.read()
            self._to_client(seq, p)
        if not back.deprecate_eof:
            seq, p = back.read()
            self._to_client(seq, p)
            status = wire.parse_ok(p, back.caps).status
            if code == wire.COM_STMT_EXECUTE and status & wire.CURSOR_EXISTS:
                self._stmt_of(cmd).cursor = True
                self.state.in_transaction = bool(status & wire.IN_TRANS)
                return False
        elif code == wire.COM_STMT_EXECUTE and len(cmd) > 5 and cmd[5] & 0x07:
            # a cursor was asked for: under DEPRECATE_EOF the server answers columns then an OK
            seq, p = back.read()
            self._to_client(seq, p)
            ok = wire.parse_ok(p, back.caps)
            if ok.status & wire.CURSOR_EXISTS:
                self._stmt_of(cmd).cursor = True
                return False
            return bool(ok.status & wire.MORE_RESULTS)
        end = self._read_until_eof(rows=True)
        if wire.is_err(end):
            return False
        return bool(wire.parse_ok(end, back.caps).status & wire.MORE_RESULTS)

    def _stmt_of(self, cmd: bytes) -> Statement:
        sid = struct.unpack_from("<I", cmd, 1)[0]
        return next((s for s in self.state.statements.values() if s.server_id == sid), Statement(b"", sid, 0, 0))

    def _fetch_end(self, cmd: bytes, p: bytes) -> None:
        if wire.is_err(p):
            return
        status = wire.parse_ok(p, self.back.caps if self.back else 0).status
        if status & wire.LAST_ROW_SENT or not status & wire.CURSOR_EXISTS:
            self._stmt_of(cmd).cursor = False

    def _relay_prepare(self, cmd: bytes) -> None:
        back = self.back
        assert back is not None
        seq, first = back.read()
        if wire.is_err(first):
            self._to_client(seq, first)
            return
        server_id, ncols, nparams = struct.unpack_from("<IHH", first, 1)
        cid = next(self._next_stmt)
        self.state.statements[cid] = Statement(cmd[1:], server_id, nparams, ncols)
        out = bytearray(first)
        struct.pack_into("<I", out, 1, cid)
        self._to_client(seq, bytes(out))
        for count in (nparams, ncols):
            for _ in range(count):
                seq, p = back.read()
                self._to_client(seq, p)
            if count and not back.deprecate_eof:
                seq, p = back.read()
                self._to_client(seq, p)

    # ------------------------------------------------------------------ switchover
    def take_snapshot(self) -> None:
        """Read the values of the variables the session changed from its (old) server (PER-2)."""
        back = self.back
        if back is None:
            return
        stmts: list[str] = []
        names = self.state.replay_order()
        if names:
            cols, rows = back.query("SELECT " + ", ".join(f"@@session.`{n}`" for n in names))
            for name, col, value in zip(names, cols, rows[0], strict=True):
                stmts.append(f"SET SESSION `{name}` = {literal(value, col)}")
        users = sorted(self.state.uservars)
        if users:
            cols, rows = back.query("SELECT " + ", ".join(f"@`{n}`" for n in users))
            stmts.extend(f"SET @`{n}` = {literal(v, c)}" for n, c, v in zip(users, cols, rows[0], strict=True))
        stmts.extend(self.state.sql_prepared.values())  # after the user variables they may read
        self.snapshot = stmts

    def rebuild(self, address: Address) -> None:
        """Log in on ``address`` and replay database, variables and prepared statements (PER-2)."""
        back = self._connect(address)
        try:
            # variables that need the session's character set are set after it (replay_order)
            for sql in self.snapshot:
                back.query(sql)
            stmts = list(self.state.statements.values())
            for stmt, new_id in zip(stmts, back.prepare_many([x.sql for x in stmts]), strict=True):
                stmt.server_id, stmt.types_sent = new_id, False
        except (BackendError, OSError, wire.WireError) as exc:
            back.close()
            raise BackendError(f"replay failed: {exc}") from None
        self.back = back
        self.proxy.emit("persist.replayed", session=self.id, address=f"{address[0]}:{address[1]}",
                        variables=len(self.snapshot), statements=len(self.state.statements),
                        database=self.state.database)

    def fail(self, code: int, message: str, *, rule: str, reason: str) -> None:
        """Close the session: an ERR to a client waiting for an answer, then the socket (PER-3..8)."""
        if self.closed:
            return
        self.closed = True
        if self.held or self.busy:
            try:
                self._to_client(1, wire.build_err(code, "70100", message))
            except OSError:
                pass
        self.proxy.closed(self, reason, rule)
        self.close()

    def close(self) -> None:
        """Release both connections."""
        self.closed = True
        if self.back is not None:
            self.back.close()
            self.back = None
        try:
            self.client.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.client.close()
        except OSError:
            pass
        self.proxy.forget(self)


class MySQLPersistentProxy:
    """The proxy: a listener thread, one thread per session, and the blocking switchover API
    (``drain`` / ``resume``) the PER suites' coordination calls."""

    def __init__(self, config: MySQLProxyConfig) -> None:
        if config.drain_window <= 0 or config.recovery_window <= 0:
            raise ValueError("drain_window and recovery_window must be > 0 seconds")
        self.config = config
        self.sessions: dict[int, Session] = {}
        self.cond = threading.Condition()
        self.holding = False
        self._ids = itertools.count(1)
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._recovery: threading.Timer | None = None
        self._drained_at: float | None = None
        self.server_version = "5.5.5-10.11-persistproxy"
        self.address: Address | None = None
        self.counters = {"sessions": 0, "kept": 0, "closed": 0, "drains": 0}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Address:
        """Listen and accept in a background thread; returns the address clients connect to."""
        version = probe_version(self.principal())
        if version:
            self.server_version = version
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(self.config.listen)
        sock.listen(256)
        self._listener = sock
        self.address = sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept, name="mysql-persistproxy", daemon=True)
        self._thread.start()
        return self.address

    def stop(self) -> None:
        """Close the listener and every session."""
        if self._recovery is not None:
            self._recovery.cancel()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self.cond:
            self.holding = False
            self.cond.notify_all()
        for s in list(self.sessions.values()):
            s.close()
        if self._thread is not None:
            self._thread.join(5)

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                conn, peer = listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s = Session(self, next(self._ids), conn, f"{peer[0]}:{peer[1]}")
            with self.cond:
                self.sessions[s.id] = s
                self.counters["sessions"] += 1
            threading.Thread(target=s.run, name=f"mysql-session-{s.id}", daemon=True).start()

    def principal(self) -> Address:
        """The current principal (the resolver's answer)."""
        host, port = self.config.resolver()
        return str(host), int(port)

    def emit(self, type_: str, **fields: Any) -> None:
        """Record a ``persist.*`` event (an observer's failure never breaks the data path)."""
        cb = self.config.on_event
        if cb is not None:
            try:
                cb(type_, **fields)
            except Exception:  # noqa: BLE001
                log.exception("event callback failed for %s", type_)

    def forget(self, s: Session) -> None:
        """Drop a closed session."""
        with self.cond:
            self.sessions.pop(s.id, None)
            self.cond.notify_all()

    def closed(self, s: Session, reason: str, rule: str) -> None:
        """Count and record a session the proxy closed."""
        self.counters["closed"] += 1
        self.emit("persist.closed", session=s.id, reason=reason, rule=rule)

    def wait_gate(self, s: Session) -> None:
        """Hold a new command while draining, unless the session is inside a transaction or has an
        open cursor (it may finish it within the drain window, PER-4)."""
        with self.cond:
            while self.holding and not s.closed and not (s.state.in_transaction
                                                          or any(x.cursor for x in s.state.statements.values())):
                s.held = True
                self.cond.wait()
            s.held = False
            if s.closed:
                raise SessionClosed()
            s.busy = True
            s.answering = False

    # ------------------------------------------------------------------ switchover API
    def drain(self, timeout: float | None = None) -> dict[str, Any]:
        """PER-4: hold new commands, wait up to the drain window for every session to be idle outside
        a transaction, snapshot the ones that can be kept (PER-1/2) and close the others with their
        reason (PER-5..8; a command still running: PER-6 partial result / PER-4)."""
        window = self.config.drain_window if timeout is None else float(timeout)
        t0 = time.monotonic()
        with self.cond:
            if self.holding:
                return {"kept": [], "closed": [], "seconds": 0.0, "already_draining": True}
            self.holding = True
            self.counters["drains"] += 1
        self.emit("persist.drain_start", sessions=len(self.sessions), window=window)
        deadline = t0 + window
        with self.cond:
            while time.monotonic() < deadline:
                busy = [s for s in self.sessions.values() if not s.closed and (s.busy or s.state.blocking_reason
                                                                               and not s.state.temp_tables)]
                if not busy:
                    break
                self.cond.wait(min(0.01, max(0.0, deadline - time.monotonic())))
            candidates = [s for s in self.sessions.values() if not s.closed]
        kept, closed = [], []
        for s in candidates:
            with s.lock:
                if s.closed:
                    continue
                blocker = s.state.blocking_reason
                if blocker is None and s.busy:
                    blocker = ("PER-6", "partial result") if s.answering else ("PER-4", "request still running")
                if blocker is None:
                    try:
                        s.take_snapshot()
                    except (BackendError, OSError, wire.WireError) as exc:
                        blocker = ("PER-2", f"state snapshot failed: {describe(exc)}")
                if blocker is not None:
                    rule, reason = blocker
                    s.fail(ER_SERVER_SHUTDOWN, f"persistent connection not kept across switchover: {reason} "
                           f"({rule})", rule=rule, reason=reason)
                    closed.append({"session": s.id, "reason": reason, "rule": rule})
                    continue
                if s.back is not None:
                    s.back.close()
                    s.back = None
                kept.append(s.id)
                self.counters["kept"] += 1
                self.emit("persist.kept", session=s.id)
        self._drained_at = time.monotonic()
        seconds = self._drained_at - t0
        self.emit("persist.drain_end", kept=len(kept), closed=len(closed), seconds=seconds)
        self._recovery = threading.Timer(self.config.recovery_window, self._recovery_expired)
        self._recovery.daemon = True
        self._recovery.start()
        return {"kept": kept, "closed": closed, "seconds": seconds}

    def _recovery_expired(self) -> None:
        """PER-3: no resume within the recovery window: close every held session with an error."""
        with self.cond:
            if not self.holding:
                return
            held = [s for s in self.sessions.values() if not s.closed]
        for s in held:
            s.fail(ER_CONNECTION_KILLED, "persistent proxy: no principal within the recovery window (PER-3)",
                   rule="PER-3", reason="recovery window expired")
        with self.cond:
            self.holding = False
            self.cond.notify_all()

    def resume(self, address: Address | None = None) -> dict[str, Any]:
        """PER-1/2/3: log every kept session in on the new principal (retrying until the recovery
        window ends), replay its state, release it; a session that cannot be rebuilt is closed."""
        if self._recovery is not None:
            self._recovery.cancel()  # this call now bounds the recovery itself
        address = tuple(address) if address is not None else self.principal()  # type: ignore[assignment]
        with self.cond:
            sessions = [s for s in self.sessions.values() if not s.closed and s.back is None]
        deadline = (self._drained_at or time.monotonic()) + self.config.recovery_window
        rebuilt: list[int] = []
        failed: list[int] = []

        def rebuild(s: Session) -> None:
            while True:
                try:
                    s.rebuild(address)  # type: ignore[arg-type]
                    rebuilt.append(s.id)
                    return
                except BackendError as exc:
                    if time.monotonic() + 0.1 >= deadline or "replay failed" in str(exc):
                        rule = "PER-3" if "replay failed" not in str(exc) else "PER-2"
                        s.fail(ER_CONNECTION_KILLED, f"persistent proxy: {exc}", rule=rule,
                               reason="recovery failed" if rule == "PER-3" else "replay failed")
                        failed.append(s.id)
                        return
                    time.sleep(0.1)

        workers = [threading.Thread(target=rebuild, args=(s,), daemon=True) for s in sessions]
        for w in workers:
            w.start()
        for w in workers:
            w.join(self.config.recovery_window + 30)
        with self.cond:
            self.holding = False
            self.cond.notify_all()
        return {"rebuilt": rebuilt, "closed": failed}

    def status(self) -> dict[str, Any]:
        """Counters and sessions."""
        with self.cond:
            return {"sessions": len(self.sessions), "holding": self.holding, **self.counters}
