"""``harness.persistproxy.loop.start_loop_thread`` (the persistent proxy's and the benchmarks' loop
thread): a setup error reaches the caller after the clean-up ran, and a started loop serves until
stopped, then its thread ends."""

from __future__ import annotations

import asyncio
import threading

import pytest

from harness.persistproxy.loop import start_loop_thread


def test_a_setup_error_is_raised_to_the_caller_after_the_clean_up() -> None:
    cleaned: list[bool] = []

    def setup(loop: asyncio.AbstractEventLoop) -> None:
        raise OSError("address already in use")

    with pytest.raises(OSError, match="already in use"):
        start_loop_thread("t-fail", setup, lambda loop: cleaned.append(loop.is_closed()))
    assert cleaned == [False]  # it ran on the open loop, before the loop closed


def test_a_started_loop_runs_work_until_stopped_then_its_thread_ends() -> None:
    seen: list[str] = []
    loop, thread = start_loop_thread("t-ok", lambda loop: seen.append("setup"))
    assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "ran"), loop).result(5) == "ran"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    assert seen == ["setup"] and not thread.is_alive() and loop.is_closed()


def test_a_setup_that_hangs_is_a_timeout_naming_the_thread() -> None:

    release = threading.Event()
    with pytest.raises(TimeoutError, match="t-slow"):
        start_loop_thread("t-slow", lambda loop: release.wait(5), timeout=0.2)
    release.set()
