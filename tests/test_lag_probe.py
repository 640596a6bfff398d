"""The fault proxy's log-lag probe (compose backend, OBS-1): a real Toxiproxy's API request lines,
read through a :class:`LogEventPipe`, tell how late the log path stamps events; lags above the
threshold reach the subscribers as ``harness.stall`` events with a ``source``, which
:class:`StallMonitor` counts like its own stalls."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from harness.history.core import History
from harness.ports import allocate_port, release_port
from harness.toxiproxy.logpipe import LAG_SOURCE, LogEventPipe
from harness.workload.mirroring import StallMonitor
from tests.test_toxiproxy_real_suites import real_binary


@pytest.fixture
def real_server() -> object:
    binary = real_binary()
    if binary is None:
        pytest.skip("no real toxiproxy-server (TOXIPROXY_SERVER_BIN, ../shared/toxiproxy/, PATH)")
    port = allocate_port()
    proc = subprocess.Popen([binary, "-host", "127.0.0.1", "-port", str(port)], env=dict(os.environ, LOG_LEVEL="trace"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    pipe = LogEventPipe(f"http://127.0.0.1:{port}").start()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            pipe.put(time.monotonic(), line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield pipe
    finally:
        pipe.stop()
        proc.terminate()
        proc.wait(10)
        reader.join(5)
        release_port(port)


def _stalls_seen(pipe: LogEventPipe, threshold: float, seconds: float = 1.5) -> list[dict]:
    seen: list[dict] = []
    stop = pipe.subscribe(lambda ev: seen.append(dict(ev.fields)) if ev.type == "harness.stall" else None)
    pipe.start_probe(interval=0.02, threshold=threshold)
    time.sleep(seconds)
    stop()
    return seen


def test_every_probe_is_a_stall_above_a_zero_threshold(real_server: LogEventPipe) -> None:
    seen = _stalls_seen(real_server, threshold=0.0)
    assert len(seen) >= 10, seen  # ~75 probes in 1.5 s; each one's line is stamped after it was sent
    assert all(s["source"] == LAG_SOURCE and 0 < s["seconds"] < 1.5 for s in seen), seen


def test_no_stall_below_a_threshold_no_log_path_reaches(real_server: LogEventPipe) -> None:
    assert _stalls_seen(real_server, threshold=5.0) == []


def test_stall_monitor_counts_the_fault_proxys_lag() -> None:
    history = History()
    with StallMonitor(history, threshold=10.0) as monitor:  # no stall of its own can count
        history.record("harness.stall", seconds=0.04, source=LAG_SOURCE)
    assert monitor.stalls == [0.04]
    history2 = History()
    history2.record("harness.stall", seconds=0.04, source=LAG_SOURCE)  # before the monitor: not its window
    with StallMonitor(history2, threshold=10.0) as monitor2:
        pass
    assert monitor2.stalls == []
