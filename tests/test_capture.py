"""The refused-connect capture (harness.capture, OBS-1): header parsing and SYN/RST bookkeeping on
crafted segments, the real AF_PACKET capture on loopback against a closed port (its timing measured
against the connecting socket's own timestamps), the unavailable path as an unprivileged user, and
the capture wired into a proxied pair (``partition how=refuse`` → ``conn.refused`` in the history)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.capture import CaptureTarget, RefusalTracker, RefusedConnectCapture, Segment, parse_ipv4_tcp
from harness.capture.tcp import ACK, RST, SYN, syn_or_rst_filter
from harness.errors import CaptureUnavailable
from harness.faults import Faults
from harness.history import History
from harness.topology import Pair

REPO = Path(__file__).resolve().parents[1]
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def ipv4_tcp(src: str, sport: int, dst: str, dport: int, flags: int, seq: int = 0, ack: int = 0,
             ihl: int = 5, proto: int = 6, frag: int = 0) -> bytes:
    """A minimal IPv4 + TCP header (checksums left zero: the parser does not read them)."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 40, 1, frag, 64, proto, 0, socket.inet_aton(src),
                     socket.inet_aton(dst)) + b"\x00" * (ihl * 4 - 20)
    tcp = struct.pack("!HHIIHHHH", sport, dport, seq, ack, (5 << 12) | flags, 65535, 0, 0)
    return ip + tcp


def test_parse_ipv4_tcp_reads_ports_flags_and_numbers_and_ignores_other_packets() -> None:
    seg = parse_ipv4_tcp(ipv4_tcp("127.0.0.1", 40000, "127.0.0.1", 5432, SYN, seq=7))
    assert seg == Segment(("127.0.0.1", 40000), ("127.0.0.1", 5432), SYN, 7, 0) and seg.is_syn
    with_options = parse_ipv4_tcp(ipv4_tcp("127.0.0.2", 1, "127.0.0.3", 2, RST | ACK, 0, 8, ihl=7))
    assert with_options is not None and with_options.src == ("127.0.0.2", 1) and with_options.is_rst
    assert parse_ipv4_tcp(ipv4_tcp("127.0.0.1", 1, "127.0.0.1", 2, SYN, proto=17)) is None  # UDP
    assert parse_ipv4_tcp(ipv4_tcp("127.0.0.1", 1, "127.0.0.1", 2, SYN, frag=3)) is None  # fragment
    assert parse_ipv4_tcp(b"\x60" + b"\x00" * 60) is None  # IPv6
    assert parse_ipv4_tcp(b"\x45\x00") is None  # truncated


def test_bpf_program_is_nine_instructions_ending_in_drop_and_keep() -> None:
    program = syn_or_rst_filter()
    assert len(program) == 9 * 8
    last_two = [struct.unpack_from("HBBI", program, off) for off in (7 * 8, 8 * 8)]
    assert last_two == [(0x06, 0, 0, 0), (0x06, 0, 0, 96)]


LISTEN = ("127.0.0.1", 6001)
CLIENT = ("127.0.0.1", 50001)


def test_tracker_reports_a_syn_answered_by_rst_ack_and_nothing_else() -> None:
    tracker = RefusalTracker({LISTEN})
    assert tracker.feed(Segment(CLIENT, LISTEN, SYN, 100, 0), 1.0) is None
    assert tracker.feed(Segment(CLIENT, LISTEN, SYN, 100, 0), 1.5) is None  # retransmission: first time kept
    refusal = tracker.feed(Segment(LISTEN, CLIENT, RST | ACK, 0, 101), 1.6)
    assert refusal is not None and (refusal.listen, refusal.client, refusal.syn_t, refusal.rst_t) == (
        LISTEN, CLIENT, 1.0, 1.6)
    assert tracker.pending == 0


def test_tracker_ignores_accepted_connections_wrong_acks_and_unwatched_ports() -> None:
    tracker = RefusalTracker({LISTEN})
    tracker.feed(Segment(CLIENT, LISTEN, SYN, 100, 0), 1.0)
    assert tracker.feed(Segment(LISTEN, CLIENT, SYN | ACK, 555, 101), 1.1) is None  # accepted
    assert tracker.feed(Segment(LISTEN, CLIENT, RST | ACK, 556, 101), 2.0) is None  # a later reset
    other = ("127.0.0.1", 50002)
    tracker.feed(Segment(other, LISTEN, SYN, 9, 0), 3.0)
    assert tracker.feed(Segment(LISTEN, other, RST | ACK, 0, 11), 3.1) is None  # not this SYN's answer
    assert tracker.feed(Segment(LISTEN, other, RST, 0, 10), 3.1) is None  # no ACK: not a refusal
    unwatched = ("127.0.0.1", 7000)
    tracker.feed(Segment(CLIENT, unwatched, SYN, 1, 0), 4.0)
    assert tracker.feed(Segment(unwatched, CLIENT, RST | ACK, 0, 2), 4.1) is None
    any_host = RefusalTracker({("0.0.0.0", 6001)})
    any_host.feed(Segment(CLIENT, ("127.0.0.5", 6001), SYN, 1, 0), 5.0)
    assert any_host.feed(Segment(("127.0.0.5", 6001), CLIENT, RST | ACK, 0, 2), 5.1) is not None


def test_tracker_keeps_the_syn_time_of_each_accepted_connect() -> None:
    """An accepted connect (SYN answered by SYN+ACK) keeps its SYN's time for the accept's stamp
    (compose's log-derived ``conn.accepted``, OBS-1): the first SYN of a retransmission, none for a
    refused or unwatched connect, and only the last ``max_pending`` of them."""
    tracker = RefusalTracker({LISTEN}, max_pending=2)
    tracker.feed(Segment(CLIENT, LISTEN, SYN, 100, 0), 1.0)
    tracker.feed(Segment(CLIENT, LISTEN, SYN, 100, 0), 1.2)  # retransmitted: the first time counts
    tracker.feed(Segment(LISTEN, CLIENT, SYN | ACK, 555, 101), 1.3)
    assert tracker.syn_time(CLIENT, LISTEN) == 1.0 and tracker.pending == 0
    refused = ("127.0.0.1", 40001)
    tracker.feed(Segment(refused, LISTEN, SYN, 5, 0), 2.0)
    tracker.feed(Segment(LISTEN, refused, RST | ACK, 0, 6), 2.1)
    assert tracker.syn_time(refused, LISTEN) is None
    unwatched = ("127.0.0.1", 6999)
    tracker.feed(Segment(CLIENT, unwatched, SYN, 1, 0), 3.0)
    tracker.feed(Segment(unwatched, CLIENT, SYN | ACK, 9, 2), 3.1)
    assert tracker.syn_time(CLIENT, unwatched) is None
    for i, port in enumerate((40002, 40003)):  # two more accepted: the oldest is forgotten
        tracker.feed(Segment(("127.0.0.1", port), LISTEN, SYN, 1, 0), 4.0 + i)
        tracker.feed(Segment(LISTEN, ("127.0.0.1", port), SYN | ACK, 7, 2), 4.1 + i)
    assert tracker.syn_time(CLIENT, LISTEN) is None and tracker.syn_time(("127.0.0.1", 40003), LISTEN) == 5.0


def test_tracker_watches_an_address_added_later_and_forgets_a_removed_one() -> None:
    """A node added to a running topology: its listen address is watched from then on; a removed one
    is not, and its pending SYN is dropped (OBS-1)."""
    later = ("127.0.0.1", 6100)
    tracker = RefusalTracker({LISTEN})
    tracker.feed(Segment(CLIENT, later, SYN, 7, 0), 1.0)
    assert tracker.feed(Segment(later, CLIENT, RST | ACK, 0, 8), 1.1) is None  # not watched yet
    tracker.watch(later)
    tracker.feed(Segment(CLIENT, later, SYN, 9, 0), 2.0)
    refusal = tracker.feed(Segment(later, CLIENT, RST | ACK, 0, 10), 2.1)
    assert refusal is not None and refusal.listen == later
    tracker.feed(Segment(CLIENT, later, SYN, 11, 0), 3.0)
    tracker.unwatch(later)
    assert tracker.pending == 0
    assert tracker.feed(Segment(later, CLIENT, RST | ACK, 0, 12), 3.1) is None
    tracker.feed(Segment(CLIENT, LISTEN, SYN, 13, 0), 4.0)  # the others stay watched
    assert tracker.feed(Segment(LISTEN, CLIENT, RST | ACK, 0, 14), 4.1) is not None


def test_tracker_forgets_old_syns_beyond_its_bound() -> None:
    tracker = RefusalTracker({LISTEN}, max_pending=3, expire=1.0)
    for k in range(10):
        tracker.feed(Segment(("127.0.0.1", 40000 + k), LISTEN, SYN, k, 0), float(k * 2))
    assert tracker.pending <= 3


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="AF_PACKET exists on Linux only")
def test_real_capture_times_refused_connects_within_the_clients_own_timestamps() -> None:
    """A closed port and a listening one on loopback, 20 connects each: every refused connect is
    reported once (client port, listen address, proxy name), none of the accepted ones; the SYN's
    capture time lies between the client's timestamps just before ``connect()`` and just after its
    ECONNREFUSED, and so does the RST (the capture's clock is the history's monotonic clock)."""
    if not ROOT:
        with pytest.raises(CaptureUnavailable, match="root"):
            RefusedConnectCapture([CaptureTarget("127.0.0.1:1", "p")], lambda o: None).start()
        return
    closed = _closed_port()
    listener = socket.create_server(("127.0.0.1", 0))
    open_port = listener.getsockname()[1]
    seen = []
    targets = [CaptureTarget(f"127.0.0.1:{closed}", "px-closed", "n1"),
               CaptureTarget(f"127.0.0.1:{open_port}", "px-open", "n2")]
    tries = []
    with RefusedConnectCapture(targets, seen.append) as capture:
        for _ in range(20):
            with socket.socket() as c:
                before = time.monotonic()
                with pytest.raises(ConnectionRefusedError):
                    c.connect(("127.0.0.1", closed))
                tries.append((c.getsockname()[1], before, time.monotonic()))
            socket.create_connection(("127.0.0.1", open_port)).close()
        assert capture.settle() is None
    listener.close()
    assert [o.fields["client_port"] for o in seen] == [port for port, _, _ in tries]
    for obs, (port, before, after) in zip(seen, tries, strict=True):
        assert obs.type == "conn.refused"
        assert obs.fields["proxy"] == "px-closed" and obs.fields["node"] == "n1"
        assert obs.fields["listen"] == f"127.0.0.1:{closed}" and obs.fields["client"] == f"127.0.0.1:{port}"
        assert before <= obs.t <= after and obs.t + obs.fields["seconds"] <= after
        assert obs.fields["seconds"] < 0.001


@pytest.mark.skipif(not ROOT, reason="dropping to an unprivileged user needs root (not root: see the test above)")
def test_capture_is_unavailable_to_an_unprivileged_user() -> None:
    code = ("from harness.capture import CaptureTarget, RefusedConnectCapture\n"
            "from harness.errors import CaptureUnavailable\n"
            "try:\n    RefusedConnectCapture([CaptureTarget('127.0.0.1:1', 'p')], print).start()\n"
            "except CaptureUnavailable as exc:\n    print('UNAVAILABLE', exc)\n")
    # the project's virtualenv may sit under /root; the module needs only the standard library
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, user="nobody", cwd="/tmp")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("UNAVAILABLE packet capture needs root (CAP_NET_RAW); running as uid")


def test_refuse_partition_of_a_pair_leaves_conn_refused_events_in_the_history() -> None:
    """A proxied pair with a history: the capture announces itself (``harness.capture``), and a
    connect to a node whose proxy is disabled by ``partition how=refuse`` is in the history as
    ``conn.refused`` (that node, its proxy and listen address, the client's port) by the time the
    partition ends; the fault's params name the proxy and the address."""
    history = History()
    with Pair(mode="async", mirror_readable=True, history=history) as pair:
        status = history.events("harness.capture")
        assert len(status) == 1
        if not ROOT:
            assert status[0].get("available") is False and "root" in status[0].get("reason")
            return
        assert status[0].get("available") is True and status[0].get("method") == "af_packet:lo"
        node = pair.mirror
        host, port = node.client_address
        assert {"listen": f"{host}:{port}", "proxy": pair.links.client_proxy(node.name), "node": node.name} in \
            status[0].get("targets")
        faults = Faults(pair, history)
        with faults.partition(node.name, how="refuse"), socket.socket() as c:
            before = time.monotonic()
            with pytest.raises(ConnectionRefusedError):
                c.connect((host, port))
            client_port = c.getsockname()[1]
        refused = history.events("conn.refused")
        assert [(e.get("node"), e.get("proxy"), e.get("listen"), e.get("client_port")) for e in refused] == [
            (node.name, pair.links.client_proxy(node.name), f"{host}:{port}", client_port)]
        assert refused[0].t >= before
        start = next(e for e in history.events("fault.start") if e.get("fault") == "partition")
        assert start.get("params") == {"how": "refuse", "proxy": pair.links.client_proxy(node.name),
                                       "listen": f"{host}:{port}"}


def test_a_node_added_to_a_running_group_is_watched_too() -> None:
    """Node add on a proxied pair with a history: the capture watches the new node's client-facing
    address from then on, as it does the nodes' it started with - a ``harness.capture`` event with
    ``available: true`` names it, and a connect refused there by ``partition how=refuse`` is a
    ``conn.refused`` of that node. Once the node is removed its address is no longer watched."""
    history = History()
    with Pair(mode="async", mirror_readable=True, history=history) as pair:
        if not ROOT:
            pair.add_node()
            assert [e.get("available") for e in history.events("harness.capture")] == [False]
            return
        faults = Faults(pair, history)
        name = faults.add_node().result.node
        node = pair.node(name)
        host, port = node.client_address
        target = {"listen": f"{host}:{port}", "proxy": pair.links.client_proxy(name), "node": name}
        announced = history.events("harness.capture")
        assert len(announced) == 2 and target not in announced[0].get("targets")
        assert announced[1].get("available") is True and announced[1].get("targets") == [target]
        with faults.partition(name, how="refuse"), socket.socket() as c:
            with pytest.raises(ConnectionRefusedError):
                c.connect((host, port))
            client_port = c.getsockname()[1]
        refused = history.events("conn.refused")
        assert [(e.get("node"), e.get("listen"), e.get("client_port")) for e in refused] == [
            (name, f"{host}:{port}", client_port)]
        faults.remove_node(name)
        with socket.socket() as c:  # nothing listens there now: refused, but no node's any more
            with pytest.raises(ConnectionRefusedError):
                c.connect((host, port))
        pair.settle_observations()
        assert len(history.events("conn.refused")) == 1


def test_capture_turned_off_is_recorded_as_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILOVER_HARNESS_CAPTURE", "off")
    history = History()
    with Pair(mode="async", mirror_readable=True, history=history):
        status = history.events("harness.capture")
    assert [(e.get("available"), e.get("reason")) for e in status] == [
        (False, "turned off by FAILOVER_HARNESS_CAPTURE=off")]
