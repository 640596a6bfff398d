"""The event loop the persistent proxy runs on: uvloop (libuv, its transports in C) when installed,
else the standard asyncio loop. Profiled under the PER OLTP load (docs/persistent-proxy.md,
"Performance"), the proxy's time is in the socket writes and the loop itself, not in its own
parsing, so the loop is the lever (PER-1: the proxy must keep up with the application).

``FAILOVER_HARNESS_PROXY_LOOP=asyncio`` forces the standard loop (e.g. to compare the two)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import threading
from collections.abc import Callable

from harness.errors import ConfigError

ENV = "FAILOVER_HARNESS_PROXY_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


def loop_kind(choice: str | None = None) -> str:
    """``uvloop`` or ``asyncio``: ``choice`` (default ``$FAILOVER_HARNESS_PROXY_LOOP``, else
    ``auto`` = uvloop when it is installed). A choice outside :data:`CHOICES` is a ConfigError."""
    choice = (choice or os.environ.get(ENV) or "auto").lower()
    if choice not in CHOICES:
        raise ConfigError(f"{ENV} must be one of {', '.join(CHOICES)}, not {choice!r}")
    available = importlib.util.find_spec("uvloop") is not None
    if choice == "uvloop" and not available:
        raise ConfigError(f"{ENV}=uvloop but uvloop is not installed: pip install uvloop")
    if choice == "auto":
        return "uvloop" if available else "asyncio"
    return choice


def new_loop(choice: str | None = None) -> asyncio.AbstractEventLoop:
    """A new event loop of :func:`loop_kind` (PER-1 data path)."""
    if loop_kind(choice) == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def start_loop_thread(name: str, setup: Callable[[asyncio.AbstractEventLoop], None],
                      on_error: Callable[[asyncio.AbstractEventLoop], None] | None = None,
                      timeout: float = 30.0) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """Start a daemon thread ``name`` running a new :func:`new_loop` loop forever, once
    ``setup(loop)`` has run on it (binding listeners, say); returns the loop and the thread. An
    error in ``setup`` is raised here, after ``on_error(loop)`` released what was bound and the loop
    closed; a setup that takes longer than ``timeout`` s is a TimeoutError. Stop it with
    ``loop.call_soon_threadsafe(loop.stop)`` and a join: the loop then closes itself."""
    ready = threading.Event()
    box: list[asyncio.AbstractEventLoop] = []
    error: list[BaseException] = []

    def run() -> None:
        loop = new_loop()
        box.append(loop)
        asyncio.set_event_loop(loop)
        try:
            setup(loop)
        except BaseException as exc:  # reported to the starting thread
            error.append(exc)
            if on_error is not None:
                with contextlib.suppress(Exception):  # the setup's error is the one to report
                    on_error(loop)
            ready.set()
            loop.close()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if not ready.wait(timeout):
        raise TimeoutError(f"{name}: its event loop was not set up within {timeout:g} s")
    if error:
        raise error[0]
    return box[0], thread
