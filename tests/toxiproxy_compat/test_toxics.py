"""Wire behaviour of every toxic and of the proxy itself, with explicit tolerances."""

from __future__ import annotations

import os
import selectors
import socket
import statistics
import time

import pytest
from tcp_servers import (
    TcpServer,
    connect,
    recv_all,
    recv_exactly,
    round_trip,
    sender_handler,
    sink_handler,
    wait_until,
)

LATENCY_TOL = 0.010  # seconds, +-
BANDWIDTH_TOL = 0.05  # fraction, +-
CLOSE_TOL = 0.050  # seconds, + (a close is never early)
# Timed cases run twice and the best run must meet the tolerance: on a loaded 2-core machine
# (pytest -n 2 next to other work) scheduler noise only ever adds delay. Every run must still
# never be early.
ATTEMPTS = 2


def rtt(sock: socket.socket, n: int = 3) -> float:
    """The fastest of ``n`` round trips. Scheduler noise on a loaded 2-core machine only ever adds
    delay, so the minimum measures what the toxic adds; "never early" is checked by the caller's
    lower bound on that same minimum."""
    return min(round_trip(sock) for _ in range(n))


def closed_by_peer(sock: socket.socket, timeout: float = 2.0) -> bool:
    """True if the peer closes (EOF or reset) within ``timeout``; data is discarded."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_passthrough_integrity(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    payload = os.urandom(1_000_000)
    with connect(p.listen_port) as s:
        s.sendall(payload)
        assert recv_exactly(s, len(payload)) == payload


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_latency(toxi, echo, stream) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "latency", stream=stream, attributes={"latency": 100})
    with connect(p.listen_port) as s:
        rtts = [round_trip(s) for _ in range(5)]
    assert abs(min(rtts) - 0.100) <= LATENCY_TOL, rtts
    assert statistics.median(rtts) <= 0.100 + 5 * LATENCY_TOL, rtts


def test_latency_jitter_within_bounds(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "latency", attributes={"latency": 40, "jitter": 20})
    with connect(p.listen_port) as s:
        rtts = [round_trip(s) for _ in range(10)]
    assert all(r >= 0.020 - LATENCY_TOL for r in rtts), rtts
    assert sum(r <= 0.060 + LATENCY_TOL for r in rtts) >= 8, rtts  # noise only adds
    assert max(rtts) - min(rtts) > 0.005, f"jitter had no effect: {rtts}"


def stacked_latency(sent: list[float], delays: list[float]) -> list[float]:
    """What real Toxiproxy 2.12 does with chunks sent at ``sent`` through latency toxics of
    ``delays`` seconds (toxics/latency.go: each toxic is a stage that takes one chunk at a time,
    sleeps ``delay - (now - chunk.Timestamp)`` and moves the chunk's timestamp by that sleep).
    Returns each chunk's total delay."""
    free = [0.0] * len(delays)
    out = []
    for t in sent:
        at = stamp = t
        for k, delay in enumerate(delays):
            taken = max(at, free[k])
            sleep = delay - (taken - stamp)
            at = free[k] = taken + max(sleep, 0.0)
            stamp += sleep
        out.append(at - t)
    return out


def test_stacked_latency_is_pipelined_like_real_2_12(toxi, make_server) -> None:
    """Single bytes 20 ms apart through 60 + 40 ms toxics arrive 100, 80, 60, 60, 60 ms late on
    real 2.12 (the toxics do not simply add once chunks queue); the embedded server matches."""
    received: list[float] = []

    def stamp(conn: socket.socket) -> None:
        while True:
            data = conn.recv(1)
            if not data:
                return
            received.append(time.monotonic())

    server = make_server(stamp)
    p = toxi.proxy(server.address)
    toxi.client.add_toxic(p.name, "latency", stream="upstream", name="l1", attributes={"latency": 60})
    toxi.client.add_toxic(p.name, "latency", stream="upstream", name="l2", attributes={"latency": 40})

    def once() -> list[float]:
        received.clear()
        with connect(p.listen_port) as s:
            sent = []
            for _ in range(5):
                sent.append(time.monotonic())
                s.sendall(b"x")
                time.sleep(0.02)
            assert wait_until(lambda: len(received) == 5, 2.0)
        delays = [r - t for r, t in zip(received, sent, strict=True)]
        expected = stacked_latency(sent, [0.060, 0.040])
        assert expected[0] == pytest.approx(0.100) and expected[-1] < 0.070, expected  # the model
        errors = [d - e for d, e in zip(delays, expected, strict=True)]
        assert all(err >= -0.005 for err in errors), (delays, expected)  # never early
        return errors

    runs = [once() for _ in range(ATTEMPTS)]
    best = min(runs, key=lambda errors: sorted(errors)[3])
    assert min(abs(e) for e in best) <= LATENCY_TOL and sorted(best)[3] <= 3 * LATENCY_TOL, runs


def test_bandwidth(toxi, make_server) -> None:
    size = 100_000
    server = make_server(sender_handler(b"b" * size))
    p = toxi.proxy(server.address)
    toxi.client.add_toxic(p.name, "bandwidth", attributes={"rate": 200})  # 200 KB/s -> 0.5 s

    def once() -> float:
        with connect(p.listen_port) as s:
            t0 = time.monotonic()
            data = recv_all(s)
            elapsed = time.monotonic() - t0
        assert len(data) == size
        return elapsed

    times = [once() for _ in range(ATTEMPTS)]
    expected = size / 200_000
    assert min(times) >= expected * (1 - BANDWIDTH_TOL), times  # never faster than the rate
    assert abs(min(times) - expected) <= expected * BANDWIDTH_TOL, times


def test_bandwidth_rate_0_stalls_until_removed(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "bandwidth", attributes={"rate": 0})
    with connect(p.listen_port) as s:
        s.sendall(b"stall")
        s.settimeout(0.3)
        with pytest.raises(TimeoutError):
            s.recv(10)
        toxi.client.delete_toxic(p.name, "bandwidth_downstream")
        s.settimeout(2)
        assert recv_exactly(s, 5) == b"stall"


def test_slow_close(toxi, make_server) -> None:
    server = make_server(sender_handler(b"bye"))
    p = toxi.proxy(server.address)
    toxi.client.add_toxic(p.name, "slow_close", attributes={"delay": 200})

    def once() -> float:
        with connect(p.listen_port) as s:
            t0 = time.monotonic()
            assert recv_exactly(s, 3) == b"bye"
            assert time.monotonic() - t0 < 0.1  # data passes at once
            assert recv_all(s) == b""
            return time.monotonic() - t0

    times = [once() for _ in range(ATTEMPTS)]
    # t0 is taken once the data arrived, a little after the server closed: 5 ms of slack, as for timeout
    assert all(t >= 0.200 - 0.005 for t in times) and min(times) <= 0.200 + CLOSE_TOL, times


def test_timeout_drops_data_then_closes(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "timeout", attributes={"timeout": 200})

    def once() -> float:
        t0 = time.monotonic()  # before the connect: the toxic's clock starts after the proxy accepts
        with connect(p.listen_port) as s:
            s.sendall(b"lost")
            assert recv_all(s) == b""  # nothing comes back, then EOF
            return time.monotonic() - t0

    times = [once() for _ in range(ATTEMPTS)]
    assert all(t >= 0.200 - 0.005 for t in times) and min(times) <= 0.200 + CLOSE_TOL, times


def test_timeout_0_holds_until_removed(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "timeout", name="hole", attributes={"timeout": 0})
    with connect(p.listen_port) as s:  # a black hole: connect succeeds, nothing comes back
        s.sendall(b"anyone?")
        assert not closed_by_peer(s, timeout=0.4)
        toxi.client.delete_toxic(p.name, "hole")
        assert closed_by_peer(s, timeout=2.0)


def test_reset_peer_gives_econnreset(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "reset_peer", stream="upstream", attributes={"timeout": 100})

    def once() -> float:
        with connect(p.listen_port) as s:
            t0 = time.monotonic()
            s.sendall(b"boom")
            with pytest.raises(ConnectionResetError):
                s.settimeout(2)
                while s.recv(100):
                    pass
            return time.monotonic() - t0

    times = [once() for _ in range(ATTEMPTS)]
    assert all(t >= 0.100 - 0.005 for t in times) and min(times) <= 0.100 + CLOSE_TOL, times


def test_limit_data_exact_bytes(toxi, make_server) -> None:
    server = make_server(sender_handler(os.urandom(50_000), close_after=False))
    p = toxi.proxy(server.address)
    toxi.client.add_toxic(p.name, "limit_data", attributes={"bytes": 12_345})
    with connect(p.listen_port) as s:
        s.settimeout(2)
        data = recv_all(s)
    assert len(data) == 12_345


def test_slicer_piece_sizes(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "slicer", attributes={"average_size": 10, "size_variation": 0,
                                                        "delay": 20_000})
    with connect(p.listen_port) as s:
        s.sendall(b"z" * 50)
        sizes = []
        while sum(sizes) < 50:
            sizes.append(len(s.recv(100)))
    assert max(sizes) <= 10 and len(sizes) >= 5, sizes


def test_toxicity_0_and_1(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "latency", toxicity=0.0, attributes={"latency": 200})
    with connect(p.listen_port) as s:
        assert all(round_trip(s) < 0.1 for _ in range(5))
    toxi.client.update_toxic(p.name, "latency_downstream", toxicity=1.0)
    with connect(p.listen_port) as s:
        assert abs(rtt(s) - 0.2) <= LATENCY_TOL


def test_toxics_apply_to_established_connections(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    with connect(p.listen_port) as s:
        assert round_trip(s) < 0.05
        toxi.client.add_toxic(p.name, "latency", attributes={"latency": 100})
        assert abs(rtt(s) - 0.1) <= LATENCY_TOL
        toxi.client.update_toxic(p.name, "latency_downstream", attributes={"latency": 50})
        assert abs(rtt(s) - 0.05) <= LATENCY_TOL
        toxi.client.delete_toxic(p.name, "latency_downstream")
        assert round_trip(s) < 0.05


def test_disable_closes_connections_and_refuses(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    with connect(p.listen_port) as s:
        round_trip(s)
        toxi.client.disable_proxy(p.name)
        assert closed_by_peer(s, 2.0)
    with pytest.raises(ConnectionRefusedError):
        connect(p.listen_port)
    toxi.client.enable_proxy(p.name)
    with connect(p.listen_port) as s:
        round_trip(s)


def test_upstream_change_drops_connections(toxi, make_server) -> None:
    a = make_server(sender_handler(b"A", close_after=False))
    b = make_server(sender_handler(b"B", close_after=False))
    p = toxi.proxy(a.address)
    with connect(p.listen_port) as s:
        assert recv_exactly(s, 1) == b"A"
        updated = toxi.client.update_proxy(p.name, upstream=b.address)
        assert updated.upstream == b.address and updated.listen == p.listen
        assert closed_by_peer(s, 2.0)
    with connect(p.listen_port) as s:
        assert recv_exactly(s, 1) == b"B"


def test_upstream_refused_closes_client(toxi) -> None:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    p = toxi.proxy(f"127.0.0.1:{port}")
    with connect(p.listen_port) as s:  # accepted by the proxy, then closed at once
        assert closed_by_peer(s, 2.0)


def test_upload_through_sink(toxi) -> None:
    counter = [0]
    with TcpServer(sink_handler(counter)) as sink:
        p = toxi.proxy(sink.address)
        with connect(p.listen_port) as s:
            s.sendall(b"u" * 2_000_000)
        assert wait_until(lambda: counter[0] == 2_000_000, 3.0), counter


@pytest.mark.embedded_only(reason="deliberate difference: the real server dials inside its accept "
                           "loop, so a stalled upstream blocks further accepts")
def test_stalled_upstream_dial_does_not_block_accepts(toxi) -> None:
    """Embedded only: real 2.12 dials the upstream inside its accept loop, so there a stalled dial
    blocks every later accept of the proxy; the embedded server dials each client in its own task."""
    # A listener whose accept queue is full drops SYNs: a dial to it stalls.
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    fillers = []
    try:
        for _ in range(3):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(full.getsockname())
            fillers.append(f)
        time.sleep(0.05)
        seen: list = []
        unsubscribe = toxi.handle.subscribe(seen.append)
        p = toxi.proxy(f"127.0.0.1:{full.getsockname()[1]}")
        clients = [connect(p.listen_port) for _ in range(4)]
        try:
            assert wait_until(lambda: sum(e.type == "conn.accepted" for e in seen) == 4, 1.0), seen
            toxi.client.disable_proxy(p.name)  # abandons the stalled dials, closes the clients
            assert all(closed_by_peer(c, 1.0) for c in clients)
            closed = [e for e in seen if e.type == "conn.closed"]
            assert len(closed) == 4 and {e.fields["by"] for e in closed} == {"proxy"}
        finally:
            unsubscribe()
            for c in clients:
                c.close()
    finally:
        for f in fillers:
            f.close()
        full.close()


def _parallel_rtts(socks: list[socket.socket]) -> list[float]:
    """Send a ping on every socket at once; each socket's reply time, read as it arrives."""
    sel = selectors.DefaultSelector()
    t0 = time.monotonic()
    for i, s in enumerate(socks):
        s.sendall(b"p")
        sel.register(s, selectors.EVENT_READ, i)
    out = [0.0] * len(socks)
    try:
        pending = len(socks)
        while pending:
            events = sel.select(timeout=5)
            assert events, "no reply within 5 s"
            for key, _ in events:
                assert key.fileobj.recv(1) == b"p"
                out[key.data] = time.monotonic() - t0
                sel.unregister(key.fileobj)
                pending -= 1
    finally:
        sel.close()
    return out


def test_toxicity_draw_is_stable_per_connection_until_changed(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "latency", toxicity=0.5, attributes={"latency": 150})
    socks = [connect(p.listen_port) for _ in range(16)]
    try:
        def measure() -> tuple[list[list[float]], list[list[bool]], int]:
            rounds = [_parallel_rtts(socks) for _ in range(3)]
            # an acting toxic is never faster than its latency; an inactive one almost never that slow
            slow = [[r[i] >= 0.150 - LATENCY_TOL for r in rounds] for i in range(len(socks))]
            return rounds, slow, sum(len(set(per_conn)) == 1 for per_conn in slow)

        rounds, slow, stable = measure()
        if stable < len(socks) - 1:  # a scheduler stall can make an inactive link look slow once:
            rounds, slow, stable = measure()  # a per-chunk (unstable) draw fails both measurements
        assert stable >= len(socks) - 1, rounds  # same draw for the whole connection
        acting = sum(all(per_conn) for per_conn in slow)
        assert 0 < acting < len(socks), slow  # both outcomes occur (fails with p = 3e-5)
        toxi.client.update_toxic(p.name, "latency_downstream", toxicity=1.0)  # redraw everywhere
        assert all(r >= 0.150 - LATENCY_TOL for r in _parallel_rtts(socks))
    finally:
        for s in socks:
            s.close()
