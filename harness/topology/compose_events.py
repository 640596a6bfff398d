"""Connection events of the Compose backend's fault proxy: the real Toxiproxy in its container,
whose trace log (``LOG_LEVEL=trace``) is followed through the engine's log stream and turned into
the same ``conn.*`` events as a spawned server's (:class:`harness.toxiproxy.logpipe.LogEventPipe`:
the same deriver, the same settle barrier every history snapshot waits for, OBS-1).

Each line is stamped with the time the engine read it from the container (``docker logs
--timestamps``), converted to this process's ``time.monotonic()`` clock: the moment the server wrote
it, give or take the engine's pipe, not the later moment the follower received it. How late that
path is (the server's scheduling, the engine's log copier) is measured every 50 ms
(:meth:`LogEventPipe.start_probe`) and recorded as ``harness.stall`` when above 15 ms."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from harness.toxiproxy.logpipe import LogEventPipe
from harness.toxiproxy.models import ConnEvent

EventCallback = Callable[[ConnEvent], None]


def stamp(line: bytes, received: float) -> tuple[float, str]:
    """``(monotonic time, text)`` of one ``--timestamps`` log line (``2026-12-01T11:00:00.123456789Z
    text``); a line without a readable stamp gets ``received``."""
    head, _, text = line.decode(errors="replace").partition(" ")
    try:
        wall = datetime.fromisoformat(head[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return received, line.decode(errors="replace")
    return min(received, wall - (time.time() - time.monotonic())), text


class ContainerLogEvents:
    """Derived connection events of the Toxiproxy container's log (one follower from :meth:`start`
    on, any number of subscribers): the ``subscribe`` and ``settle`` a
    :class:`harness.toxiproxy.server_choice.FaultProxyHandle` takes."""

    def __init__(self, container: Any, url: str, node_of: Callable[[str], str | None],
                 listen_of: Callable[[str], str | None] | None = None) -> None:
        self._container = container
        self._pipe = LogEventPipe(url, node_of, listen_of)
        self._stream: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> ContainerLogEvents:
        """Follow the container's log (from its start: proxies created before are known too)."""
        self._pipe.start()
        self._pipe.start_probe()  # the engine's log copier adds a lag of its own: measure it
        self._stream = self._container.logs(stream=True, follow=True, stdout=True, stderr=True, timestamps=True)
        self._thread = threading.Thread(target=self._read, name="toxiproxy-container-log", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        buffer = b""
        try:
            with contextlib.suppress(Exception):  # the stream ends with an error when closed or the container goes
                for chunk in self._stream:
                    received = time.monotonic()
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        t, text = stamp(line, received)
                        self._pipe.put(t, text)
        finally:
            self._pipe.end()

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback`` for every later derived event; returns the function that stops it."""
        return self._pipe.subscribe(callback)

    def settle(self, timeout: float = 2.0) -> bool:
        """Return once every line the container logged before this call is derived and published
        (:meth:`LogEventPipe.settle`), False after ``timeout``."""
        if threading.current_thread() is self._thread:
            return True
        return self._pipe.settle(timeout)

    def close(self) -> None:
        """Stop following the log."""
        if self._stream is not None:
            with contextlib.suppress(Exception):
                self._stream.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pipe.stop()
