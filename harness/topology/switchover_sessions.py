"""Admin connections opened ahead of a planned switchover and used by it (the switchover stall,
docs/persistent-proxy.md):
``prepare_switchover`` logs in to the principal (its CHECKPOINT) and, with a hot-standby mirror,
to the node about to be promoted, while the clients still run; the switchover's own checks - the
old principal's streaming pre-check (DUR-1), the new principal's out-of-recovery wait and its
checkpoint - then run on those sessions instead of logging in again while the clients wait (a
login took 10-30 ms under load). A session opened on a standby during recovery stays open across
the promotion.

A connection is used only by the server process it was opened to (same node name *and* PID) and
only for :data:`MAX_AGE` seconds; everything not taken is closed at the end of the switchover or
by :meth:`HeldAdmin.close_all`."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

#: Seconds a held connection stays usable: a switchover follows its preparation at once.
MAX_AGE = 30.0


class HeldAdmin:
    """Admin connections by node name, each tagged with the PID of the server it was opened to."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, float, Any]] = {}
        self._lock = threading.Lock()

    def put(self, node: str, pid: int, conn: Any) -> None:
        """Keep ``conn`` (an open admin connection to ``node``'s server ``pid``) for the coming switchover;
        one it replaces is closed."""
        with self._lock:
            old = self._held.pop(node, None)
            self._held[node] = (pid, time.monotonic(), conn)
        if old is not None:
            _close(old[2])

    def peek(self, node: str, pid: int | None) -> Any | None:
        """The held connection to ``node`` if it was opened to server ``pid`` less than :data:`MAX_AGE`
        seconds ago and is not closed; else None (and a stale one is closed)."""
        with self._lock:
            entry = self._held.get(node)
            if entry is None:
                return None
            held_pid, since, conn = entry
            fresh = time.monotonic() - since < MAX_AGE
            usable = held_pid == (pid or 0) and fresh and not getattr(conn, "closed", False)
            if not usable:
                del self._held[node]
        if not usable:
            _close(conn)
            return None
        return conn

    def drop(self, node: str) -> None:
        """Close and forget the connection held to ``node`` (before its server stops)."""
        with self._lock:
            entry = self._held.pop(node, None)
        if entry is not None:
            _close(entry[2])

    def close_all(self) -> None:
        """Close every held connection."""
        with self._lock:
            entries, self._held = list(self._held.values()), {}
        for _, _, conn in entries:
            _close(conn)


def _close(conn: Any) -> None:
    with contextlib.suppress(Exception):  # noqa: BLE001 - a connection its server already closed
        conn.close()
