"""Connection events derived from a real toxiproxy-server's log (``LogEventDeriver``): the lines
are the ones real 2.12 prints (LOG_LEVEL=trace), fed in the orders it prints them."""

from __future__ import annotations

import json

from harness.toxiproxy.logstream import UPSTREAM_GRACE, LogEventDeriver
from harness.toxiproxy.spawned import sent_bytes

COMMON = {"name": "pg", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:6000"}
PROXY_SIDE = "127.0.0.1:5000"  # the proxy's bound listen address
UPSTREAM_SIDE = "127.0.0.1:47000"  # the proxy's own end of its upstream connection


def line(msg: str, **fields: object) -> str:
    return json.dumps({"level": "info", "time": "2026-12-01T01:00:00Z", "message": msg, **COMMON, **fields})


def read_error(client: str, side: str, detail: str = "use of closed network connection", nbytes: int = 0) -> str:
    """The warning a link prints when its read fails (side: which peer it was reading from)."""
    local, peer = (PROXY_SIDE, client) if side == "client" else (UPSTREAM_SIDE, COMMON["upstream"])
    return line("Source terminated", bytes=nbytes,
                error=f"writeto tcp {local}->{peer}: read tcp {local}->{peer}: {detail}")


def removed(client: str, direction: str) -> str:
    return line(f"RemoveConnection {client}{direction} from Proxy pg")


def open_conn(d: LogEventDeriver, client: str, t: float) -> list:
    return (d.feed(line("Accepted client", client=client), t)
            + d.feed(line("Setup connection", direction="upstream"), t)
            + d.feed(line("Setup connection", direction="downstream"), t))


class Counters:
    """Stand-in for the server's sent_bytes_total per direction (what /metrics reports)."""

    def __init__(self) -> None:
        self.up = self.down = 0

    def __call__(self, proxy: str) -> dict[str, int]:
        return {"upstream": self.up, "downstream": self.down}


def test_listen_is_the_bound_address_and_node_is_labelled() -> None:
    d = LogEventDeriver(node_of=lambda p: "n1" if p == "pg" else None, listen_of={"pg": PROXY_SIDE}.get)
    ev = open_conn(d, "127.0.0.1:40000", 1.0)
    assert [e.type for e in ev] == ["conn.accepted", "conn.upstream_connected"]
    assert ev[0].fields == {"proxy": "pg", "conn_id": 1, "client": "127.0.0.1:40000", "listen": PROXY_SIDE,
                            "upstream": "127.0.0.1:6000", "node": "n1"}
    assert LogEventDeriver().feed(line("Accepted client", client="c:1", listen="10.0.0.1:7"), 1)[0].fields[
        "listen"] == "10.0.0.1:7"  # a configured address with a real port is kept


def test_who_closed_follows_the_read_errors() -> None:
    counters = Counters()
    d = LogEventDeriver(counters=counters)
    cases = [  # (lines after the accept, by) - orders as real 2.12 prints them
        ([read_error("c", "upstream"), removed("c", "upstream"), removed("c", "downstream")], "client"),
        ([read_error("c", "client", nbytes=2), removed("c", "upstream"), removed("c", "downstream")], "upstream"),
        ([read_error("c", "upstream", "read: connection reset by peer"), read_error("c", "client"),
          removed("c", "downstream"), removed("c", "upstream")], "upstream"),
        ([read_error("c", "client", "read: connection reset by peer"), read_error("c", "upstream"),
          removed("c", "downstream"), removed("c", "upstream")], "client"),
        ([read_error("c", "upstream"), read_error("c", "client"), removed("c", "upstream"),
          removed("c", "downstream")], "proxy"),
        ([removed("c", "downstream"), removed("c", "upstream")], "upstream"),  # no read error: first link
    ]
    for i, (lines, by) in enumerate(cases):
        t0 = 10.0 * i
        open_conn(d, "c", t0)
        counters.up += 2
        counters.down += i
        out = []
        for k, text in enumerate(lines):
            out += d.feed(text, t0 + 1 + k)
        out += d.flush(t0 + 1 + len(lines) + UPSTREAM_GRACE)  # no upstream line came within the grace
        assert [e.type for e in out] == ["conn.closed"], (i, out)
        closed = out[0]
        assert closed.fields["by"] == by, (i, closed)
        assert closed.t == t0 + 1  # the first line that showed it ending
        assert "(from server log)" in closed.fields["reason"]
        assert (closed.fields["bytes_up"], closed.fields["bytes_down"]) == (2, i)


def test_bytes_unknown_when_connections_of_a_proxy_end_together() -> None:
    counters = Counters()
    d = LogEventDeriver(counters=counters)
    open_conn(d, "a", 1.0)
    open_conn(d, "b", 1.0)
    d.feed(removed("a", "upstream"), 2.0)
    d.feed(removed("b", "upstream"), 2.0)  # b's link ended too: its bytes are in the same counters
    counters.up, counters.down = 3, 4
    a = d.feed(removed("a", "downstream"), 2.1)
    counters.down = 9
    b = d.feed(removed("b", "downstream"), 2.2)
    assert (a[0].fields["bytes_up"], a[0].fields["bytes_down"]) == (None, None)
    assert (b[0].fields["bytes_up"], b[0].fields["bytes_down"]) == (None, None)
    open_conn(d, "c", 3.0)
    counters.up, counters.down = 10, 19
    d.feed(removed("c", "upstream"), 4.0)
    c = d.feed(removed("c", "downstream"), 4.0)
    assert (c[0].fields["bytes_up"], c[0].fields["bytes_down"]) == (7, 10)  # alone again: exact


def test_upstream_read_error_is_placed_on_the_connection_that_ends() -> None:
    d = LogEventDeriver()
    open_conn(d, "a", 1.0)
    open_conn(d, "b", 1.0)
    assert d.feed(read_error("a", "upstream"), 2.0) == []  # two candidates: held back
    d.feed(removed("b", "upstream"), 2.0)  # b's client side ended: the error was b's
    out = d.feed(removed("b", "downstream"), 2.0)
    assert out[0].fields["conn_id"] == 2 and out[0].fields["by"] == "client"


def test_dial_failure_and_garbage() -> None:
    d = LogEventDeriver()
    assert d.feed("not json", 1.0) == [] and d.feed("[1, 2]", 1.0) == []
    assert d.feed(removed("nobody", "upstream"), 1.0) == []
    d.feed(line("Accepted client", client="x"), 1.0)
    out = d.feed(line("Unable to open connection to upstream", client="x",
                      error="dial tcp 127.0.0.1:6000: connect: connection refused"), 1.1)
    assert [(e.type, e.t) for e in out] == [("conn.upstream_failed", 1.1), ("conn.closed", 1.1)]
    assert out[0].fields["error"].endswith("connection refused")
    assert out[1].fields | {"reason": ""} == {"proxy": "pg", "conn_id": 1, "by": "upstream", "reason": "",
                                             "bytes_up": 0, "bytes_down": 0}
    assert [e.seq for e in out] == [1, 2]


def test_sent_bytes_from_prometheus_text() -> None:
    text = "\n".join([
        "# HELP toxiproxy_proxy_sent_bytes_total ...",
        'toxiproxy_proxy_sent_bytes_total{direction="downstream",listener="127.0.0.1:1",proxy="pg",'
        'upstream="127.0.0.1:2"} 8',
        'toxiproxy_proxy_sent_bytes_total{direction="downstream",listener="127.0.0.1:1",proxy="pg",'
        'upstream="127.0.0.1:3"} 1.2e+06',
        'toxiproxy_proxy_sent_bytes_total{direction="upstream",listener="127.0.0.1:1",proxy="pg",'
        'upstream="127.0.0.1:2"} 2',
        'toxiproxy_proxy_sent_bytes_total{direction="upstream",listener="x",proxy="other",upstream="y"} 5',
        'toxiproxy_proxy_received_bytes_total{direction="upstream",listener="x",proxy="pg",upstream="y"} 99'])
    assert sent_bytes(text, "pg") == {"downstream": 1_200_008, "upstream": 2}
    assert sent_bytes(text, "none") == {}


def test_upstream_side_logged_after_both_removals_still_decides_who_closed() -> None:
    """A timeout toxic or a disable closes both sides; the goroutine reading the upstream may log
    its read error after the other link's removal. The close waits up to UPSTREAM_GRACE for it:
    ``proxy`` when it comes, ``upstream`` (the server ended first) when it does not; the late line
    is not left over for the next connection of the proxy."""
    d = LogEventDeriver()
    open_conn(d, "c", 1.0)
    assert d.feed(read_error("c", "client"), 2.0) == []
    assert d.feed(removed("c", "downstream"), 2.0) == []
    assert d.feed(removed("c", "upstream"), 2.001) == []  # both links gone, the upstream side unknown
    out = d.feed(read_error("c", "upstream"), 2.01)
    assert [(e.type, e.fields["by"], e.t) for e in out] == [("conn.closed", "proxy", 2.0)]

    open_conn(d, "e", 3.0)  # the next connection is not charged with a stray upstream error
    d.feed(read_error("e", "client"), 4.0)
    d.feed(removed("e", "downstream"), 4.0)
    assert d.feed(removed("e", "upstream"), 4.0) == []
    assert d.flush(4.0 + UPSTREAM_GRACE / 2) == []  # still within the grace
    out = d.feed(line("Accepted client", client="f"), 4.0 + UPSTREAM_GRACE)  # any later line ends the wait
    assert [(e.type, e.fields.get("by"), e.t) for e in out][:1] == [("conn.closed", "upstream", 4.0)]
    assert [e.type for e in out] == ["conn.closed", "conn.accepted"]
    assert [e.seq for e in out] == sorted(e.seq for e in out)
    open_conn(d, "g", 5.0)
    d.feed(read_error("g", "client"), 6.0)
    d.feed(removed("g", "downstream"), 6.0)
    d.feed(removed("g", "upstream"), 6.0)
    assert [e.fields["by"] for e in d.flush(grace=0)] == ["upstream"]  # a barrier: at once
