"""The embedded API's connections: a header read timeout, as real Toxiproxy 2.12 has (docs/toxiproxy.md,
"What the embedded server accepts").

Measured on the real server: a connection whose request headers are not complete 15 s after they
began (at connect, or at the first byte of a later request on a kept-alive connection) is closed,
even when bytes keep trickling in; an idle kept-alive connection between requests is left open.
:class:`HeaderTimeoutHandler` does the same on aiohttp, whose own timers only know idle time."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

#: Seconds a request's headers may take, as on real Toxiproxy 2.12 (measured: closed after 15.0 s).
HEADER_TIMEOUT = 15.0


class HeaderTimeoutHandler(RequestHandler):
    """An aiohttp connection handler that closes the connection when a request's headers are not
    complete ``header_timeout`` seconds after they began."""

    __slots__ = ("_header_timeout", "_header_timer", "_armed_at_count")

    def __init__(self, manager: Any, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        self._armed_at_count = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """The first request's headers begin now."""
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Start the clock at a request's first byte; stop it once its headers are parsed."""
        if data and self._header_timer is None and not self._request_in_progress:
            self._arm()
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._disarm()

    def connection_lost(self, exc: BaseException | None) -> None:
        """No clock for a closed connection."""
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._armed_at_count = self._request_count
        self._header_timer = self._loop.call_later(self._header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expired(self) -> None:
        self._header_timer = None
        if self._request_count == self._armed_at_count and not self._request_in_progress:
            self.force_close()


async def serve(runner: web.AppRunner, host: str, port: int, header_timeout: float) -> asyncio.Server:
    """Listen on ``host:port`` with ``runner``'s application, each connection handled by a
    :class:`HeaderTimeoutHandler` (the runner must be set up)."""
    server = runner.server
    assert server is not None, "set the runner up first"
    loop = asyncio.get_running_loop()

    def factory() -> HeaderTimeoutHandler:
        return HeaderTimeoutHandler(server, loop=loop, access_log=None, header_timeout=header_timeout)

    return await loop.create_server(factory, host, port, reuse_address=True)
