"""The embedded fault proxy: a Toxiproxy-2.12-compatible server written in asyncio.

The HTTP API (:mod:`harness.toxiproxy.api`) runs on aiohttp, the proxied TCP
(:mod:`~harness.toxiproxy.proxystate`, :mod:`~harness.toxiproxy.conn`, :mod:`~harness.toxiproxy.link`)
on asyncio streams, all on one event loop. :class:`ToxiproxyServer` lives on a loop you own (used
by ``failover-harness toxiproxy-server``); :class:`EmbeddedToxiproxy` runs one on its own background
thread for in-process use.

Extension (not in real Toxiproxy): every proxied connection emits ``conn.*`` events
(docs/events.md), readable with ``GET /events?since=N`` or :meth:`EmbeddedToxiproxy.subscribe`.
Deliberate differences from the real server are listed in docs/toxiproxy.md.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from harness.errors import ProxyError
from harness.toxiproxy.api import VERSION, ToxiproxyServer
from harness.toxiproxy.events import EventCallback
from harness.toxiproxy.httpconn import HEADER_TIMEOUT
from harness.toxiproxy.models import ConnEvent

T = TypeVar("T")

__all__ = ["VERSION", "EmbeddedToxiproxy", "ToxiproxyServer", "quiet_exception_handler", "serve_forever"]


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

    def __init__(self, host: str = "127.0.0.1", port: int = 0, allow_remote: bool = False,
                 header_timeout: float = HEADER_TIMEOUT) -> None:
        self.host = host
        self._requested_port = port
        self._server = ToxiproxyServer(host, port, allow_remote=allow_remote, header_timeout=header_timeout)
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
        if not ready.wait(timeout=30):  # a deadline even for the in-process start (docs/topology.md)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            raise ProxyError("embedded toxiproxy did not start within 30 s")
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

    def call(self, fn: Callable[[ToxiproxyServer], T], timeout: float = 10.0) -> T:
        """Run ``fn(server)`` on the server's loop thread and return its result (the only safe way
        to touch the server's state from another thread; tests use it)."""
        loop = self._loop
        if loop is None:
            raise ProxyError("the embedded toxiproxy is not running; call start() first")

        async def run() -> T:
            return fn(self._server)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=timeout)


async def serve_forever(host: str, port: int, stop: asyncio.Event,
                        ready: Callable[[ToxiproxyServer], None] | None = None,
                        allow_remote: bool = False) -> None:
    """Run a server on the current loop until ``stop`` is set (used by the CLI)."""
    asyncio.get_running_loop().set_exception_handler(quiet_exception_handler)
    server = ToxiproxyServer(host, port, allow_remote=allow_remote)
    await server.start()
    if ready is not None:
        ready(server)
    try:
        await stop.wait()
    finally:
        await server.stop()
