"""The event loop the persistent proxy runs on: uvloop (libuv, its transports in C) when installed,
else the standard asyncio loop. Profiled under the PER OLTP load (docs/persistent-proxy.md,
"Performance"), the proxy's time is in the socket writes and the loop itself, not in its own
parsing, so the loop is the lever (PER-1: the proxy must keep up with the application).

``FAILOVER_HARNESS_PROXY_LOOP=asyncio`` forces the standard loop (e.g. to compare the two)."""

from __future__ import annotations

import asyncio
import importlib.util
import os

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
