"""A spawned real ``toxiproxy-server`` with connection events derived from its log.

:class:`ToxiproxyProcess` starts the binary with ``LOG_LEVEL=trace`` and ``-proxy-metrics``, stamps
every log line with ``time.monotonic()`` on a reader thread the moment it arrives, and turns the
lines into ``conn.*`` events on a second thread (:class:`~harness.toxiproxy.logstream.LogEventDeriver`),
so that the HTTP look-ups the deriver needs (a proxy's bound listen address, the byte counters of
``/metrics``) never delay the time stamps.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable

from harness.errors import MissingDependencyError, ProxyError
from harness.toxiproxy.client import ToxiproxyClient
from harness.toxiproxy.events import EventCallback
from harness.toxiproxy.logpipe import SETTLE_AGENT, LogEventPipe, sent_bytes
from harness.toxiproxy.logstream import LogEventDeriver
from harness.toxiproxy.models import ConnEvent

__all__ = ["SETTLE_AGENT", "ToxiproxyProcess", "sent_bytes"]


class ToxiproxyProcess:
    """A spawned real ``toxiproxy-server`` (``LOG_LEVEL=trace``) with log-derived connection events.

    ``node_of(proxy)`` and ``listen_of(proxy)`` label events from what the harness's own client
    knows (see :attr:`ToxiproxyClient.nodes` / :attr:`ToxiproxyClient.listens`); a listen address
    the client has not seen is asked from the API."""

    def __init__(self, binary: str, host: str, port: int,
                 node_of: Callable[[str], str | None] | None = None,
                 listen_of: Callable[[str], str | None] | None = None) -> None:
        self.binary = binary
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}"
        self._pipe = LogEventPipe(self.url, node_of, listen_of)
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self.returncode: int | None = None

    @property
    def _deriver(self) -> LogEventDeriver:
        return self._pipe.deriver

    @property
    def _tail(self) -> list[str]:
        return self._pipe.tail

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, timeout: float = 10.0, on_spawn: Callable[[int], None] | None = None) -> ToxiproxyProcess:
        """Spawn the server and wait until its API answers; raises ProxyError with its log tail.
        ``on_spawn(pid)`` is called as soon as the process exists (its owner records it)."""
        env = dict(os.environ, LOG_LEVEL="trace")
        try:
            self._proc = subprocess.Popen(
                [self.binary, "-host", self.host, "-port", str(self.port), "-proxy-metrics"], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                bufsize=1)
        except OSError as exc:
            raise MissingDependencyError(
                f"cannot run toxiproxy-server {self.binary!r}: {exc}; install it or unset "
                "TOXIPROXY_SERVER_BIN to use the embedded server") from exc
        if on_spawn is not None:
            try:
                on_spawn(self._proc.pid)
            except BaseException:
                self.stop()
                raise
        self._pipe.start()
        self._reader = threading.Thread(target=self._read, name="toxiproxy-log", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        with ToxiproxyClient(self.url, timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    break
                if client.is_available():
                    return self
                time.sleep(0.05)
        tail = "\n".join(self._tail[-20:])
        self.stop()
        raise ProxyError(f"toxiproxy-server {self.binary} did not answer on {self.url} within "
                         f"{timeout} s; its output:\n{tail}")

    def _read(self) -> None:
        """Stamp each line as it arrives (nothing slow here: the stamp is the event's time)."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        try:
            for line in proc.stdout:
                self._pipe.put(time.monotonic(), line)
        except (OSError, ValueError):  # the pipe was closed by stop()
            pass
        finally:
            self._pipe.end()

    def settle(self, timeout: float = 2.0) -> bool:
        """Return once every log line the server wrote before this call has been derived and
        published (True), or False after ``timeout`` (:meth:`LogEventPipe.settle`, OBS-1)."""
        if self._proc is None or threading.current_thread() is self._reader:
            return True  # stopped, or called from the reader
        return self._pipe.settle(timeout)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback`` for every later derived event (from the event thread)."""
        return self._pipe.subscribe(callback)

    def events(self, since: int = 0) -> list[ConnEvent]:
        """Derived events with ``seq >= since``."""
        return self._pipe.events(since)

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s) and join the threads."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.returncode = proc.returncode
        if self._reader is not None:
            self._reader.join(timeout=5)
            self._reader = None
        self._pipe.stop()
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
