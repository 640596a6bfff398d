"""MIR-1 … MIR-13 - the SQL Server database mirroring client rules (RULEBOOK, seeds 000/001).

Pure checkers ``check_mir_N(events, **params) -> Verdict``; no I/O. See ``docs/mirroring.md``.
:mod:`~harness.rules.mirroring.model` holds the attempt model (opens, attempts, rounds, outcomes),
:mod:`~harness.rules.mirroring.checks` the checkers. Importing the package registers the checkers
with :mod:`harness.rules.registry`; the names below are the registry's recording wrappers (verdicts
carry the parameters they were judged with).
"""

from __future__ import annotations

from harness.rules.mirroring.checks import (
    check_mir_1,
    check_mir_2,
    check_mir_3,
    check_mir_4,
    check_mir_5,
    check_mir_6,
    check_mir_7,
    check_mir_8,
    check_mir_9,
    check_mir_10,
    check_mir_11,
    check_mir_12,
    check_mir_13,
)
from harness.rules.mirroring.model import (
    DEFAULT_DELAYS,
    DEFAULT_FAST_RESET,
    DEFAULT_TOLERANCE,
    END_TYPES,
    FAST_OUTCOMES,
    MATCH_SLACK,
    MAX_TOLERANCE,
    RETRY_FRACTION,
    SHUTDOWN_FAULTS,
    Attempt,
    Open,
    PartnerNames,
    retry_delay,
    retry_time,
)
from harness.rules.registry import Checker, register

__all__ = [
    "CHECKERS",
    "DEFAULT_DELAYS",
    "DEFAULT_FAST_RESET",
    "DEFAULT_TOLERANCE",
    "END_TYPES",
    "FAST_OUTCOMES",
    "MATCH_SLACK",
    "MAX_TOLERANCE",
    "RETRY_FRACTION",
    "SHUTDOWN_FAULTS",
    "Attempt",
    "Open",
    "PartnerNames",
    "check_mir_1",
    "check_mir_2",
    "check_mir_3",
    "check_mir_4",
    "check_mir_5",
    "check_mir_6",
    "check_mir_7",
    "check_mir_8",
    "check_mir_9",
    "check_mir_10",
    "check_mir_11",
    "check_mir_12",
    "check_mir_13",
    "retry_delay",
    "retry_time",
]

CHECKERS: dict[str, Checker] = {
    "MIR-1": check_mir_1,
    "MIR-2": check_mir_2,
    "MIR-3": check_mir_3,
    "MIR-4": check_mir_4,
    "MIR-5": check_mir_5,
    "MIR-6": check_mir_6,
    "MIR-7": check_mir_7,
    "MIR-8": check_mir_8,
    "MIR-9": check_mir_9,
    "MIR-10": check_mir_10,
    "MIR-11": check_mir_11,
    "MIR-12": check_mir_12,
    "MIR-13": check_mir_13,
}


def _register() -> None:
    """Register MIR-1 … MIR-13; the package's names become the recording wrappers."""
    for rule_id, fn in list(CHECKERS.items()):
        globals()[fn.__name__] = CHECKERS[rule_id] = register(rule_id, fn).checker


_register()
