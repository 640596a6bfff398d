"""The steady-state data path of a persistent-proxy session (PER-1: the proxy must keep up with the
application): once a connection is logged in, its transport stops feeding an asyncio StreamReader
and hands every chunk straight to a callback (:class:`Tap`), so relaying a request or a result costs
one call instead of a future, a task wake-up and a buffer copy per read. Slow work (the switchover
gate, re-attaching, replaying state) still runs as coroutines, on streams, and the connection is
handed back to its stream with :func:`give_back` when a coroutine has to read it itself.

Profiled under sysbench ``oltp_point_select`` (docs/persistent-proxy.md, "Performance"): with
streams the proxy spent ≈2 task wake-ups and 2 stream-buffer copies per request cycle on top of the
socket calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class Tap(asyncio.Protocol):
    """An asyncio protocol that forwards its transport's events to four callbacks: ``data(chunk)``,
    ``lost(exc or None)`` (EOF included), ``pause()`` / ``resume()`` (the transport's own write
    buffer crossed its high / low water mark: the *other* side should stop / restart reading)."""

    def __init__(self, data: Callable[[bytes], None], lost: Callable[[BaseException | None], None],
                 pause: Callable[[], None], resume: Callable[[], None]) -> None:
        # bound straight to the callbacks: the event loop calls them with no extra frame
        self.data_received = data  # type: ignore[method-assign]
        self.lost = lost
        self.pause_writing = pause  # type: ignore[method-assign]
        self.resume_writing = resume  # type: ignore[method-assign]

    def eof_received(self) -> bool:
        """The peer closed its side: close the transport (``connection_lost`` follows)."""
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        """The connection is gone (closed by either side, or broken)."""
        self.lost(exc)


def take_over(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tap: Tap) -> tuple[bytes, bool]:
    """Install ``tap`` on the connection of ``reader``/``writer``; returns the bytes the stream had
    already received but nobody had read, and whether the stream had already seen EOF (or an error),
    in which case the tap is not installed and the caller handles the end itself."""
    buffered: Any = getattr(reader, "_buffer", b"")
    leftover = bytes(buffered)
    if isinstance(buffered, bytearray):
        buffered.clear()
    if reader.at_eof() or reader.exception() is not None or writer.transport.is_closing():
        return leftover, True
    writer.transport.set_protocol(tap)
    return leftover, False


def give_back(writer: asyncio.StreamWriter) -> None:
    """Hand the connection back to its stream (the StreamWriter's own protocol): later data feeds
    the StreamReader again. Bytes the tap had buffered are the caller's to keep."""
    protocol = getattr(writer, "_protocol", None)
    if protocol is not None and writer.transport.get_protocol() is not protocol:
        writer.transport.set_protocol(protocol)


def is_quiet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Whether a connection still on its stream is open and has received nothing that nobody read
    (an idle PostgreSQL back connection is told nothing unasked: pending bytes are a FATAL or a
    notice, EOF means it is gone)."""
    return not (getattr(reader, "_buffer", b"") or reader.at_eof() or reader.exception() is not None
                or writer.transport.is_closing())
