"""The data path of a persistent-proxy session (PER-1, PER-4): relaying the client's requests and the
server's answers with as few Python steps as possible. The commonest request and answer (one
statement's [Parse/]Bind/[Describe/]Execute/Sync and its [ParseComplete/]BindComplete ...
ReadyForQuery) are framed and tracked in one compiled call each (:mod:`.fastpath`) straight from the
read callbacks and relayed with one write; any other chunk is framed in one call of the compiled walk
(:mod:`.frames`, a run of DataRows as one entry) and relayed as raw byte blocks, one write per chunk,
and only the few message types that change tracked state are decoded. A back connection lost
mid-request is kept or closed here (PER-1 / PER-3).

:class:`SessionDataPath` is the base class of :class:`~harness.persistproxy.session.Session`, which
holds the session's startup, authentication and (re-)attachment."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import struct
import time
from typing import TYPE_CHECKING

from harness.redact import protect_logger

from . import protocol as pq
from .backend import BackConn
from .closing import CONNECTION_FAILURE, SessionClosed
from .fastpath import simple_answer, simple_request
from .frames import DATA_ROW, NO_RUNS, frames
from .relay import Tap, give_back, take_over
from .state import SessionState

if TYPE_CHECKING:
    from .proxy import PersistentProxy

log = protect_logger(logging.getLogger(__name__))  # log lines hold no password

_FRONT_TYPES = frozenset(b"QPBEDCSHFXdcf")
# Types relayed as a stream once they exceed _STREAM_FROM bytes: the proxy needs only their first
# bytes (Bind: the portal and statement names) or nothing of them (CopyData, FunctionCall).
_STREAMED = frozenset(b"dBF")
_STREAM_FROM = 256 << 10
_CHUNK = 256 << 10
_LENGTH = struct.Struct("!i").unpack_from  # a message's length field
_KINDS = [bytes([i]) for i in range(256)]
# CopyData, CopyDone, CopyFail, Flush: part of a request already started (no switchover gate, PER-4)
_CONTINUING = frozenset(b"dcfH")  # a message's type as the 1-byte ``kind`` (no allocation)
_NAMING = frozenset(b"BDCPQ")  # messages that may name a prepared statement (lazy re-prepare)


class SessionDataPath:
    """The relay half of a :class:`~harness.persistproxy.session.Session` (its attributes are set by
    ``Session.__init__``): back and front read callbacks, back-pressure, the switchover gate and the
    loss of a back connection."""

    proxy: PersistentProxy
    state: SessionState | None
    back: BackConn | None

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
        """Lazy re-prepare (PER-2, the switchover stall): the Parse messages to send on this back connection
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
        as they arrive, never holding more than one read chunk (bounded memory); returns
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


def _check_front_header(t: int, length: int, limit: int) -> None:
    """Refuse a frontend message of an unknown type, an impossible length or one above
    ``max_message_size`` (bounded memory) with a :class:`ProtocolError` naming the problem."""
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
