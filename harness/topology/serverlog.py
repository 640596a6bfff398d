"""The server's own view in the history (RULEBOOK ACR-2, ACR-4, ACR-7: what each member *received*):
a PostgreSQL server log written with ``log_statement=all``, ``log_connections`` /
``log_disconnections`` and the session-identifying :data:`LOG_LINE_PREFIX`, tailed by a thread and
parsed into ``server.stmt`` / ``server.session`` events on the history's monotonic clock.

The prefix carries the epoch time with milliseconds (``%n``), converted to ``time.monotonic()`` with
the offset of both clocks read once, when the tail starts (one clock for every event,
docs/events.md): however the log is cut into reads, a line's time is the same. Events are recorded in
the log's own order (their event index is the server's order); a line logged with an earlier time
than the line before it (backends write to one log) gets that line's time, so time never contradicts
the log order. Several lines of one millisecond share their time: checkers order them by index.
``settle()`` (registered as a history settler) reads the log up to its end, so a snapshot never lags
what the server logged."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: ``%n`` epoch.ms, ``%p`` pid, ``%c`` session id, ``%a`` application_name, ``%r`` remote host(port).
LOG_LINE_PREFIX = "%n [%p] acr|%c|%a|%r| "

#: The settings a server needs for this view (applied with ALTER SYSTEM + reload by the ACR group).
SETTINGS = {"log_statement": "all", "log_connections": "on", "log_disconnections": "on",
            "log_line_prefix": LOG_LINE_PREFIX, "log_min_messages": "warning"}

_LINE = re.compile(r"^(?P<epoch>\d+(?:\.\d+)?) \[(?P<pid>\d+)\] acr\|(?P<session>[^|]*)\|(?P<app>[^|]*)\|"
                   r"(?P<remote>[^|]*)\| (?P<level>[A-Z]+\d?):  (?P<msg>.*)$")
_STATEMENT = re.compile(r"^(?:statement|execute [^:]+): (?P<sql>.*)$", re.S)
_REMOTE = re.compile(r"^(?P<host>[^()]+)\((?P<port>\d+)\)$")


def parse_line(line: str) -> dict[str, Any] | None:
    """One prefixed log line as ``{epoch, pid, session, application, remote, level, message}``, or
    None for a line without the prefix (a continuation line, or a line written before the prefix
    was set)."""
    m = _LINE.match(line.rstrip("\n"))
    if m is None:
        return None
    return {"epoch": float(m["epoch"]), "pid": int(m["pid"]), "session": m["session"],
            "application": m["app"], "remote": m["remote"], "level": m["level"], "message": m["msg"]}


def to_event(rec: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The history event (type, fields) of one parsed record: ``server.stmt`` for a statement,
    ``server.session`` (``what`` = ``received`` / ``authorized`` / ``ended``) for a session's start and
    end; None for anything else (warnings, parameters)."""
    base = {"session": rec["session"], "pid": rec["pid"], "application": rec["application"]}
    remote = _REMOTE.match(rec["remote"] or "")
    if remote:
        base["remote"] = f"{remote['host']}:{remote['port']}"
    msg = rec["message"]
    if rec["level"] == "LOG":
        m = _STATEMENT.match(msg)
        if m:
            return "server.stmt", {**base, "sql": m["sql"].strip()}
        if msg.startswith("connection received"):
            return "server.session", {**base, "what": "received"}
        if msg.startswith("connection authorized"):
            app = re.search(r"application_name=(\S+)", msg)
            return "server.session", {**base, "what": "authorized",
                                      "application": app.group(1) if app else rec["application"]}
        if msg.startswith("disconnection"):
            return "server.session", {**base, "what": "ended"}
    return None


class StatementLog:
    """Tails one server log (from its current end) into ``record(type, t=..., **fields)``."""

    def __init__(self, path: Path, record: Callable[..., Any], node: str, poll: float = 0.02) -> None:
        self.path = path
        self._record = record
        self.node = node
        self._poll = poll
        self._pos = path.stat().st_size if path.exists() else 0
        self._partial = ""
        self._pending: tuple[dict[str, Any], list[str]] | None = None
        self._offset = time.time() - time.monotonic()
        self._last_t = float("-inf")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"serverlog-{node}", daemon=True)

    def start(self) -> StatementLog:
        """Start the tail thread."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            self.read()

    def read(self, flush: bool = False) -> None:
        """Read what the server logged since the last call and record it (``flush``: also the last
        statement, whose continuation lines cannot follow any more)."""
        with self._lock:
            try:
                with self.path.open("r", errors="replace") as fh:
                    fh.seek(self._pos)
                    data = fh.read()
                    self._pos = fh.tell()
            except FileNotFoundError:
                data = ""
            lines = (self._partial + data).split("\n")
            self._partial = lines.pop()
            for line in lines:
                rec = parse_line(line)
                if rec is None:
                    if self._pending is not None and line.startswith("\t"):
                        self._pending[1].append(line[1:])
                    continue
                self._emit()
                self._pending = (rec, [])
            if flush:
                self._emit()

    def _emit(self) -> None:
        if self._pending is None:
            return
        rec, more = self._pending
        self._pending = None
        if more:
            rec = {**rec, "message": "\n".join([rec["message"], *more])}
        event = to_event(rec)
        if event is not None:
            type_, fields = event
            self._last_t = max(rec["epoch"] - self._offset, self._last_t)
            self._record(type_, t=self._last_t, node=self.node, **fields)

    def settle(self) -> None:
        """Record everything logged so far (a history settler)."""
        self.read(flush=True)

    def stop(self) -> None:
        """Stop the thread after a last read."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
        self.read(flush=True)
