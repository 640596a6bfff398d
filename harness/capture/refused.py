"""The refused-connect capture: an ``AF_PACKET`` socket on the loopback interface that watches the
SYNs to a run's fault-proxy listen addresses and the RSTs answering them (OBS-1: a partition
``how=refuse`` disables the proxy's listener, the kernel refuses the SYN, and the proxy records
nothing). Each refusal becomes a ``conn.refused`` observation on ``time.monotonic()``.

Timing: every packet carries the kernel's receive timestamp (``SO_TIMESTAMPNS``, CLOCK_REALTIME),
converted to the monotonic clock with an offset read from both clocks (best of three readings) when
the packet is handled - so a late wake-up of the capture thread does not shift the times. Measured
precision: see docs/events.md (``conn.refused``).

Needs Linux and CAP_NET_RAW (root); :meth:`RefusedConnectCapture.start` raises
:class:`~harness.errors.CaptureUnavailable` naming why not. The kernel drops nothing it has not
counted: :meth:`RefusedConnectCapture.settle` reports such drops (the capture is then incomplete)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.capture.tcp import SNAPLEN, Endpoint, Refusal, RefusalTracker, parse_ipv4_tcp, syn_or_rst_filter
from harness.errors import CaptureUnavailable

ETH_P_IP = 0x0800
SO_TIMESTAMPNS = 35
SO_ATTACH_FILTER = 26
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_OUTGOING = 4
RCVBUF = 1 << 20
METHOD = "af_packet"


@dataclass(frozen=True)
class CaptureTarget:
    """One watched listen address (``host:port``) and what it fronts."""

    listen: str
    proxy: str
    node: str | None = None

    @property
    def endpoint(self) -> Endpoint:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)


@dataclass(frozen=True)
class Observation:
    """What the capture tells its subscriber: an event ``type`` at monotonic ``t`` with ``fields``
    (the shape of the fault proxy's connection events, so one callback records both)."""

    t: float
    type: str
    fields: dict[str, Any]


def clock_offset() -> float:
    """CLOCK_REALTIME − CLOCK_MONOTONIC in seconds, from the tightest of three paired readings."""
    best: tuple[int, int] | None = None
    for _ in range(3):
        a = time.monotonic_ns()
        wall = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    assert best is not None
    return best[1] / 1e9


def _kernel_time(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack_from("qq", data)
            return sec + nsec / 1e9
    return None


def _open_socket(interface: str) -> socket.socket:
    """The filtered packet socket, bound to ``interface`` (CaptureUnavailable when it cannot be)."""
    if not sys.platform.startswith("linux") or not hasattr(socket, "AF_PACKET"):
        raise CaptureUnavailable(f"packet capture needs Linux AF_PACKET sockets; this is {sys.platform}")
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0)  # protocol 0: nothing until bound
    except PermissionError:
        uid = os.geteuid() if hasattr(os, "geteuid") else "?"
        raise CaptureUnavailable(f"packet capture needs root (CAP_NET_RAW); running as uid {uid}") from None
    except OSError as exc:
        raise CaptureUnavailable(f"no packet socket: {exc}") from None
    try:
        program = syn_or_rst_filter()
        buf = ctypes.create_string_buffer(program)  # the kernel copies it during setsockopt
        fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(buf))
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.bind((interface, ETH_P_IP))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise CaptureUnavailable(f"packet capture on {interface} failed: {exc}") from None
    return sock


def _probe_syn_time(sock: socket.socket, port: int, wait: float) -> float | None:
    """The converted kernel time of the first SYN to ``127.0.0.1:port`` queued on ``sock``."""
    deadline = time.monotonic() + wait
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([sock], [], [], remaining)[0]:
            return None
        offset = clock_offset()
        try:
            data, ancillary, _, _ = sock.recvmsg(SNAPLEN, 64)
        except BlockingIOError:
            continue
        seg = parse_ipv4_tcp(data)
        wall = _kernel_time(ancillary)
        if seg is not None and seg.is_syn and seg.dst == ("127.0.0.1", port) and wall is not None:
            return wall - offset


def await_kernel_stamps(sock: socket.socket, timeout: float = 2.0) -> dict[str, float]:
    """Make sure the kernel timestamps packets when it receives them, before trusting its stamps.

    Linux turns receive timestamps on a moment after the first socket asks for them (a static key
    flipped from a work queue); until then a packet is stamped when the capture *reads* it, which can
    be milliseconds late. So: connect to a port that is bound but not listening (refused at once)
    until the captured SYN's time lies between the timestamps taken just before and just after the
    ``connect()`` call. Returns that probe's ``syn_lag`` (SYN − before) and ``span`` (after − before)
    in seconds; CaptureUnavailable if the stamps never fall inside within ``timeout``."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connects are refused, the port stays ours
        port = closed.getsockname()[1]
        deadline = time.monotonic() + timeout
        seen: float | None = None
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                before = time.monotonic()
                with contextlib.suppress(ConnectionRefusedError):
                    probe.connect(("127.0.0.1", port))
                after = time.monotonic()
            syn = _probe_syn_time(sock, port, 0.2)
            if syn is not None and before <= syn <= after:
                return {"syn_lag": round(syn - before, 9), "span": round(after - before, 9)}
            seen = syn if syn is None else syn - after
            time.sleep(0.005)
    late = "no SYN captured" if seen is None else f"the last probe SYN was stamped {seen * 1000:.3f} ms after connect()"
    raise CaptureUnavailable(f"the kernel did not timestamp captured packets on receive within {timeout:g} s ({late})")


class RefusedConnectCapture:
    """Watches ``targets`` on ``interface`` and calls ``deliver`` with one ``conn.refused``
    :class:`Observation` per refused connect (fields: ``listen``, ``proxy``, ``node``, ``client``,
    ``client_port``, ``seconds`` = SYN → RST, ``source``). ``t`` is the SYN's time: when the attempt
    began, as ``conn.accepted.t`` is for an accepted one. Use :meth:`start`, :meth:`settle`,
    :meth:`stop` (or the context manager)."""

    def __init__(self, targets: Sequence[CaptureTarget], deliver: Callable[[Observation], None],
                 interface: str = "lo") -> None:
        self.targets = list(targets)
        self.interface = interface
        self._deliver = deliver
        self._by_endpoint = {t.endpoint: t for t in self.targets}
        self._tracker = RefusalTracker(set(self._by_endpoint))
        self._sock: socket.socket | None = None
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._requested = 0
        self._served = 0
        self._stopping = False
        self.error: str | None = None
        self.refused = 0
        self._drops = 0
        self.probe: dict[str, float] = {}

    def add_target(self, target: CaptureTarget) -> None:
        """Watch ``target`` too from now on (a node added to a running topology gets the capture the
        nodes started with, OBS-1)."""
        self.targets = [*self.targets, target]
        self._by_endpoint = {**self._by_endpoint, target.endpoint: target}
        self._tracker.watch(target.endpoint)

    def remove_target(self, listen: str) -> None:
        """Stop watching the listen address ``listen`` (``host:port``; a node removed)."""
        gone = [t for t in self.targets if t.listen == listen]
        self.targets = [t for t in self.targets if t.listen != listen]
        for t in gone:
            self._tracker.unwatch(t.endpoint)
            self._by_endpoint = {ep: x for ep, x in self._by_endpoint.items() if ep != t.endpoint}

    def syn_time(self, client: Endpoint, listen: Endpoint) -> float | None:
        """The capture time of the SYN of an accepted connect from ``client`` to a watched ``listen``
        address (:meth:`RefusalTracker.syn_time`), or None when the capture has not seen it."""
        return self._tracker.syn_time(client, listen)

    @property
    def method(self) -> str:
        """How the capture observes: ``af_packet:<interface>``."""
        return f"{METHOD}:{self.interface}"

    def start(self) -> RefusedConnectCapture:
        """Open the socket, wait until the kernel stamps its packets (:func:`await_kernel_stamps`) and
        start the reader thread (CaptureUnavailable when any of it cannot be done)."""
        self._sock = _open_socket(self.interface)
        try:
            self.probe = await_kernel_stamps(self._sock)
        except BaseException:
            self._sock.close()
            self._sock = None
            raise
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._thread = threading.Thread(target=self._run, name="refused-capture", daemon=True)
        self._thread.start()
        return self

    def settle(self, timeout: float = 2.0) -> str | None:
        """Deliver every packet the kernel queued before this call; returns None when the capture
        is complete up to now, else why it is not (dropped packets, a dead reader, a timeout)."""
        if self._thread is None or self._sock is None:
            return "the capture is not running"
        if threading.current_thread() is self._thread:
            return None  # a subscriber reading the history from the capture thread: it is up to date
        with self._cond:
            self._requested += 1
            want = self._requested
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"s")
        with self._cond:
            done = self._cond.wait_for(lambda: self._served >= want or self.error is not None, timeout)
        if self.error is not None:
            return self.error
        if not done:
            return f"the capture did not catch up within {timeout:g} s"
        drops = self.dropped()
        return f"the kernel dropped {drops} captured packet(s)" if drops else None

    def dropped(self) -> int:
        """Packets the kernel dropped for this socket so far (PACKET_STATISTICS; reading resets it,
        so the count is kept)."""
        if self._sock is None:
            return 0
        try:
            raw = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        except OSError:
            return 0
        self._drops += struct.unpack("II", raw)[1]
        return self._drops

    def stop(self) -> None:
        """Stop the reader and close the socket (safe to call twice)."""
        self._stopping = True
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"q")
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake_r = self._wake_w = -1

    def __enter__(self) -> RefusedConnectCapture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------ reader

    def _run(self) -> None:
        assert self._sock is not None
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while not self._stopping:
                ready = {fd for fd, _ in poller.poll(500)}
                if self._wake_r in ready:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
                    with self._cond:
                        want = self._requested
                    self._drain()
                    with self._cond:
                        self._served = max(self._served, want)
                        self._cond.notify_all()
                elif ready:
                    self._drain()
        except Exception as exc:  # noqa: BLE001 - reported by settle(): the capture is then incomplete
            with self._cond:
                self.error = f"the capture reader stopped: {type(exc).__name__}: {exc}"
                self._cond.notify_all()

    def _drain(self) -> None:
        """Handle every queued packet (the socket is non-blocking)."""
        assert self._sock is not None
        offset = clock_offset()
        while True:
            try:
                data, ancillary, _, addr = self._sock.recvmsg(SNAPLEN, 64)
            except BlockingIOError:
                return
            if len(addr) > 2 and addr[2] == PACKET_OUTGOING:
                continue
            wall = _kernel_time(ancillary)
            t = time.monotonic() if wall is None else wall - offset
            seg = parse_ipv4_tcp(data)
            if seg is None:
                continue
            refusal = self._tracker.feed(seg, t)
            observation = self._observation(refusal) if refusal is not None else None
            if observation is not None:
                self.refused += 1
                self._deliver(observation)

    def _observation(self, r: Refusal) -> Observation | None:
        target = self._by_endpoint.get(r.listen) or self._by_endpoint.get(("0.0.0.0", r.listen[1]))
        if target is None:  # removed (remove_target) while its refusal was being read
            return None
        start, end = min(r.syn_t, r.rst_t), max(r.syn_t, r.rst_t)  # the two stamps differ by µs
        return Observation(start, "conn.refused", {
            "proxy": target.proxy, "node": target.node, "listen": target.listen,
            "client": f"{r.client[0]}:{r.client[1]}", "client_port": r.client[1],
            "seconds": round(end - start, 9), "source": self.method,
        })
