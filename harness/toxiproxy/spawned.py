"""A spawned real ``toxiproxy-server`` with connection events derived from its log.

:class:`ToxiproxyProcess` starts the binary with ``LOG_LEVEL=trace`` and ``-proxy-metrics``, stamps
every log line with ``time.monotonic()`` on a reader thread the moment it arrives, and turns the
lines into ``conn.*`` events on a second thread (:class:`~harness.toxiproxy.logstream.LogEventDeriver`),
so that the HTTP look-ups the deriver needs (a proxy's bound listen address, the byte counters of
``/metrics``) never delay the time stamps.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable

import httpx

from harness.errors import MissingDependencyError, ProxyError
from harness.toxiproxy.client import ToxiproxyClient
from harness.toxiproxy.events import EventCallback, EventLog
from harness.toxiproxy.logstream import LogEventDeriver
from harness.toxiproxy.models import ConnEvent

_SENT_RE = re.compile(r'^toxiproxy_proxy_sent_bytes_total\{([^}]*)\}\s+(\S+)', re.MULTILINE)
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: The ``User-Agent`` prefix of :meth:`ToxiproxyProcess.settle`'s barrier requests.
SETTLE_AGENT = "failover-harness-settle"


def sent_bytes(metrics: str, proxy: str) -> dict[str, int]:
    """Bytes delivered per direction by ``proxy``, summed over its series, from Prometheus text."""
    out: dict[str, int] = {}
    for m in _SENT_RE.finditer(metrics):
        labels = dict(_LABEL_RE.findall(m.group(1)))
        if labels.get("proxy") != proxy:
            continue
        direction = labels.get("direction", "")
        try:
            out[direction] = out.get(direction, 0) + int(float(m.group(2)))
        except ValueError:
            continue
    return out


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
        self._listen_hint = listen_of or (lambda proxy: None)
        self._lookup: ToxiproxyClient | None = None
        self._deriver = LogEventDeriver(node_of, self._listen_of, self._counters)
        self._proc: subprocess.Popen[str] | None = None
        self._threads: list[threading.Thread] = []
        self._lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
        self._log = EventLog()
        self._tail: list[str] = []
        self._barriers: dict[str, threading.Event] = {}
        self._barrier_seq = itertools.count(1)
        self.returncode: int | None = None

    # -- what the deriver asks ------------------------------------------------------------------
    def _client(self) -> ToxiproxyClient:
        if self._lookup is None:
            self._lookup = ToxiproxyClient(self.url, timeout=2.0)
        return self._lookup

    def _listen_of(self, proxy: str) -> str | None:
        hint = self._listen_hint(proxy)
        if hint:
            return hint
        try:
            return self._client().get_proxy(proxy).listen
        except ProxyError:
            return None

    def _counters(self, proxy: str) -> dict[str, int] | None:
        try:
            text = self._client().metrics()
        except ProxyError:
            return None
        return sent_bytes(text, proxy)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> ToxiproxyProcess:
        """Spawn the server and wait until its API answers; raises ProxyError with its log tail."""
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
        self._threads = [threading.Thread(target=self._read, name="toxiproxy-log", daemon=True),
                         threading.Thread(target=self._derive, name="toxiproxy-events", daemon=True)]
        for thread in self._threads:
            thread.start()
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
                self._lines.put((time.monotonic(), line))
        except (OSError, ValueError):  # the pipe was closed by stop()
            pass
        finally:
            self._lines.put(None)

    def _derive(self) -> None:
        while True:
            item = self._lines.get()
            if item is None:
                return
            t, line = item
            self._tail.append(line.rstrip())
            del self._tail[:-200]
            if SETTLE_AGENT in line:
                self._reached(line)
                continue
            try:
                events = self._deriver.feed(line, t)
            except Exception:  # noqa: BLE001 - an unexpected line must not stop the events
                continue
            for event in events:
                self._log.publish(event)

    def _reached(self, line: str) -> None:
        with contextlib.suppress(ValueError, AttributeError):
            agent = json.loads(line).get("user_agent", "")
            barrier = self._barriers.get(agent)
            if barrier is not None:
                barrier.set()

    def settle(self, timeout: float = 2.0) -> bool:
        """Return once every log line the server wrote before this call has been derived and
        published (True), or False after ``timeout``. The server logs each API request (debug
        level) after every line it wrote before it; so a ``GET /version`` with a unique
        ``User-Agent`` is a barrier in the one ordered log pipe. Deriving a close asks ``/metrics``
        for byte counts, so events trail their lines by a request; without this a checker could
        judge a history that lacks a close the server had already logged (OBS-1)."""
        if self._proc is None or threading.current_thread() in self._threads:
            return True  # stopped, or called from the event thread itself (a subscriber)
        agent = f"{SETTLE_AGENT}/{os.getpid()}-{next(self._barrier_seq)}"
        barrier = self._barriers[agent] = threading.Event()
        try:
            try:
                httpx.get(f"{self.url}/version", headers={"User-Agent": agent}, timeout=timeout)
            except httpx.HTTPError:
                return False
            return barrier.wait(timeout)
        finally:
            self._barriers.pop(agent, None)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback`` for every later derived event (from the event thread)."""
        return self._log.subscribe(callback)

    def events(self, since: int = 0) -> list[ConnEvent]:
        """Derived events with ``seq >= since``."""
        return self._log.events(since)[0]

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
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        if self._lookup is not None:
            self._lookup.close()
            self._lookup = None
