"""One proxied connection of the embedded server (:class:`Conn`): the client socket, the dial to the
upstream, the two :class:`~harness.toxiproxy.link.Link` directions, and its one ``conn.closed``."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import TYPE_CHECKING, Any

from harness.redact import protect_logger
from harness.toxiproxy.link import STREAM_LIMIT, Link
from harness.toxiproxy.models import split_hostport

if TYPE_CHECKING:
    from harness.toxiproxy.proxystate import ProxyState, ToxicState

log = protect_logger(logging.getLogger("harness.toxiproxy.server"))  # no password in a log line (harness.redact)


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
        except Exception as exc:  # noqa: BLE001 - OSError, a bad address, anything: the dial failed
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
        local = up_writer.get_extra_info("sockname") or ("?", 0)
        self.server.emit("conn.upstream_connected", proxy=proxy.name, conn_id=self.id,
                         upstream=upstream, local=f"{local[0]}:{local[1]}")
        self.up = Link(self, "upstream", self.client_reader, up_writer)
        self.down = Link(self, "downstream", up_reader, self.client_writer)
        loop = asyncio.get_running_loop()
        try:
            self.up.recompute()
            self.down.recompute()
            self.tasks = [loop.create_task(self.down.read_loop())]
            await self.up.read_loop()
            if self.tasks and not self.closed:
                await asyncio.wait(self.tasks)
        except asyncio.CancelledError:
            self.close("proxy", "server stopped")
            raise
        except Exception as exc:  # noqa: BLE001 - a bug must close this connection, not leak it
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """A task of this connection failed unexpectedly: log why and close both sides."""
        log.error("proxy %s connection %d (%s -> %s) failed: %s: %s; closing it", self.proxy.name, self.id,
                  self.client, self.proxy.upstream, type(exc).__name__, exc)
        self.close("proxy", f"internal error: {type(exc).__name__}", rst=True)

    def toxics_changed(self, removed: ToxicState | None) -> None:
        """Re-evaluate the toxics of both links; a removed timeout toxic closes the connection."""
        if self.closed or self.up is None or self.down is None:
            return
        try:
            close_up = self.up.recompute(removed)
            close_down = self.down.recompute(removed)
        except Exception as exc:  # noqa: BLE001 - e.g. a timer out of range: close, never hang
            self.fail(exc)
            return
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


