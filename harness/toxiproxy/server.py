"""The embedded fault proxy: a Toxiproxy-2.12-compatible server written in asyncio.

The HTTP API runs on aiohttp, the proxied TCP on asyncio streams, all on one event loop.
:class:`ToxiproxyServer` lives on a loop you own (used by ``failover-harness toxiproxy-server``);
:class:`EmbeddedToxiproxy` runs one on its own background thread for in-process use.

Extension (not in real Toxiproxy): every proxied connection emits ``conn.*`` events
(docs/events.md), readable with ``GET /events?since=N`` or :meth:`EmbeddedToxiproxy.subscribe`.
Deliberate differences from the real server are listed in docs/toxiproxy.md.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from harness.errors import ProxyError
from harness.secrets import protect_logger
from harness.toxiproxy.models import STREAMS, TOXIC_TYPES, ConnEvent, split_hostport

log = protect_logger(logging.getLogger(__name__))  # log lines hold no password (issue 17)

VERSION = "2.12.0"
CHUNK = 32 * 1024  # what a toxic sees per read, like the real server
FAST_CHUNK = 256 * 1024  # read size when no toxic acts on a link (fewer wake-ups, same bytes)
STREAM_LIMIT = 256 * 1024  # asyncio StreamReader buffer limit
HIGH_WATER = 256 * 1024  # bytes buffered towards a peer before the reader waits for it to drain
QUEUE_HIGH = 1024 * 1024  # bytes queued in front of the toxics before the reader waits
EVENTS_KEPT = 100_000

# Attributes of each toxic type (all integers, default 0).
TOXIC_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "latency": ("latency", "jitter"),
    "bandwidth": ("rate",),
    "slow_close": ("delay",),
    "timeout": ("timeout",),
    "reset_peer": ("timeout",),
    "slicer": ("average_size", "size_variation", "delay"),
    "limit_data": ("bytes",),
}

EventCallback = Callable[[ConnEvent], None]


class ApiError(Exception):
    """An HTTP error answer: ``{"error": message, "status": status}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# ------------------------------------------------------------------------------------------------
# State
# ------------------------------------------------------------------------------------------------
class ToxicState:
    """A toxic of a proxy. ``generation`` changes on every update (toxicity draws are redone)."""

    _generations = 0

    def __init__(self, name: str, type_: str, stream: str, toxicity: float,
                 attributes: dict[str, int]) -> None:
        self.name = name
        self.type = type_
        self.stream = stream
        self.toxicity = toxicity
        self.attributes = attributes
        self.generation = self._next_generation()

    @classmethod
    def _next_generation(cls) -> int:
        cls._generations += 1
        return cls._generations

    def touch(self) -> None:
        """Mark the toxic as changed."""
        self.generation = self._next_generation()

    def attr(self, key: str) -> int:
        """An attribute (0 when unset)."""
        return int(self.attributes.get(key, 0))

    def to_json(self) -> dict[str, Any]:
        """API JSON form."""
        return {"name": self.name, "type": self.type, "stream": self.stream,
                "toxicity": self.toxicity, "attributes": dict(self.attributes)}


def _validate_attributes(type_: str, raw: Any, base: dict[str, int] | None = None) -> dict[str, int]:
    """Merge ``raw`` over ``base`` (or zero defaults) and check every value; raises ApiError 400."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ApiError(400, "bad request body: attributes must be a JSON object")
    out = dict(base) if base is not None else {k: 0 for k in TOXIC_ATTRIBUTES[type_]}
    for key in TOXIC_ATTRIBUTES[type_]:
        if key not in raw:
            continue
        value = raw[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ApiError(400, f"bad request body: attribute {key!r} of a {type_} toxic must be an "
                                f"integer, got {value!r}")
        if value < 0:
            raise ApiError(400, f"invalid attribute: {key!r} of a {type_} toxic must be >= 0, "
                                f"got {value}")
        out[key] = value
    if type_ == "slicer" and out.get("average_size", 0) <= 0:
        raise ApiError(400, "invalid attribute: 'average_size' of a slicer toxic must be > 0 "
                            "(the real server crashes on 0)")
    return out


class ProxyState:
    """A proxy: its configuration, its listener, its toxics and its live connections."""

    def __init__(self, server: ToxiproxyServer, name: str, listen: str, upstream: str,
                 node: str | None) -> None:
        self.server = server
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.node = node
        self.enabled = False
        self.toxics: dict[str, ToxicState] = {}
        self.listener: asyncio.base_events.Server | None = None
        self.conns: set[Conn] = set()

    def chain(self, stream: str) -> list[ToxicState]:
        """The toxics of one direction, in the order they were added."""
        return [t for t in self.toxics.values() if t.stream == stream]

    def to_json(self) -> dict[str, Any]:
        """API JSON form (``node`` is the embedded server's extension)."""
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled,
                "toxics": [t.to_json() for s in STREAMS for t in self.chain(s)],
                "node": self.node}

    async def start(self) -> None:
        """Bind ``listen`` (port 0 -> a free port, written back into ``listen``) and accept."""
        if self.enabled:
            return
        try:
            host, port = split_hostport(self.listen)
        except ValueError as exc:
            raise ApiError(500, f"listen tcp {self.listen}: address is not host:port") from exc
        bind_host = host or "0.0.0.0"
        try:
            infos = socket.getaddrinfo(bind_host, port, type=socket.SOCK_STREAM)
            family, type_, proto, _, addr = infos[0]
            sock = socket.socket(family, type_, proto)
        except OSError as exc:
            raise ApiError(500, f"listen tcp {self.listen}: {exc}") from exc
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(1024)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            detail = (exc.strerror or str(exc)).lower()
            raise ApiError(500, f"listen tcp {self.listen}: bind: {detail}") from exc
        bound = sock.getsockname()
        self.listen = f"[{bound[0]}]:{bound[1]}" if family == socket.AF_INET6 else f"{bound[0]}:{bound[1]}"
        self.listener = await asyncio.start_server(self._accept, sock=sock, limit=STREAM_LIMIT)
        self.enabled = True

    def stop(self, reason: str) -> None:
        """Close the listener and every connection (``conn.closed`` by proxy, ``reason``)."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        self.enabled = False
        for conn in list(self.conns):
            conn.close("proxy", reason)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.enabled:  # raced with a disable
            writer.transport.abort()
            return
        conn = Conn(self, reader, writer)
        self.conns.add(conn)
        await conn.run()

    def toxics_changed(self, removed: ToxicState | None = None) -> None:
        """Apply a toxic change to every established connection."""
        for conn in list(self.conns):
            conn.toxics_changed(removed)


# ------------------------------------------------------------------------------------------------
# Data path
# ------------------------------------------------------------------------------------------------
class _Closed(Exception):
    """The connection was closed while a link was working on it."""


class Link:
    """One direction of a connection: reads chunks from ``reader`` and writes them to ``writer``.

    With no toxic acting on it, chunks are written straight away from the read loop (no queue, no
    extra task). Otherwise chunks go through a queue worked by one processor task per link, which
    applies the toxic chain in order; latency is pipelined (each chunk waits until its own read
    time plus its delay), so throughput is unchanged by latency.
    """

    def __init__(self, conn: Conn, direction: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.conn = conn
        self.direction = direction
        self.source = "client" if direction == "upstream" else "upstream"
        self.reader = reader
        self.writer = writer
        self.nbytes = 0
        self.active: list[ToxicState] = []
        self.draws: dict[str, tuple[ToxicState, int, bool]] = {}
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.queued_bytes = 0
        self.eof_reason = f"{self.source} closed"
        self.changed = asyncio.Event()
        self.queue_room = asyncio.Event()
        self.processor: asyncio.Task[None] | None = None
        self.timers: dict[ToxicState, tuple[int, asyncio.TimerHandle]] = {}
        self.state: dict[ToxicState, Any] = {}  # per-toxic state (bandwidth clock, limit_data count)

    # -- toxics ------------------------------------------------------------------------------
    def recompute(self, removed: ToxicState | None = None) -> bool:
        """Redo toxicity draws for new/changed toxics; returns True if a held connection must close."""
        chain = self.conn.proxy.chain(self.direction)
        draws: dict[str, tuple[ToxicState, int, bool]] = {}
        active = []
        for toxic in chain:
            prev = self.draws.get(toxic.name)
            if prev is not None and prev[0] is toxic and prev[1] == toxic.generation:
                acting = prev[2]
            else:
                acting = random.random() < toxic.toxicity
            draws[toxic.name] = (toxic, toxic.generation, acting)
            if acting:
                active.append(toxic)
        must_close = False
        if removed is not None:
            prev = self.draws.get(removed.name)
            if prev is not None and prev[0] is removed and prev[2] and removed.type == "timeout":
                must_close = True
        self.draws = draws
        self.active = active
        self._arm_timeouts()
        self.changed.set()
        return must_close

    def _arm_timeouts(self) -> None:
        loop = asyncio.get_running_loop()
        wanted = {t: t for t in self.active if t.type == "timeout" and t.attr("timeout") > 0}
        for key in list(self.timers):
            gen, handle = self.timers[key]
            toxic = wanted.get(key)
            if toxic is None or toxic.generation != gen:
                handle.cancel()
                del self.timers[key]
        for key, toxic in wanted.items():
            if key not in self.timers:
                handle = loop.call_later(toxic.attr("timeout") / 1000.0, self.conn.close, "toxic",
                                         "timeout toxic")
                self.timers[key] = (toxic.generation, handle)

    def cancel(self) -> None:
        """Stop timers and the processor task (the connection is closing)."""
        for _, handle in self.timers.values():
            handle.cancel()
        self.timers.clear()
        if self.processor is not None and self.processor is not asyncio.current_task():
            self.processor.cancel()

    # -- read loop ----------------------------------------------------------------------------
    async def read_loop(self) -> None:
        """Read chunks until EOF or error; fast path writes directly when no toxic is active."""
        reader, writer, conn = self.reader, self.writer, self.conn
        transport = writer.transport
        reason = f"{self.source} closed"
        try:
            while not conn.closed:
                slow = bool(self.active or self.queue)
                data = await reader.read(CHUNK if slow else FAST_CHUNK)
                if not data:
                    break
                if self.active or self.queue:
                    for i in range(0, len(data), CHUNK):  # toxics see <= 32 KiB chunks
                        self._enqueue(data[i:i + CHUNK] if len(data) > CHUNK else data)
                    if self.queued_bytes > QUEUE_HIGH:
                        self.queue_room.clear()
                        await self.queue_room.wait()
                    continue
                if transport.is_closing():  # the destination went away
                    reason = f"{'upstream' if self.direction == 'upstream' else 'client'} closed"
                    conn.close("upstream" if self.direction == "upstream" else "client", reason)
                    return
                writer.write(data)
                self.nbytes += len(data)
                if transport.get_write_buffer_size() > HIGH_WATER:
                    await writer.drain()
        except (ConnectionError, OSError) as exc:
            reason = f"{self.source} {type(exc).__name__}: {exc}"
            if self.queue or self.active:
                self._enqueue(None, reason)
                return
            conn.close(self.source, reason)
            return
        if conn.closed:
            return
        if self.queue or self.active:
            self._enqueue(None, reason)
        else:
            conn.close(self.source, reason)

    def _enqueue(self, data: bytes | None, reason: str | None = None) -> None:
        if data is None:
            self.eof_reason = reason or f"{self.source} closed"
        else:
            self.queued_bytes += len(data)
        self.queue.append((time.monotonic(), data))
        self.changed.set()
        if self.processor is None:
            self.processor = asyncio.get_running_loop().create_task(self._process())

    # -- toxic chain --------------------------------------------------------------------------
    async def _process(self) -> None:
        try:
            while not self.conn.closed:
                if not self.queue:
                    self.changed.clear()
                    await self.changed.wait()
                    continue
                ts, data = self.queue[0]
                if data is None:
                    delay = sum(t.attr("delay") for t in self.active if t.type == "slow_close")
                    if delay:
                        await asyncio.sleep(delay / 1000.0)
                    self.conn.close(self.source, self.eof_reason)
                    return
                await self._apply(ts, data)
                self.queue.popleft()
                self.queued_bytes -= len(data)
                if self.queued_bytes <= QUEUE_HIGH // 2:
                    self.queue_room.set()
        except _Closed:
            pass
        except (ConnectionError, OSError) as exc:
            self.conn.close("client" if self.direction == "downstream" else "upstream",
                            f"write failed: {exc}")

    async def _wait_change(self, timeout: float | None = None) -> None:
        self.changed.clear()
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except TimeoutError:
            pass
        if self.conn.closed:
            raise _Closed

    async def _apply(self, ts: float, data: bytes) -> None:
        deadline = ts
        pieces: list[bytes] = [data]
        piece_delay = 0.0
        for toxic in list(self.active):
            kind = toxic.type
            if kind == "timeout":
                return  # dropped on the floor
            if kind == "latency":
                jitter = toxic.attr("jitter")
                delay_ms = toxic.attr("latency") + (random.uniform(-jitter, jitter) if jitter else 0)
                deadline += delay_ms / 1000
                wait = deadline - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            elif kind == "bandwidth":
                while toxic in self.active and toxic.attr("rate") == 0:
                    await self._wait_change()  # rate 0 stalls until the toxic changes
                if toxic in self.active:
                    size = sum(len(p) for p in pieces)
                    now = time.monotonic()
                    start = max(now, self.state.get(toxic, now))
                    done = start + size / (toxic.attr("rate") * 1000.0)
                    self.state[toxic] = done
                    if done > now:
                        await asyncio.sleep(done - now)
            elif kind == "reset_peer":
                await asyncio.sleep(toxic.attr("timeout") / 1000.0)
                self.conn.close("toxic", "reset_peer", rst=True)
                raise _Closed
            elif kind == "slicer":
                avg, var = toxic.attr("average_size"), toxic.attr("size_variation")
                sliced: list[bytes] = []
                for piece in pieces:
                    pos = 0
                    while pos < len(piece):
                        size = max(1, avg + (random.randint(-var, var) if var else 0))
                        sliced.append(piece[pos:pos + size])
                        pos += size
                pieces = sliced
                piece_delay = toxic.attr("delay") / 1_000_000.0
            elif kind == "limit_data":
                limit = toxic.attr("bytes")
                sent = self.state.get(toxic, 0)
                kept: list[bytes] = []
                for piece in pieces:
                    room = limit - sent
                    if room <= 0:
                        break
                    kept.append(piece[:room])
                    sent += len(kept[-1])
                self.state[toxic] = sent
                self._write(kept)
                await self._flush_and_check()
                if sent >= limit:
                    self.conn.close("toxic", "limit_data")
                    raise _Closed
                return
            if self.conn.closed:
                raise _Closed
        if piece_delay and len(pieces) > 1:
            for i, piece in enumerate(pieces):
                if i:
                    await asyncio.sleep(piece_delay)
                    if self.conn.closed:
                        raise _Closed
                self._write([piece])
                await self._flush_and_check()
        else:
            self._write(pieces)
            await self._flush_and_check()

    def _write(self, pieces: list[bytes]) -> None:
        for piece in pieces:
            if piece:
                self.writer.write(piece)
                self.nbytes += len(piece)

    async def _flush_and_check(self) -> None:
        if self.writer.transport.get_write_buffer_size() > HIGH_WATER:
            await self.writer.drain()
        if self.conn.closed:
            raise _Closed


def _set_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass


class Conn:
    """One proxied client connection and its upstream connection."""

    def __init__(self, proxy: ProxyState, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.server = proxy.server
        self.id = self.server.next_conn_id()
        self.client_reader = reader
        self.client_writer = writer
        self.upstream_writer: asyncio.StreamWriter | None = None
        self.up: Link | None = None
        self.down: Link | None = None
        self.closed = False
        self.tasks: list[asyncio.Task[Any]] = []
        self.run_task: asyncio.Task[Any] | None = None
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.client = f"{peer[0]}:{peer[1]}"

    async def run(self) -> None:
        """Dial the upstream and run both links until the connection closes."""
        proxy = self.proxy
        upstream = proxy.upstream
        self.run_task = asyncio.current_task()
        self.server.emit("conn.accepted", proxy=proxy.name, conn_id=self.id, client=self.client,
                         listen=proxy.listen, upstream=upstream, node=proxy.node)
        try:
            host, port = split_hostport(upstream)
            up_reader, up_writer = await asyncio.open_connection(host, port, limit=STREAM_LIMIT)
        except (OSError, ValueError) as exc:
            if self.closed:
                return
            self.server.emit("conn.upstream_failed", proxy=proxy.name, conn_id=self.id,
                             upstream=upstream, error=str(exc) or type(exc).__name__)
            if self.client_reader._buffer:  # type: ignore[attr-defined]  # client sent data: RST
                _set_rst(self.client_writer)
                self.client_writer.transport.abort()
            self.close("upstream", "upstream connect failed")
            return
        except asyncio.CancelledError:
            self.close("proxy", "server stopped")  # no-op if close() cancelled the dial
            return
        if self.closed:  # disabled while dialing
            up_writer.transport.abort()
            return
        self.upstream_writer = up_writer
        self.server.emit("conn.upstream_connected", proxy=proxy.name, conn_id=self.id,
                         upstream=upstream)
        self.up = Link(self, "upstream", self.client_reader, up_writer)
        self.down = Link(self, "downstream", up_reader, self.client_writer)
        self.up.recompute()
        self.down.recompute()
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self.down.read_loop())]
        try:
            await self.up.read_loop()
            if self.tasks and not self.closed:
                await asyncio.wait(self.tasks)
        except asyncio.CancelledError:
            self.close("proxy", "server stopped")
            raise

    def toxics_changed(self, removed: ToxicState | None) -> None:
        """Re-evaluate the toxics of both links; a removed timeout toxic closes the connection."""
        if self.closed or self.up is None or self.down is None:
            return
        close_up = self.up.recompute(removed)
        close_down = self.down.recompute(removed)
        if close_up or close_down:
            self.close("toxic", "timeout toxic removed")

    def close(self, by: str, reason: str, rst: bool = False) -> None:
        """Close both sockets once and emit ``conn.closed``.

        ``rst``: reset both sides (SO_LINGER 0). A close by the proxy (disable, delete, restart,
        stop) drops unsent data at once, like the real server; other closes flush first."""
        if self.closed:
            return
        self.closed = True
        if self.up is None and self.run_task is not None and self.run_task is not asyncio.current_task():
            self.run_task.cancel()  # still dialing the upstream: give up the dial
        writers = [self.client_writer] + ([self.upstream_writer] if self.upstream_writer else [])
        for link in (self.up, self.down):
            if link is not None:
                link.cancel()
                link.changed.set()
                link.queue_room.set()
        for w in writers:
            if rst:
                _set_rst(w)
                w.transport.abort()
            elif by == "proxy":
                w.transport.abort()
            else:
                w.close()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        self.proxy.conns.discard(self)
        self.server.emit("conn.closed", proxy=self.proxy.name, conn_id=self.id, by=by, reason=reason,
                         bytes_up=self.up.nbytes if self.up else 0,
                         bytes_down=self.down.nbytes if self.down else 0)


# ------------------------------------------------------------------------------------------------
# Server and HTTP API
# ------------------------------------------------------------------------------------------------
def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message, "status": status}, status=status)


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw)
    except ValueError as exc:
        detail = "EOF" if not raw.strip() else str(exc)
        raise ApiError(400, f"bad request body: {detail}") from exc


def _require_obj(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "bad request body: expected a JSON object")
    return body


def _check_proxy_fields(body: dict[str, Any]) -> None:
    for key in ("name", "listen", "upstream", "node"):
        if key in body and body[key] is not None and not isinstance(body[key], str):
            raise ApiError(400, f"bad request body: {key} must be a string")
    if "enabled" in body and not isinstance(body["enabled"], bool):
        raise ApiError(400, "bad request body: enabled must be a boolean")


class ToxiproxyServer:
    """The embedded Toxiproxy server bound to the running asyncio loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.proxies: dict[str, ProxyState] = {}
        self._runner: web.AppRunner | None = None
        self._conn_ids = 0
        self._seq = 0
        self._events: collections.deque[ConnEvent] = collections.deque(maxlen=EVENTS_KEPT)
        self._events_lock = threading.Lock()
        self._subscribers: list[EventCallback] = []

    # -- events --------------------------------------------------------------------------------
    def next_conn_id(self) -> int:
        """A new connection id (unique for this server)."""
        self._conn_ids += 1
        return self._conn_ids

    def emit(self, type_: str, **fields: Any) -> None:
        """Record a connection event stamped now and pass it to every subscriber."""
        t = time.monotonic()
        with self._events_lock:
            event = ConnEvent(self._seq, t, type_, fields)
            self._seq += 1
            self._events.append(event)
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(event)
            except Exception:  # a broken subscriber must not break the data path
                log.exception("connection-event subscriber %r failed", callback)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(event)`` for every later event (on the server's thread); returns unsubscribe."""
        with self._events_lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._events_lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def events(self, since: int = 0, limit: int | None = None) -> tuple[list[ConnEvent], int]:
        """Kept events with ``seq >= since`` (at most ``limit``) and the next ``since`` to use."""
        with self._events_lock:
            out = [e for e in self._events if e.seq >= since]
            next_seq = self._seq
        if limit is not None and len(out) > limit:
            out = out[:limit]
            next_seq = out[-1].seq + 1
        return out, max(next_seq, since)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the HTTP API on ``host:port`` (port 0 -> a free port, see :attr:`port`)."""
        app = web.Application(middlewares=[self._errors])
        r = app.router
        r.add_get("/version", self._version)
        r.add_get("/proxies", self._list_proxies)
        r.add_post("/proxies", self._create_proxy)
        r.add_post("/populate", self._populate)
        r.add_post("/reset", self._reset)
        r.add_get("/events", self._events_handler)
        r.add_get("/proxies/{proxy}", self._get_proxy)
        r.add_route("PATCH", "/proxies/{proxy}", self._update_proxy)
        r.add_post("/proxies/{proxy}", self._update_proxy)
        r.add_delete("/proxies/{proxy}", self._delete_proxy)
        r.add_get("/proxies/{proxy}/toxics", self._list_toxics)
        r.add_post("/proxies/{proxy}/toxics", self._add_toxic)
        r.add_get("/proxies/{proxy}/toxics/{toxic}", self._get_toxic)
        r.add_route("PATCH", "/proxies/{proxy}/toxics/{toxic}", self._update_toxic)
        r.add_post("/proxies/{proxy}/toxics/{toxic}", self._update_toxic)
        r.add_delete("/proxies/{proxy}/toxics/{toxic}", self._delete_toxic)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise ProxyError(f"embedded toxiproxy could not bind its API on {self.host}:{self.port}: "
                             f"{exc.strerror or exc}; choose another --port or use 0") from exc
        server = site._server  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close every proxy and connection, then the HTTP API."""
        for proxy in list(self.proxies.values()):
            proxy.stop("server stopped")
        self.proxies.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- HTTP handlers -------------------------------------------------------------------------
    @web.middleware
    async def _errors(self, request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc.status, exc.message)

    def _proxy(self, request: web.Request) -> ProxyState:
        proxy = self.proxies.get(request.match_info["proxy"])
        if proxy is None:
            raise ApiError(404, "proxy not found")
        return proxy

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": VERSION, "server": "failover-harness embedded"})

    async def _list_proxies(self, request: web.Request) -> web.Response:
        return web.json_response({name: p.to_json() for name, p in self.proxies.items()})

    def _parse_new_proxy(self, body: Any) -> dict[str, Any]:
        body = _require_obj(body)
        _check_proxy_fields(body)
        if not body.get("name"):
            raise ApiError(400, "missing required field: name")
        if not body.get("upstream"):
            raise ApiError(400, "missing required field: upstream")
        return {"name": body["name"], "listen": body.get("listen") or "127.0.0.1:0",
                "upstream": body["upstream"], "enabled": body.get("enabled", True),
                "node": body.get("node")}

    async def _add_proxy(self, spec: dict[str, Any]) -> ProxyState:
        proxy = ProxyState(self, spec["name"], spec["listen"], spec["upstream"], spec["node"])
        self.proxies[proxy.name] = proxy  # reserve the name before awaiting the bind
        if spec["enabled"]:
            try:
                await proxy.start()
            except BaseException:
                if self.proxies.get(proxy.name) is proxy:
                    del self.proxies[proxy.name]
                raise
        return proxy

    async def _create_proxy(self, request: web.Request) -> web.Response:
        spec = self._parse_new_proxy(await _body(request))
        if spec["name"] in self.proxies:
            raise ApiError(409, "proxy already exists")
        proxy = await self._add_proxy(spec)
        return web.json_response(proxy.to_json(), status=201)

    async def _populate(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not isinstance(body, list):
            raise ApiError(400, "bad request body: expected a JSON array of proxies")
        specs = [self._parse_new_proxy(item) for item in body]
        done: list[ProxyState] = []
        for spec in specs:
            existing = self.proxies.get(spec["name"])
            if existing is not None and existing.listen == spec["listen"] \
                    and existing.upstream == spec["upstream"]:
                done.append(existing)
                continue
            if existing is not None:
                existing.stop("proxy replaced")
                del self.proxies[existing.name]
            try:
                done.append(await self._add_proxy(spec))
            except ApiError as exc:
                return web.json_response({"error": exc.message, "status": exc.status,
                                          "proxies": [p.to_json() for p in done]}, status=exc.status)
        return web.json_response({"proxies": [p.to_json() for p in done]}, status=201)

    async def _reset(self, request: web.Request) -> web.Response:
        for proxy in self.proxies.values():
            removed = list(proxy.toxics.values())
            proxy.toxics.clear()
            for toxic in removed:
                proxy.toxics_changed(toxic)
            if not proxy.enabled:
                await proxy.start()
        return web.Response(status=204)

    async def _events_handler(self, request: web.Request) -> web.Response:
        try:
            since = int(request.query.get("since", "0"))
            limit = int(request.query.get("limit", "10000"))
        except ValueError as exc:
            raise ApiError(400, "bad request: since and limit must be integers") from exc
        events, next_seq = self.events(since, limit)
        return web.json_response({"events": [e.to_json() for e in events], "next": next_seq})

    async def _get_proxy(self, request: web.Request) -> web.Response:
        return web.json_response(self._proxy(request).to_json())

    async def _update_proxy(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        body = _require_obj(await _body(request))
        _check_proxy_fields(body)
        if "node" in body:
            proxy.node = body["node"]
        listen = body.get("listen") or proxy.listen
        upstream = body.get("upstream") or proxy.upstream
        enabled = body.get("enabled", proxy.enabled)
        if listen != proxy.listen or upstream != proxy.upstream:
            proxy.stop("proxy restarted (listen or upstream changed)")
            proxy.listen, proxy.upstream = listen, upstream
        if enabled and not proxy.enabled:
            await proxy.start()
        elif not enabled and proxy.enabled:
            proxy.stop("proxy disabled")
        return web.json_response(proxy.to_json())

    async def _delete_proxy(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        proxy.stop("proxy deleted")
        del self.proxies[proxy.name]
        return web.Response(status=204)

    async def _list_toxics(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        return web.json_response([t.to_json() for s in STREAMS for t in proxy.chain(s)])

    async def _add_toxic(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        body = _require_obj(await _body(request))
        stream = body.get("stream", "downstream")
        if stream not in STREAMS:
            raise ApiError(400, "stream was invalid, can be either upstream or downstream")
        type_ = body.get("type")
        if type_ not in TOXIC_TYPES:
            raise ApiError(400, "invalid toxic type")
        name = body.get("name") or f"{type_}_{stream}"
        if not isinstance(name, str):
            raise ApiError(400, "bad request body: name must be a string")
        if name in proxy.toxics:
            raise ApiError(409, "toxic already exists")
        toxicity = body.get("toxicity", 1.0)
        if isinstance(toxicity, bool) or not isinstance(toxicity, int | float):
            raise ApiError(400, "bad request body: toxicity must be a number")
        attributes = _validate_attributes(type_, body.get("attributes"))
        toxic = ToxicState(name, type_, stream, float(toxicity), attributes)
        proxy.toxics[name] = toxic
        proxy.toxics_changed()
        return web.json_response(toxic.to_json())

    def _toxic(self, proxy: ProxyState, request: web.Request) -> ToxicState:
        toxic = proxy.toxics.get(request.match_info["toxic"])
        if toxic is None:
            raise ApiError(404, "toxic not found")
        return toxic

    async def _get_toxic(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        return web.json_response(self._toxic(proxy, request).to_json())

    async def _update_toxic(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        toxic = self._toxic(proxy, request)
        body = _require_obj(await _body(request))
        attributes = _validate_attributes(toxic.type, body.get("attributes"), toxic.attributes)
        toxicity = body.get("toxicity", toxic.toxicity)
        if isinstance(toxicity, bool) or not isinstance(toxicity, int | float):
            raise ApiError(400, "bad request body: toxicity must be a number")
        toxic.attributes = attributes
        toxic.toxicity = float(toxicity)
        toxic.touch()
        proxy.toxics_changed()
        return web.json_response(toxic.to_json())

    async def _delete_toxic(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        toxic = self._toxic(proxy, request)
        del proxy.toxics[toxic.name]
        proxy.toxics_changed(toxic)
        return web.Response(status=204)


def quiet_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Loop exception handler: peers resetting or vanishing is normal for a fault proxy; anything
    else goes to asyncio's default handler."""
    if isinstance(context.get("exception"), ConnectionError | TimeoutError):
        return
    loop.default_exception_handler(context)


# ------------------------------------------------------------------------------------------------
# In-process runner
# ------------------------------------------------------------------------------------------------
class EmbeddedToxiproxy:
    """A :class:`ToxiproxyServer` running on its own background thread.

    ``with EmbeddedToxiproxy() as tp: tp.url`` - binds 127.0.0.1 and a free port unless told
    otherwise; :meth:`stop` closes every proxy, connection, the loop and the thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._requested_port = port
        self._server = ToxiproxyServer(host, port)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def api_port(self) -> int:
        """The port of the HTTP API (the real one once started)."""
        return self._server.port

    @property
    def url(self) -> str:
        """Base URL of the HTTP API, e.g. ``http://127.0.0.1:41234``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.api_port}"

    @property
    def server(self) -> ToxiproxyServer:
        """The server object (touch its state only from its own loop)."""
        return self._server

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._thread is not None

    def start(self) -> EmbeddedToxiproxy:
        """Start the loop thread and the HTTP API; returns self. Raises ProxyError if it cannot bind."""
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(quiet_exception_handler)
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._server.start())
            except BaseException as exc:  # report to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        thread = threading.Thread(target=run, name=f"embedded-toxiproxy-{id(self):x}", daemon=True)
        thread.start()
        ready.wait()
        if failure:
            thread.join()
            loop.close()
            exc = failure[0]
            if isinstance(exc, ProxyError):
                raise exc
            raise ProxyError(f"embedded toxiproxy failed to start: {exc}") from exc
        self._loop, self._thread = loop, thread
        return self

    def stop(self) -> None:
        """Close everything and join the thread (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._server.stop(), loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            # let cancelled tasks finish, then close the loop
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._loop = self._thread = None

    def __enter__(self) -> EmbeddedToxiproxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(ConnEvent)`` for every later connection event, from the server thread.

        Keep callbacks cheap (they run on the data path). Returns a function that unsubscribes."""
        return self._server.subscribe(callback)

    def events(self, since: int = 0) -> list[ConnEvent]:
        """Kept connection events with ``seq >= since`` (thread-safe)."""
        return self._server.events(since)[0]


async def serve_forever(host: str, port: int, stop: asyncio.Event,
                        ready: Callable[[ToxiproxyServer], None] | None = None) -> None:
    """Run a server on the current loop until ``stop`` is set (used by the CLI)."""
    asyncio.get_running_loop().set_exception_handler(quiet_exception_handler)
    server = ToxiproxyServer(host, port)
    await server.start()
    if ready is not None:
        ready(server)
    try:
        await stop.wait()
    finally:
        await server.stop()
