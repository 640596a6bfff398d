"""Connection events from a real ``toxiproxy-server``, derived from its JSON log (an approximation).

Real Toxiproxy has no API for connection events. Run with ``LOG_LEVEL=trace`` it prints zerolog
JSON lines from which :class:`LogEventDeriver` builds the same ``conn.*`` events the embedded
server emits (docs/events.md), stamped with ``time.monotonic()`` when the line is *received*
(the log's own ``time`` has 1-second precision). How each field is recovered, and what is lost, is
listed in docs/toxiproxy.md ("Events from a real server").

The deriver is pure (no I/O, no threads): what it needs from outside - the node annotation, the
bound listen address of a proxy and the server's byte counters - it asks through callbacks.
:class:`harness.toxiproxy.spawned.ToxiproxyProcess` runs the binary and wires those callbacks.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.toxiproxy.models import ConnEvent

_REMOVE_RE = re.compile(r"RemoveConnection (\S+?)(upstream|downstream) from Proxy (\S+)")
# "writeto tcp A->B: read tcp A->B: use of closed network connection": the read side of a link
# failed; B is the peer it was reading from (the client, or the upstream server).
_READ_ERROR_RE = re.compile(r"read tcp (\S+)->(\S+): (.*)$")

#: Seconds (receipt time) a close that may still learn its upstream side waits for that line: the
#: server's goroutine that reads the upstream may log its "Source terminated" after the other link's
#: "RemoveConnection" (both follow the proxy closing the sockets; nothing orders them).
UPSTREAM_GRACE = 0.1

#: ``counters(proxy)`` -> bytes the server has *delivered* so far per direction
#: (``{"upstream": n, "downstream": m}``, Toxiproxy's ``sent_bytes_total``), or None if unknown.
Counters = Callable[[str], dict[str, int] | None]


def _unbound(listen: str) -> bool:
    """True for a configured listen address that does not name the bound port (``127.0.0.1:0``)."""
    host, _, port = listen.rpartition(":")
    return not listen or port in ("", "0") or not host


@dataclass
class _Conn:
    """What the log has said so far about one proxied connection."""

    proxy: str
    client: str
    conn_id: int
    upstream: str
    ended_at: float | None = None  # receipt time of the first line that says it is ending
    first_removed: str | None = None  # link direction of the first RemoveConnection line
    removed: set[str] = field(default_factory=set)
    # side ("client" / "upstream") -> "closed" (the proxy closed that socket itself) or "reset"
    read_errors: dict[str, str] = field(default_factory=dict)


class LogEventDeriver:
    """Turns toxiproxy-server log lines into ``conn.*`` events. Pure: no I/O, no threads.

    ``conn.closed`` is emitted once both links of a connection are removed (the server logs one
    ``RemoveConnection`` per direction), stamped with the receipt time of the first line that
    showed the connection ending. ``by`` comes from the links' read errors: a side whose read
    failed with "use of closed network connection" was closed by the proxy, so the *other* side
    ended first; a reset names that side; both closed by the proxy -> ``proxy``."""

    def __init__(self, node_of: Callable[[str], str | None] | None = None,
                 listen_of: Callable[[str], str | None] | None = None,
                 counters: Counters | None = None) -> None:
        self._node_of = node_of or (lambda proxy: None)
        self._listen_of = listen_of or (lambda proxy: None)
        self._counters = counters
        self._seq = 0
        self._conn_ids = 0
        self._open: dict[tuple[str, str], _Conn] = {}  # (proxy, client) -> connection
        self._dialing: dict[str, list[_Conn]] = {}  # proxy -> connections waiting for their dial
        self._stray: dict[str, list[str]] = {}  # proxy -> upstream-side read errors not yet placed
        self._seen: dict[str, dict[str, int]] = {}  # proxy -> counters at the last close
        self._ended_since: dict[str, set[int]] = {}  # proxy -> conn ids with a removed link since
        self._mixed: set[int] = set()  # conn ids whose bytes were partly counted in another's change
        self._closing: list[tuple[float, _Conn]] = []  # (completed at, conn): waiting for its upstream side

    def _event(self, t: float, type_: str, **fields: Any) -> ConnEvent:
        event = ConnEvent(self._seq, t, type_, fields)
        self._seq += 1
        return event

    def _listen(self, proxy: str, configured: str) -> str:
        """The bound listen address: the log holds the configured one (``127.0.0.1:0``)."""
        if not _unbound(configured):
            return configured
        return self._listen_of(proxy) or configured

    def feed(self, line: str, t: float | None = None) -> list[ConnEvent]:
        """Parse one log line received at monotonic time ``t`` (default: now); return new events
        (first the closes whose wait for their upstream side is over, :meth:`flush`)."""
        t = time.monotonic() if t is None else t
        return self.flush(t) + self._feed(line, t)

    def flush(self, now: float | None = None, grace: float = UPSTREAM_GRACE) -> list[ConnEvent]:
        """The ``conn.closed`` of the connections whose links were both removed with only the client
        side known to be closed by the proxy, once ``grace`` s (receipt time) passed without the
        upstream side's read error (then the upstream ended first: ``by=upstream``); ``grace=0``:
        all of them now (a settle barrier, the end of the log)."""
        now = time.monotonic() if now is None else now
        ready = [c for at, c in self._closing if at + grace <= now]
        if not ready:
            return []
        self._closing = [(at, c) for at, c in self._closing if at + grace > now]
        return [self._close_event(c) for c in ready]

    def _feed(self, line: str, t: float) -> list[ConnEvent]:
        try:
            rec = json.loads(line)
        except ValueError:
            return []
        if not isinstance(rec, dict):
            return []
        msg = str(rec.get("message") or rec.get("msg") or "")
        proxy = str(rec.get("name") or rec.get("proxy_name") or "")
        if msg == "Accepted client":
            return self._accepted(rec, proxy, t)
        if msg == "Unable to open connection to upstream":
            return self._dial_failed(rec, proxy, t)
        if msg == "Setup connection" and rec.get("direction") == "upstream":
            pending = self._dialing.get(proxy, [])
            if pending:  # the real server dials inside its accept loop: first pending is this one
                conn = pending.pop(0)
                return [self._event(t, "conn.upstream_connected", proxy=proxy, conn_id=conn.conn_id,
                                    upstream=conn.upstream)]
            return []
        if msg == "Source terminated":
            return self._read_error(rec, proxy, t)
        m = _REMOVE_RE.search(msg)
        if m:
            return self._removed(m.group(3), m.group(1), m.group(2), t)
        return []

    def _accepted(self, rec: dict[str, Any], proxy: str, t: float) -> list[ConnEvent]:
        client = str(rec.get("client", ""))
        upstream = str(rec.get("upstream", ""))
        self._conn_ids += 1
        conn = _Conn(proxy, client, self._conn_ids, upstream)
        self._open[(proxy, client)] = conn
        self._dialing.setdefault(proxy, []).append(conn)
        return [self._event(t, "conn.accepted", proxy=proxy, conn_id=conn.conn_id, client=client,
                            listen=self._listen(proxy, str(rec.get("listen") or rec.get("proxy") or "")),
                            upstream=upstream, node=self._node_of(proxy))]

    def _dial_failed(self, rec: dict[str, Any], proxy: str, t: float) -> list[ConnEvent]:
        conn = self._open.pop((proxy, str(rec.get("client", ""))), None)
        if conn is None:
            return []
        pending = self._dialing.get(proxy, [])
        pending[:] = [c for c in pending if c is not conn]
        return [self._event(t, "conn.upstream_failed", proxy=proxy, conn_id=conn.conn_id,
                            upstream=str(rec.get("upstream", conn.upstream)),
                            error=str(rec.get("error", "dial failed"))),
                self._event(t, "conn.closed", proxy=proxy, conn_id=conn.conn_id, by="upstream",
                            reason="upstream connect failed", bytes_up=0, bytes_down=0)]

    def _read_error(self, rec: dict[str, Any], proxy: str, t: float) -> list[ConnEvent]:
        m = _READ_ERROR_RE.search(str(rec.get("error", "")))
        if not m:
            return []
        peer, detail = m.group(2), m.group(3)
        kind = "closed" if "use of closed network connection" in detail else "reset"
        conn = self._open.get((proxy, peer))
        if conn is not None:  # the link reading from the client
            self._note_error(conn, "client", kind, t)
            return []
        # the link reading from the upstream: the log does not say which connection's - a close of
        # this proxy still waiting for its upstream side first (the line came after both removals)
        waiting = next((c for _, c in self._closing if c.proxy == proxy), None)
        if waiting is not None:
            waiting.read_errors["upstream"] = kind
            self._closing = [(at, c) for at, c in self._closing if c is not waiting]
            return [self._close_event(waiting)]
        candidates = [c for c in self._open.values() if c.proxy == proxy and "upstream" not in c.read_errors]
        ending = [c for c in candidates if c.ended_at is not None]
        if len(candidates) == 1 or len(ending) == 1:
            self._note_error((ending or candidates)[0], "upstream", kind, t)
        else:  # placed on the next connection of this proxy that starts ending
            self._stray.setdefault(proxy, []).append(kind)
        return []

    def _note_error(self, conn: _Conn, side: str, kind: str, t: float) -> None:
        conn.read_errors.setdefault(side, kind)
        if conn.ended_at is None:
            conn.ended_at = t

    def _removed(self, proxy: str, client: str, direction: str, t: float) -> list[ConnEvent]:
        conn = self._open.get((proxy, client))
        if conn is None:
            return []
        if conn.ended_at is None:
            conn.ended_at = t
        if conn.first_removed is None:
            conn.first_removed = direction
            stray = self._stray.get(proxy)
            if stray and "upstream" not in conn.read_errors:
                conn.read_errors["upstream"] = stray.pop(0)
        conn.removed.add(direction)
        self._ended_since.setdefault(proxy, set()).add(conn.conn_id)
        if len(conn.removed) < 2:
            return []
        del self._open[(proxy, client)]
        if conn.read_errors.get("client") == "closed" and "upstream" not in conn.read_errors:
            # the proxy closed the client side: after the upstream ended (no upstream line will
            # come) or closing both sides (a toxic, a disable: its upstream line may still come)
            self._closing.append((t, conn))
            return []
        return [self._close_event(conn)]

    def _close_event(self, conn: _Conn) -> ConnEvent:
        """The ``conn.closed`` of a connection whose both links were removed."""
        by, reason = self._closed_by(conn)
        up, down = self._bytes(conn)
        assert conn.ended_at is not None
        return self._event(conn.ended_at, "conn.closed", proxy=conn.proxy, conn_id=conn.conn_id, by=by,
                           reason=f"{reason} (from server log)", bytes_up=up, bytes_down=down)

    @staticmethod
    def _closed_by(conn: _Conn) -> tuple[str, str]:
        errors = conn.read_errors
        resets = [side for side, kind in errors.items() if kind == "reset"]
        if resets:
            return resets[0], f"{resets[0]} reset the connection"
        client, upstream = errors.get("client"), errors.get("upstream")
        if client == "closed" and upstream == "closed":
            return "proxy", "the proxy closed both sides (disable, delete or a toxic)"
        if upstream == "closed":
            return "client", "client closed"
        if client == "closed":
            return "upstream", "upstream closed"
        by = "client" if conn.first_removed == "upstream" else "upstream"
        return by, f"{by} side ended first"

    def _bytes(self, conn: _Conn) -> tuple[int | None, int | None]:
        """Bytes delivered per direction, from the server's counters: the change since the last
        connection of this proxy closed, when no other connection of it ended in between."""
        if self._counters is None:
            return None, None
        ended = self._ended_since.pop(conn.proxy, set())
        others = ended - {conn.conn_id}
        if others:  # their links' bytes are in this change too: theirs and this one are unknown
            self._mixed |= others
            self._ended_since[conn.proxy] = others
        mixed = bool(others) or conn.conn_id in self._mixed
        self._mixed.discard(conn.conn_id)
        now = self._counters(conn.proxy)
        if now is None:
            return None, None
        before = self._seen.get(conn.proxy, {})
        self._seen[conn.proxy] = now
        up = now.get("upstream", 0) - before.get("upstream", 0)
        down = now.get("downstream", 0) - before.get("downstream", 0)
        if mixed or up < 0 or down < 0:
            return None, None
        return up, down
