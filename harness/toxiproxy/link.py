"""The data path of the embedded server: one direction of a proxied connection (:class:`Link`).

Latency follows real Toxiproxy 2.12: every toxic is its own pipeline stage that works on one chunk
at a time. A latency stage takes a chunk when it is free, waits until ``stamp + delay`` (the chunk's
stamp starts as its read time) and passes it on, moving the stamp by the time it waited - which,
when chunks queue, is *less* than its delay (:func:`latency_stage`). So stacked latency toxics add
for a lone chunk (60 + 40 ms -> 100 ms) but not for chunks that queue behind each other.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.toxiproxy.conn import Conn
    from harness.toxiproxy.proxystate import ToxicState

CHUNK = 32 * 1024  # what a toxic sees per read, like the real server
FAST_CHUNK = 256 * 1024  # read size when no toxic acts on a link (fewer wake-ups, same bytes)
STREAM_LIMIT = 256 * 1024  # asyncio StreamReader buffer limit
HIGH_WATER = 256 * 1024  # bytes buffered towards a peer before the reader waits for it to drain
QUEUE_HIGH = 1024 * 1024  # bytes queued in front of the toxics before the reader waits


def latency_stage(arrival: float, free_at: float, stamp: float, delay: float) -> tuple[float, float]:
    """One latency toxic as real Toxiproxy 2.12 runs it: a chunk that reaches the stage at
    ``arrival`` is taken when the stage is free (``free_at``), held until ``stamp + delay`` and
    passed on. Returns ``(leaves_at, new_stamp)``: the stamp moves by the (possibly negative) time
    the stage meant to sleep, ``delay - (taken - stamp)``, exactly as the real toxic moves it."""
    taken = max(arrival, free_at)
    sleep = delay - (taken - stamp)
    return taken + max(sleep, 0.0), stamp + sleep


class _Closed(Exception):
    """The connection was closed while a link was working on it."""


class Link:
    """One direction of a connection: reads chunks from ``reader`` and writes them to ``writer``.

    With no toxic acting on it, chunks are written straight away from the read loop (no queue, no
    extra task). Otherwise chunks go through a queue worked by one processor task per link, which
    applies the toxic chain in order. Latency stages are computed, not slept one by one (see
    :func:`latency_stage`): each latency toxic keeps the time it is next free, so a chunk's
    departure is what real Toxiproxy's pipeline of stages would give, and one sleep reaches it.
    A failure inside the processor closes the connection and is logged (:meth:`Conn.fail`).
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
        except Exception as exc:  # noqa: BLE001 - a toxic that fails closes its connection pair
            self.conn.fail(exc)

    async def _wait_change(self, timeout: float | None = None) -> None:
        self.changed.clear()
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except TimeoutError:
            pass
        if self.conn.closed:
            raise _Closed

    async def _until(self, when: float) -> None:
        wait = when - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        if self.conn.closed:
            raise _Closed

    async def _apply(self, ts: float, data: bytes) -> None:
        stamp = at = ts  # the chunk's stamp (moved by latency stages) and when it reaches the next stage
        pieces: list[bytes] = [data]
        piece_delay = 0.0
        for toxic in list(self.active):
            kind = toxic.type
            if kind == "timeout":
                return  # dropped on the floor
            if kind == "latency":
                jitter = toxic.attr("jitter")
                delay_ms = toxic.attr("latency") + (random.uniform(-jitter, jitter) if jitter else 0)
                at, stamp = latency_stage(at, self.state.get(toxic, at), stamp, delay_ms / 1000)
                self.state[toxic] = at  # this stage is busy with the chunk until it leaves
                continue
            await self._until(at)  # the other toxics act in real time
            if kind == "bandwidth":
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
            at = time.monotonic()
        await self._until(at)
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


