"""Faults (Jepsen's *nemesis*): the fault vocabulary over a topology and its fault proxy
(:class:`Faults`), and the coordination hooks through which a switchover tells a pooler or proxy
to drain and resume (:mod:`harness.faults.coordination`)."""

from harness.faults.coordination import CoordinationError, SwitchoverCoordinator
from harness.faults.vocabulary import Completed, Faults, ScheduledFault, Scoped

__all__ = ["Completed", "CoordinationError", "Faults", "ScheduledFault", "Scoped", "SwitchoverCoordinator"]
