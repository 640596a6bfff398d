"""Faults (Jepsen's *nemesis*): the vocabulary over topology + fault proxy, and the wiring that puts
a proxy in front of every address."""

from harness.faults.vocabulary import Faults, ScheduledFault

__all__ = ["Faults", "ScheduledFault"]
