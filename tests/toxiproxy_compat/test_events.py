"""Connection events (docs/events.md, docs/toxiproxy.md): the embedded server's extension, and the
same events derived from a spawned real server's log and /metrics (``kind == "spawned"``)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from tcp_servers import connect, recv_exactly, round_trip, sender_handler, wait_until

EXTENSION = "connection events over HTTP and the node annotation are extensions of the embedded server"


@pytest.fixture(autouse=True)
def _needs_events(toxi) -> None:
    if not toxi.handle.events_supported:
        pytest.skip("an external server (TOXIPROXY_URL) has no connection events")

FIELDS = {
    "conn.accepted": {"proxy", "conn_id", "client", "listen", "upstream", "node"},
    "conn.upstream_connected": {"proxy", "conn_id", "upstream"},
    "conn.upstream_failed": {"proxy", "conn_id", "upstream", "error"},
    "conn.closed": {"proxy", "conn_id", "by", "reason", "bytes_up", "bytes_down"},
}
#: The embedded server also names the upstream connection's own address (the peer its upstream sees).
EMBEDDED_FIELDS = {"conn.upstream_connected": {"local"}}


class Collector:
    def __init__(self) -> None:
        self.events: list = []
        self.threads: set[str] = set()

    def __call__(self, event) -> None:
        self.events.append(event)
        self.threads.add(threading.current_thread().name)

    def of(self, type_: str) -> list:
        return [e for e in self.events if e.type == type_]


def test_lifecycle_fields_order_and_times(toxi, echo) -> None:
    got = Collector()
    unsubscribe = toxi.handle.subscribe(got)
    p = toxi.proxy(echo.address, node="pg-1")
    before = time.monotonic()
    with connect(p.listen_port) as s:
        client = "{}:{}".format(*s.getsockname())
        s.sendall(b"12345")
        recv_exactly(s, 5)
    assert wait_until(lambda: len(got.of("conn.closed")) == 1)
    after = time.monotonic()
    unsubscribe()
    types = [e.type for e in got.events]
    assert types == ["conn.accepted", "conn.upstream_connected", "conn.closed"]
    embedded = toxi.handle.kind == "embedded"
    for e in got.events:
        assert set(e.fields) == FIELDS[e.type] | (EMBEDDED_FIELDS.get(e.type, set()) if embedded else set()), e
        assert e.fields["proxy"] == p.name and e.fields["conn_id"] == got.events[0].fields["conn_id"]
        assert before <= e.t <= after
    accepted, _, closed = got.events
    assert accepted.fields["client"] == client and accepted.fields["node"] == "pg-1"
    assert accepted.fields["listen"] == p.listen and accepted.fields["upstream"] == echo.address
    assert closed.fields["by"] == "client"
    if embedded:  # the echo server's peer is this address
        host, _, port = got.events[1].fields["local"].rpartition(":")
        assert host == "127.0.0.1" and int(port) > 0
    assert closed.fields["bytes_up"] == 5 and closed.fields["bytes_down"] == 5
    assert [e.seq for e in got.events] == sorted(e.seq for e in got.events)
    assert got.events[0].t <= got.events[1].t <= got.events[2].t
    prefix = "embedded-toxiproxy" if toxi.kind == "embedded" else "toxiproxy-events"
    assert all(name.startswith(prefix) for name in got.threads)


def _closed_of(toxi, got: Collector, proxy: str, timeout: float = 15.0) -> dict:
    """The one ``conn.closed`` of ``proxy``, waited for on the event path itself: every look first
    settles it (a spawned real server's events trail its log by the deriving thread and its
    ``/metrics`` look-ups; ``settle()`` returns once every line the server wrote before it is
    published), so a slow path under load is waited for, not raced."""
    def seen() -> list:
        toxi.handle.settle(5.0)
        return [e for e in got.of("conn.closed") if e.fields["proxy"] == proxy]

    assert wait_until(lambda: bool(seen()), timeout=timeout), f"no conn.closed of {proxy}: {got.events}"
    found = seen()
    assert len(found) == 1, found
    return found[0].fields


def test_close_by_upstream_proxy_and_toxic(toxi, echo, make_server) -> None:
    """Who closed: the server (``upstream``), a disable (``proxy``), a timeout toxic (``toxic`` on
    the embedded server; a spawned real server's log shows the proxy closing both sides: ``proxy``),
    with the bytes delivered each way. Each close is awaited where the client sees it (EOF), then on
    the event path (:func:`_closed_of`)."""
    got = Collector()
    toxi.handle.subscribe(got)
    closer = make_server(sender_handler(b"x"))
    p1 = toxi.proxy(closer.address, base="up")
    with connect(p1.listen_port) as s:
        recv_exactly(s, 1)
        assert s.recv(1) == b""  # the proxy closed the client side after the server closed
        assert _closed_of(toxi, got, p1.name)["by"] == "upstream"

    p2 = toxi.proxy(echo.address, base="dis")
    with connect(p2.listen_port) as s:
        round_trip(s)
        toxi.client.disable_proxy(p2.name)
        closed = _closed_of(toxi, got, p2.name)
    assert closed["by"] == "proxy"
    assert closed["reason"] == "proxy disabled" if toxi.kind == "embedded" else "from server log" in closed["reason"]

    p3 = toxi.proxy(echo.address, base="tox")
    toxi.client.add_toxic(p3.name, "timeout", attributes={"timeout": 50})
    with connect(p3.listen_port) as s:
        s.sendall(b"lost")
        assert s.recv(1) == b""  # the toxic closed the connection
        closed = _closed_of(toxi, got, p3.name)
    if toxi.kind == "embedded":
        assert (closed["by"], closed["reason"]) == ("toxic", "timeout toxic")
    else:
        assert closed["by"] == "proxy" and "from server log" in closed["reason"]
    assert closed["bytes_up"] == 4 and closed["bytes_down"] == 0


def test_upstream_failed(toxi) -> None:
    got = Collector()
    toxi.handle.subscribe(got)
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    p = toxi.proxy(f"127.0.0.1:{port}")
    with connect(p.listen_port):
        assert wait_until(lambda: len(got.of("conn.closed")) == 1)
    assert [e.type for e in got.events] == ["conn.accepted", "conn.upstream_failed", "conn.closed"]
    failed = got.of("conn.upstream_failed")[0].fields
    assert failed["upstream"] == f"127.0.0.1:{port}" and failed["error"]
    assert got.of("conn.closed")[0].fields["by"] == "upstream"


@pytest.mark.embedded_only(reason=EXTENSION)
def test_events_endpoint_since_and_node_patch(toxi, echo) -> None:
    """Embedded only: ``GET /events`` and the ``node`` key of a proxy are extensions (real 2.12 has
    no event API and drops unknown keys)."""
    p = toxi.proxy(echo.address)
    assert p.node is None
    assert toxi.client.update_proxy(p.name, node="mirror-2").node == "mirror-2"
    first, nxt = toxi.client.events(0)
    for _ in range(2):
        with connect(p.listen_port) as s:
            round_trip(s)
    assert wait_until(lambda: len(toxi.client.events(nxt)[0]) == 6)
    events, nxt2 = toxi.client.events(nxt)
    assert [e.seq for e in events] == list(range(nxt, nxt + 6)) and nxt2 == nxt + 6
    assert events[0].fields["node"] == "mirror-2"
    assert toxi.client.events(nxt2) == ([], nxt2)
    body = httpx.get(f"{toxi.client.url}/events", params={"since": nxt}).json()
    assert set(body) == {"events", "next"} and body["next"] == nxt2
    assert {"seq", "t", "type", "proxy", "conn_id"} <= set(body["events"][0])


def test_unsubscribe_stops_callbacks_and_bad_callback_is_isolated(toxi, echo) -> None:
    got = Collector()

    def broken(event) -> None:
        raise RuntimeError("subscriber bug")

    toxi.handle.subscribe(broken)
    unsubscribe = toxi.handle.subscribe(got)
    p = toxi.proxy(echo.address)
    with connect(p.listen_port) as s:
        round_trip(s)  # the broken subscriber does not break the data path
    assert wait_until(lambda: len(got.of("conn.closed")) == 1)
    unsubscribe()
    with connect(p.listen_port) as s:
        round_trip(s)
    time.sleep(0.05)
    assert len(got.events) == 3


def test_conn_ids_unique_per_server(toxi, echo) -> None:
    got = Collector()
    toxi.handle.subscribe(got)
    a = toxi.proxy(echo.address, base="a")
    b = toxi.proxy(echo.address, base="b")
    socks = [connect(a.listen_port), connect(b.listen_port), connect(a.listen_port)]
    for s in socks:
        round_trip(s)
        s.close()
    assert wait_until(lambda: len(got.of("conn.closed")) == 3)
    ids = [e.fields["conn_id"] for e in got.of("conn.accepted")]
    assert len(set(ids)) == 3


def test_settle_returns_only_after_every_event_the_server_already_saw(toxi, echo, monkeypatch) -> None:
    """OBS-1: ``handle.settle()`` is the barrier checkers stand behind. On a spawned real server the
    close of a connection is derived after a ``/metrics`` look-up; here that look-up is made slow, and
    settle, called while it runs, must not return before the close is published."""
    got = Collector()
    unsubscribe = toxi.handle.subscribe(got)
    proc = getattr(toxi.handle._settle, "__self__", None)
    deriving = threading.Event()
    if proc is not None:  # spawned: hold the close's derivation for 1 s
        def slow_counters(proxy: str) -> None:
            deriving.set()
            time.sleep(1.0)

        monkeypatch.setattr(proc._deriver, "_counters", slow_counters)
    p = toxi.proxy(echo.address)
    with connect(p.listen_port) as s:
        s.sendall(b"ping")
        recv_exactly(s, 4)
    if proc is not None:
        assert deriving.wait(5), "the close was never derived"
        assert not got.of("conn.closed"), "the close was published before its slow derivation ended"
    else:  # embedded: published on the connection's thread as the socket closes
        assert wait_until(lambda: len(got.of("conn.closed")) == 1)
    assert toxi.handle.settle(5.0)
    assert len(got.of("conn.closed")) == 1
    unsubscribe()
