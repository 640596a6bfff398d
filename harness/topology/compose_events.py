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
    """Derived connection events of a container's log from the moment of :meth:`subscribe` on: each
    subscriber gets its own follower thread (the shape :class:`harness.toxiproxy.select.FaultProxyHandle`
    takes); the proxy's configured listen address fills in ``listen`` where the log has none."""

    def __init__(self, container: Any, node_of: Callable[[str], str | None],
                 listen_of: Callable[[str], str | None] | None = None) -> None:
        self._container = container
        self._node_of = node_of
        self._listen_of = listen_of or (lambda proxy: None)
        self._followers: list[_Follower] = []

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback`` for every later derived event (from a reader thread); returns the
        function that stops it."""
        follower = _Follower(self._container, LogEventDeriver(self._node_of), self._listen_of, callback)
        self._followers.append(follower)
        return follower.close

    def close(self) -> None:
        """Stop every follower."""
        for follower in self._followers:
            follower.close()


class _Follower:
    def __init__(self, container: Any, deriver: LogEventDeriver, listen_of: Callable[[str], str | None],
                 callback: EventCallback) -> None:
        self._deriver, self._listen_of, self._callback = deriver, listen_of, callback
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
                    for event in self._deriver.feed(line.decode(errors="replace"), t):
                        if event.type == "conn.accepted" and not event.fields.get("listen"):
                            event.fields["listen"] = self._listen_of(str(event.fields.get("proxy", ""))) or ""
                        with contextlib.suppress(Exception):  # a subscriber must not kill the reader
                            self._callback(event)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()
        self._thread.join(timeout=5)
