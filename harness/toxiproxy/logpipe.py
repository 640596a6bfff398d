"""Connection events from a real Toxiproxy's trace log, wherever the lines come from (a spawned
server's stdout, :mod:`harness.toxiproxy.spawned`; a container's log stream,
:mod:`harness.topology.compose_events`).

A reader stamps each line with ``time.monotonic()`` the moment it arrives and :meth:`LogEventPipe.put`
s it; a thread of this class derives ``conn.*`` events from the lines
(:class:`~harness.toxiproxy.logstream.LogEventDeriver`), so that the HTTP look-ups the deriver needs
(a proxy's bound listen address, the byte counters of ``/metrics``) never delay the stamps.
:meth:`LogEventPipe.settle` is the barrier every history snapshot waits for (OBS-1): the events trail
their lines by those look-ups.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable

import httpx

from harness.errors import ProxyError
from harness.toxiproxy.client import ToxiproxyClient
from harness.toxiproxy.events import EventCallback, EventLog
from harness.toxiproxy.logstream import LogEventDeriver
from harness.toxiproxy.models import ConnEvent

_SENT_RE = re.compile(r'^toxiproxy_proxy_sent_bytes_total\{([^}]*)\}\s+(\S+)', re.MULTILINE)
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: The ``User-Agent`` prefix of :meth:`LogEventPipe.settle`'s barrier requests.
SETTLE_AGENT = "failover-harness-settle"
#: The ``User-Agent`` prefix of :meth:`LogEventPipe.start_probe`'s lag probes.
PROBE_AGENT = "failover-harness-lag"
#: The ``source`` of the ``harness.stall`` events the lag probe publishes.
LAG_SOURCE = "fault-proxy log"


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


class LogEventPipe:
    """Log lines in (:meth:`put`, stamped by the reader), derived ``conn.*`` events out
    (:meth:`subscribe`, :meth:`events`) for the real Toxiproxy at ``url`` (OBS-1).

    ``node_of(proxy)`` and ``listen_of(proxy)`` label events from what the harness knows; a listen
    address it does not know is asked from the API."""

    def __init__(self, url: str, node_of: Callable[[str], str | None] | None = None,
                 listen_of: Callable[[str], str | None] | None = None) -> None:
        self.url = url
        self._listen_hint = listen_of or (lambda proxy: None)
        self._lookup: ToxiproxyClient | None = None
        self.deriver = LogEventDeriver(node_of, self._listen_of, self._counters)
        self._lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
        self._log = EventLog()
        self.tail: list[str] = []
        self._barriers: dict[str, threading.Event] = {}
        self._barrier_seq = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._probes: dict[str, float] = {}
        self._probe_stop = threading.Event()
        self._probe_thread: threading.Thread | None = None
        self._lag_threshold = 0.0

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

    # -- lines in, events out -------------------------------------------------------------------
    def start(self) -> LogEventPipe:
        """Start the deriving thread."""
        self._thread = threading.Thread(target=self._derive, name="toxiproxy-events", daemon=True)
        self._thread.start()
        return self

    def put(self, t: float, line: str) -> None:
        """One log line, stamped ``t`` (``time.monotonic()``) when it was received."""
        self._lines.put((t, line))

    def end(self) -> None:
        """No more lines: the deriving thread finishes what it has and stops."""
        self._lines.put(None)

    def on_thread(self) -> bool:
        """Whether the caller is the deriving thread (a subscriber)."""
        return threading.current_thread() is self._thread

    def _derive(self) -> None:
        while True:
            try:
                item = self._lines.get(timeout=0.02)
            except queue.Empty:  # no line: closes whose wait for their upstream side is over
                self._publish(self.deriver.flush(time.monotonic()))
                continue
            if item is None:
                self._publish(self.deriver.flush(grace=0))
                return
            t, line = item
            self.tail.append(line.rstrip())
            del self.tail[:-200]
            if SETTLE_AGENT in line:
                self._publish(self.deriver.flush(t, grace=0))  # everything logged before the barrier
                self._reached(line)
                continue
            if PROBE_AGENT in line:
                self._probed(line, t)
                continue
            try:
                events = self.deriver.feed(line, t)
            except Exception:  # noqa: BLE001 - an unexpected line must not stop the events
                continue
            self._publish(events)

    def _publish(self, events: list[ConnEvent]) -> None:
        for event in events:
            self._log.publish(event)

    def _reached(self, line: str) -> None:
        with contextlib.suppress(ValueError, AttributeError):
            agent = json.loads(line).get("user_agent", "")
            barrier = self._barriers.get(agent)
            if barrier is not None:
                barrier.set()

    def start_probe(self, interval: float = 0.05, threshold: float = 0.015) -> None:
        """Measure how late this log path stamps what the server does, every ``interval`` s: a
        ``GET /version`` with a unique ``User-Agent`` is sent at a known time, and its log line's
        stamp minus that time is the lag of the whole path (the server's scheduling, a container
        engine's log copier, this process's reader). A lag above ``threshold`` s is published to the
        subscribers as ``harness.stall`` (``seconds``, ``source="fault-proxy log"``), the same
        evidence :class:`harness.workload.mirroring.StallMonitor` records for this process: that
        the stamps of the fault proxy's events were late by that much then (OBS-1; the timing rules
        MIR-3/5/6/7/13 retry a try with such a stall, as with a machine stall)."""
        self._lag_threshold = threshold
        self._probe_thread = threading.Thread(target=self._probe, args=(interval,), name="toxiproxy-lag-probe",
                                              daemon=True)
        self._probe_thread.start()

    def _probe(self, interval: float) -> None:
        seq = itertools.count(1)
        with httpx.Client(timeout=1.0) as http:
            while not self._probe_stop.wait(interval):
                agent = f"{PROBE_AGENT}/{os.getpid()}-{next(seq)}"
                self._probes[agent] = time.monotonic()
                try:
                    http.get(f"{self.url}/version", headers={"User-Agent": agent})
                except httpx.HTTPError:
                    self._probes.pop(agent, None)
                # a snapshot: the deriving thread pops probes meanwhile (:meth:`_probed`); iterating the
                # dict itself raised "dictionary changed size during iteration" under load and ended
                # this thread, and with it every later harness.stall of this log path
                del_old = [a for a, sent in list(self._probes.items()) if time.monotonic() - sent > 10]
                for a in del_old:
                    self._probes.pop(a, None)

    def _probed(self, line: str, t: float) -> None:
        with contextlib.suppress(ValueError, AttributeError):
            sent = self._probes.pop(json.loads(line).get("user_agent", ""), None)
            if sent is not None and t - sent > self._lag_threshold:
                self._log.publish(ConnEvent(-1, sent, "harness.stall",
                                            {"seconds": round(t - sent, 6), "source": LAG_SOURCE}))

    def settle(self, timeout: float = 2.0) -> bool:
        """Return once every log line the server wrote before this call has been derived and
        published (True), or False after ``timeout``. The server logs each API request (debug
        level) after every line it wrote before it; so a ``GET /version`` with a unique
        ``User-Agent`` is a barrier in the one ordered log stream. Deriving a close asks ``/metrics``
        for byte counts, so events trail their lines by a request; without this a checker could
        judge a history that lacks a close the server had already logged (OBS-1)."""
        if self._thread is None or not self._thread.is_alive() or self.on_thread():
            return True  # not started, ended, or called from the event thread itself (a subscriber)
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
        """Call ``callback`` for every later derived event (from the deriving thread)."""
        return self._log.subscribe(callback)

    def events(self, since: int = 0) -> list[ConnEvent]:
        """Derived events with ``seq >= since``."""
        return self._log.events(since)[0]

    def stop(self, timeout: float = 5) -> None:
        """End the lines and the lag probe, join the deriving thread and close the look-up client."""
        self._probe_stop.set()
        if self._probe_thread is not None:
            self._probe_thread.join(timeout=timeout)
        self.end()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        if self._lookup is not None:
            self._lookup.close()
            self._lookup = None
