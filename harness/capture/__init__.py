"""Observation the fault proxy cannot make: refused connects seen from outside (OBS-1).

A partition ``how=refuse`` disables a proxy's listener, so the kernel answers the client's SYN with
an RST and no proxy records anything. :class:`RefusedConnectCapture` watches the loopback interface
for exactly those SYN → RST exchanges at a run's listen addresses and reports each as a
``conn.refused`` observation on the history's monotonic clock (docs/events.md). It needs Linux and
root; elsewhere :meth:`~RefusedConnectCapture.start` raises
:class:`~harness.errors.CaptureUnavailable` and the topology records that the observation is
missing, so the rules that need it answer *unknown*.

Uses nothing of the harness but :mod:`harness.errors`."""

from harness.capture.refused import CaptureTarget, Observation, RefusedConnectCapture, clock_offset
from harness.capture.tcp import Refusal, RefusalTracker, Segment, parse_ipv4_tcp, syn_or_rst_filter

__all__ = [
    "CaptureTarget", "Observation", "RefusalTracker", "Refusal", "RefusedConnectCapture", "Segment", "clock_offset",
    "parse_ipv4_tcp", "syn_or_rst_filter",
]
