"""IPv4/TCP header parsing and the SYN → RST bookkeeping of the refused-connect capture (OBS-1,
MIR-1/MIR-4: a refused connect never reaches a fault proxy). Pure: no socket, no clock.

A connect to a closed port on Linux is one SYN from the client answered by one RST+ACK from the
port whose acknowledgement number is the SYN's sequence number + 1 (RFC 9293 §3.10.7.1). A SYN
answered by SYN+ACK was accepted (the proxy sees that connection itself)."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
IPPROTO_TCP = 6
#: Bytes of each packet the kernel hands over: the longest IPv4 header (60) plus the TCP fields read.
SNAPLEN = 96

Endpoint = tuple[str, int]


@dataclass(frozen=True)
class Segment:
    """The TCP fields the capture reads from one IPv4 packet."""

    src: Endpoint
    dst: Endpoint
    flags: int
    seq: int
    ack: int

    @property
    def is_syn(self) -> bool:
        """A connection request: SYN without ACK."""
        return bool(self.flags & SYN) and not self.flags & ACK

    @property
    def is_syn_ack(self) -> bool:
        """The listener accepted: SYN with ACK."""
        return bool(self.flags & SYN) and bool(self.flags & ACK)

    @property
    def is_rst(self) -> bool:
        return bool(self.flags & RST)


def parse_ipv4_tcp(data: bytes) -> Segment | None:
    """The TCP segment of an IPv4 packet (network header first), or None for anything else (another
    protocol, a fragment, a truncated header)."""
    if len(data) < 20 or data[0] >> 4 != 4:
        return None
    ihl = (data[0] & 0x0F) * 4
    if ihl < 20 or data[9] != IPPROTO_TCP or len(data) < ihl + 14:
        return None
    if struct.unpack_from("!H", data, 6)[0] & 0x1FFF:  # a non-first fragment carries no TCP header
        return None
    src, dst = socket.inet_ntoa(data[12:16]), socket.inet_ntoa(data[16:20])
    sport, dport, seq, ack, off_flags = struct.unpack_from("!HHIIH", data, ihl)
    return Segment((src, sport), (dst, dport), off_flags & 0x3F, seq, ack)


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def syn_or_rst_filter() -> bytes:
    """A classic BPF program (``struct sock_filter[]``) for a packet socket of ``SOCK_DGRAM`` /
    ``ETH_P_IP`` (offsets from the IPv4 header): keep TCP segments that are not fragments and carry
    SYN or RST, the first :data:`SNAPLEN` bytes of each; drop everything else in the kernel, so a
    busy loopback costs the capture nothing."""
    ld_b_abs, ld_h_abs, ldx_msh, ld_b_ind = 0x30, 0x28, 0xB1, 0x50
    jeq_k, jset_k, ret_k = 0x15, 0x45, 0x06
    return b"".join([
        _insn(ld_b_abs, 0, 0, 9),               # 0: A = protocol
        _insn(jeq_k, 0, 5, IPPROTO_TCP),        # 1: TCP? else drop (7)
        _insn(ld_h_abs, 0, 0, 6),               # 2: A = flags + fragment offset
        _insn(jset_k, 3, 0, 0x1FFF),            # 3: a fragment? drop (7)
        _insn(ldx_msh, 0, 0, 0),                # 4: X = IPv4 header length
        _insn(ld_b_ind, 0, 0, 13),              # 5: A = TCP flags
        _insn(jset_k, 1, 0, SYN | RST),         # 6: SYN or RST? keep (8)
        _insn(ret_k, 0, 0, 0),                  # 7: drop
        _insn(ret_k, 0, 0, SNAPLEN),            # 8: keep SNAPLEN bytes
    ])


@dataclass(frozen=True)
class Refusal:
    """One refused connect: the client's SYN to a watched listen address and the RST that answered
    it, with their capture times (seconds on the caller's clock)."""

    listen: Endpoint
    client: Endpoint
    syn_t: float
    rst_t: float


class RefusalTracker:
    """Turns the SYN / SYN+ACK / RST segments of the watched listen addresses into :class:`Refusal` s.

    ``listen``: the watched ``(host, port)`` pairs (host ``0.0.0.0`` watches the port on every
    address). At most ``max_pending`` unanswered SYNs are remembered, each for ``expire`` seconds
    (a SYN to a black hole behind a listening proxy is answered by SYN+ACK, so few stay pending)."""

    def __init__(self, listen: set[Endpoint], max_pending: int = 4096, expire: float = 60.0) -> None:
        self._ports = {port for _, port in listen}
        self._listen = set(listen)
        self._pending: dict[tuple[Endpoint, Endpoint], tuple[float, int]] = {}
        #: (client, listen) -> the SYN time of a connect the listener answered with SYN+ACK (accepted
        #: by the kernel), the last ``max_pending`` of them, for :meth:`syn_time`
        self._established: dict[tuple[Endpoint, Endpoint], float] = {}
        self.max_pending = max_pending
        self.expire = expire

    def watch(self, ep: Endpoint) -> None:
        """Watch one more listen address from now on (a node added to a running topology). The sets
        are replaced, not changed, so a reader thread feeding segments meanwhile sees either."""
        self._listen = self._listen | {ep}
        self._ports = {port for _, port in self._listen}

    def unwatch(self, ep: Endpoint) -> None:
        """Stop watching a listen address (a node removed); its pending SYNs are forgotten."""
        self._listen = self._listen - {ep}
        self._ports = {port for _, port in self._listen}
        self._pending = {k: v for k, v in self._pending.items() if k[1] != ep}

    def _watched(self, ep: Endpoint) -> bool:
        return ep[1] in self._ports and (ep in self._listen or ("0.0.0.0", ep[1]) in self._listen)

    def feed(self, seg: Segment, t: float) -> Refusal | None:
        """Account for one segment seen at ``t``; the refusal it completes, if any."""
        if seg.is_syn and self._watched(seg.dst):
            key = (seg.src, seg.dst)
            known = self._pending.get(key)
            if known is None or known[1] != seg.seq:  # a retransmitted SYN keeps its first time
                self._pending[key] = (t, seg.seq)
                self._trim(t)
            return None
        if not self._watched(seg.src):
            return None
        key = (seg.dst, seg.src)
        if seg.is_syn_ack:
            known = self._pending.pop(key, None)
            if known is not None:
                self._established[key] = known[0]
                if len(self._established) > self.max_pending:  # oldest first (insertion order)
                    del self._established[next(iter(self._established))]
            return None
        if seg.is_rst and seg.flags & ACK:
            known = self._pending.get(key)
            if known is not None and seg.ack == (known[1] + 1) & 0xFFFFFFFF:
                del self._pending[key]
                return Refusal(listen=seg.src, client=seg.dst, syn_t=known[0], rst_t=t)
        return None

    def syn_time(self, client: Endpoint, listen: Endpoint) -> float | None:
        """The time of the SYN of the accepted connect from ``client`` to ``listen`` (the moment the
        client's connect reached the listener, kernel-stamped), or None when none was seen."""
        return self._established.get((client, listen)) or self._established.get((client, ("0.0.0.0", listen[1])))

    def _trim(self, now: float) -> None:
        if len(self._pending) <= self.max_pending:
            return
        for key, (t, _) in list(self._pending.items()):
            if now - t > self.expire or len(self._pending) > self.max_pending:
                del self._pending[key]

    @property
    def pending(self) -> int:
        """How many SYNs are waiting for an answer."""
        return len(self._pending)
