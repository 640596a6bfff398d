"""Connection events from a real ``toxiproxy-server``, derived from its JSON log (an approximation).

Real Toxiproxy has no API for connection events. Run with ``LOG_LEVEL=trace`` it prints zerolog
JSON lines from which :class:`LogEventDeriver` builds the same ``conn.*`` events the embedded
server emits (docs/events.md), stamped with ``time.monotonic()`` when the line is *received*
(the log's own ``time`` has 1-second precision). What is lost is listed in docs/toxiproxy.md:
``bytes_up``/``bytes_down`` are null, ``by`` is inferred from which direction ended first
(a proxy disable shows up as client/upstream), ``node`` is null, and times lag by the pipe.

:class:`ToxiproxyProcess` spawns and stops the binary and feeds its output to a deriver.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.errors import MissingDependencyError, ProxyError
from harness.toxiproxy.client import ToxiproxyClient
from harness.toxiproxy.models import ConnEvent

_REMOVE_RE = re.compile(r"RemoveConnection (\S+?)(upstream|downstream) from Proxy (\S+)")

EventCallback = Callable[[ConnEvent], None]


class LogEventDeriver:
    """Turns toxiproxy-server log lines into ``conn.*`` events. Pure: no I/O, no threads."""

    def __init__(self, node_of: Callable[[str], str | None] | None = None) -> None:
        self._node_of = node_of or (lambda proxy: None)
        self._seq = 0
        self._conn_ids = 0
        self._open: dict[tuple[str, str], int] = {}  # (proxy, client) -> conn_id
        self._dialing: dict[str, list[tuple[str, int, str]]] = {}  # proxy -> [(client, id, upstream)]

    def _event(self, t: float, type_: str, **fields: Any) -> ConnEvent:
        event = ConnEvent(self._seq, t, type_, fields)
        self._seq += 1
        return event

    def feed(self, line: str, t: float | None = None) -> list[ConnEvent]:
        """Parse one log line received at monotonic time ``t`` (default: now); return new events."""
        t = time.monotonic() if t is None else t
        try:
            rec = json.loads(line)
        except ValueError:
            return []
        if not isinstance(rec, dict):
            return []
        msg = str(rec.get("message") or rec.get("msg") or "")
        proxy = str(rec.get("name") or rec.get("proxy_name") or "")
        out: list[ConnEvent] = []
        if msg == "Accepted client":
            client = str(rec.get("client", ""))
            upstream = str(rec.get("upstream", ""))
            self._conn_ids += 1
            cid = self._conn_ids
            self._open[(proxy, client)] = cid
            self._dialing.setdefault(proxy, []).append((client, cid, upstream))
            out.append(self._event(t, "conn.accepted", proxy=proxy, conn_id=cid, client=client,
                                   listen=str(rec.get("proxy", "")), upstream=upstream,
                                   node=self._node_of(proxy)))
        elif msg == "Unable to open connection to upstream":
            client = str(rec.get("client", ""))
            cid = self._open.pop((proxy, client), None)
            pending = self._dialing.get(proxy, [])
            pending[:] = [p for p in pending if p[1] != cid]
            if cid is not None:
                upstream = str(rec.get("upstream", ""))
                out.append(self._event(t, "conn.upstream_failed", proxy=proxy, conn_id=cid,
                                       upstream=upstream, error=str(rec.get("error", "dial failed"))))
                out.append(self._event(t, "conn.closed", proxy=proxy, conn_id=cid, by="upstream",
                                       reason="upstream connect failed", bytes_up=None,
                                       bytes_down=None))
        elif msg == "Setup connection" and rec.get("direction") == "upstream":
            pending = self._dialing.get(proxy, [])
            if pending:  # the real server dials inside its accept loop: first pending is this one
                client, cid, upstream = pending.pop(0)
                out.append(self._event(t, "conn.upstream_connected", proxy=proxy, conn_id=cid,
                                       upstream=upstream))
        else:
            m = _REMOVE_RE.search(msg)
            if m:
                client, direction, pname = m.group(1), m.group(2), m.group(3)
                cid = self._open.pop((pname, client), None)
                if cid is not None:
                    by = "client" if direction == "upstream" else "upstream"
                    out.append(self._event(t, "conn.closed", proxy=pname, conn_id=cid, by=by,
                                           reason=f"{by} side ended first (from server log)",
                                           bytes_up=None, bytes_down=None))
        return out


class ToxiproxyProcess:
    """A spawned real ``toxiproxy-server`` (``LOG_LEVEL=trace``) with log-derived connection events."""

    def __init__(self, binary: str, host: str, port: int,
                 node_of: Callable[[str], str | None] | None = None) -> None:
        self.binary = binary
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}"
        self._deriver = LogEventDeriver(node_of)
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._subscribers: list[EventCallback] = []
        self._events: list[ConnEvent] = []
        self._tail: list[str] = []
        self.returncode: int | None = None

    def start(self, timeout: float = 10.0) -> ToxiproxyProcess:
        """Spawn the server and wait until its API answers; raises ProxyError with its log tail."""
        env = dict(os.environ, LOG_LEVEL="trace")
        try:
            self._proc = subprocess.Popen(
                [self.binary, "-host", self.host, "-port", str(self.port)], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        except OSError as exc:
            raise MissingDependencyError(
                f"cannot run toxiproxy-server {self.binary!r}: {exc}; install it or unset "
                "TOXIPROXY_SERVER_BIN to use the embedded server") from exc
        self._thread = threading.Thread(target=self._read, name="toxiproxy-log", daemon=True)
        self._thread.start()
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
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            t = time.monotonic()
            self._tail.append(line.rstrip())
            del self._tail[:-200]
            with self._lock:
                events = self._deriver.feed(line, t)
                self._events.extend(events)
                subscribers = list(self._subscribers)
            for event in events:
                for callback in subscribers:
                    try:
                        callback(event)
                    except Exception:  # noqa: BLE001 - a subscriber must not kill the reader
                        pass

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback`` for every later derived event (from the log-reader thread)."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def events(self, since: int = 0) -> list[ConnEvent]:
        """Derived events with ``seq >= since``."""
        with self._lock:
            return [e for e in self._events if e.seq >= since]

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s) and join the log reader."""
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
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
