"""Connection events of the Compose backend's fault proxy: the real Toxiproxy in its container,
whose trace log (``LOG_LEVEL=trace``) is followed through the engine's log stream and turned into
the same ``conn.*`` events as a spawned server's by
:class:`harness.toxiproxy.logstream.LogEventDeriver` (stamped when a line is received)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.toxiproxy.logstream import LogEventDeriver
from harness.toxiproxy.models import ConnEvent

EventCallback = Callable[[ConnEvent], None]


class ContainerLogEvents:
    """Follows a container's log from now on in a thread and delivers derived connection events to
    subscribers (the shape :class:`harness.toxiproxy.select.FaultProxyHandle` takes)."""

    def __init__(self, container: Any, node_of: Callable[[str], str | None],
                 listen_of: Callable[[str], str | None] | None = None) -> None:
        self._deriver = LogEventDeriver(node_of)
        self._listen_of = listen_of or (lambda proxy: None)
        self._lock = threading.Lock()
        self._subscribers: list[EventCallback] = []
        self._stream = container.logs(stream=True, follow=True, stdout=True, stderr=True, since=int(time.time()) - 1)
        self._thread = threading.Thread(target=self._read, name="toxiproxy-container-log", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer = b""
        with contextlib.suppress(Exception):  # the stream ends with an error when closed or the container goes
            for chunk in self._stream:
                t = time.monotonic()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self._deliver(line.decode(errors="replace"), t)

    def _deliver(self, line: str, t: float) -> None:
        with self._lock:
            events = self._deriver.feed(line, t)
            subscribers = list(self._subscribers)
        for event in events:  # the address a connection came in on: the proxy's configured listen
            if event.type == "conn.accepted" and not event.fields.get("listen"):
                event.fields["listen"] = self._listen_of(str(event.fields.get("proxy", ""))) or ""
        for event in events:
            for callback in subscribers:
                with contextlib.suppress(Exception):  # a subscriber must not kill the reader
                    callback(event)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback`` for every later derived event (from the reader thread)."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def close(self) -> None:
        """Stop following the log."""
        with contextlib.suppress(Exception):
            self._stream.close()
        self._thread.join(timeout=5)
