"""Run a :class:`PersistentProxy` (and optionally its admin interface) on an asyncio loop in a
background thread, with blocking ``drain``/``resume``/``status`` for tests and suites."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .admin import AdminServer, new_token
from .backend import Address
from .loop import start_loop_thread
from .proxy import PersistentProxy, ProxyConfig

T = TypeVar("T")


class ThreadedPersistentProxy:
    """``with ThreadedPersistentProxy(config) as proxy: proxy.address ...`` - the persistent proxy
    (PER-1..PER-8) in a daemon thread. ``admin=("127.0.0.1", 0)`` also starts the HTTP admin, whose
    state-changing requests need :attr:`admin_token` (a new random one per proxy unless given);
    a non-loopback ``admin`` address needs ``allow_remote_admin=True``."""

    def __init__(self, config: ProxyConfig, admin: Address | None = None, *, admin_token: str | None = None,
                 allow_remote_admin: bool = False) -> None:
        self.config = config
        self.proxy = PersistentProxy(config)
        #: the token the admin API requires (``X-Failover-Harness-Token``); None without an admin API
        self.admin_token: str | None = None
        self.admin: AdminServer | None = None
        if admin is not None:  # checked here (loopback unless allowed), served from start()
            self.admin_token = admin_token or new_token()
            self.admin = AdminServer(self.proxy, *admin, token=self.admin_token, allow_remote=allow_remote_admin)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.address: Address | None = None
        self.admin_address: Address | None = None

    def start(self) -> Address:
        """Start the loop thread and the listener; returns the proxy's ``(host, port)``."""

        def setup(loop: asyncio.AbstractEventLoop) -> None:
            self._loop = loop
            self.address = loop.run_until_complete(self.proxy.start())
            if self.admin is not None:
                self.admin_address = loop.run_until_complete(self.admin.start())

        def release(loop: asyncio.AbstractEventLoop) -> None:  # whatever was bound
            loop.run_until_complete(self.proxy.stop())

        self._loop, self._thread = start_loop_thread("persistent-proxy", setup, release)
        assert self.address is not None
        return self.address

    def call(self, coro_factory: Callable[[], Coroutine[Any, Any, T]], timeout: float | None = None) -> T:
        """Run a coroutine on the proxy's loop and wait for its result. The caller is woken from
        inside the coroutine as it ends, not by the task's done callback, which the loop runs only
        after whatever the coroutine scheduled (e.g. the drain's pre-attach replays: the switchover stall)."""
        assert self._loop is not None
        done = threading.Event()
        box: list[Any] = []

        async def run() -> None:
            try:
                box.append((True, await coro_factory()))
            except BaseException as exc:  # handed to the caller
                box.append((False, exc))
            finally:
                done.set()

        future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        if not done.wait(timeout):
            future.cancel()
            raise TimeoutError(f"the persistent proxy did not answer within {timeout} s")
        ok, value = box[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def drain(self, timeout: float | None = None) -> dict[str, Any]:
        """Blocking :meth:`PersistentProxy.drain` (PER-4, PER-5..8)."""
        return self.call(lambda: self.proxy.drain(timeout))

    def prepare(self, address: Address) -> dict[str, Any]:
        """Blocking :meth:`PersistentProxy.prepare` (returns at once; the pre-attach runs in the
        proxy's loop - the switchover stall, PER-1/PER-2)."""
        return self.call(lambda: self.proxy.prepare(address))

    def resume(self, address: Address | None = None) -> dict[str, Any]:
        """Blocking :meth:`PersistentProxy.resume` (PER-1, PER-2, PER-3)."""
        return self.call(lambda: self.proxy.resume(address))

    def remove_node(self, address: Address, window: float | None = None, node: str | None = None) -> dict[str, Any]:
        """Blocking :meth:`PersistentProxy.remove_node` (PER-9, PER-10)."""
        return self.call(lambda: self.proxy.remove_node(address, window, node))

    def switchover(self, action: Callable[[], Any], timeout: float | None = None) -> dict[str, Any]:
        """``drain()``, ``action()`` in this thread (e.g. ``pair.switchover``), ``resume()``
        (PER-1, PER-4)."""
        drained = self.drain(timeout)
        action()
        return {"drain": drained, "resume": self.resume()}

    def status(self) -> dict[str, Any]:
        """Blocking :meth:`PersistentProxy.status`."""

        async def snap() -> dict[str, Any]:
            return self.proxy.status()

        return self.call(snap)

    def stop(self) -> None:
        """Close every session, stop the listener and the thread."""
        if self._loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            if self.admin is not None:
                await self.admin.stop()
            await self.proxy.stop()

        try:
            self.call(shutdown, timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> ThreadedPersistentProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
