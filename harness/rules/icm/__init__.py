"""ICM-1 … ICM-7 - Domino Internet Cluster Manager server selection (RULEBOOK, seed 004).

Pure checkers ``check_icm_N(events, **params) -> Verdict``; no I/O. See ``docs/icm.md``.
:mod:`~harness.rules.icm.model` folds a history into requests and the cluster state each found,
:mod:`~harness.rules.icm.checks` holds the checkers. Importing the package registers them with
:mod:`harness.rules.registry`; the names below are the registry's recording wrappers."""

from __future__ import annotations

from harness.rules.icm.checks import (
    DEFAULT_PROBE_WINDOW,
    check_icm_1,
    check_icm_2,
    check_icm_3,
    check_icm_4,
    check_icm_5,
    check_icm_6,
    check_icm_7,
)
from harness.rules.icm.model import TIE_BREAKS, Expectation, Request, ServerState, build, expectation, lightest
from harness.rules.registry import Checker, register

__all__ = [
    "CHECKERS", "DEFAULT_PROBE_WINDOW", "TIE_BREAKS", "Expectation", "Request", "ServerState", "build",
    "check_icm_1", "check_icm_2", "check_icm_3", "check_icm_4", "check_icm_5", "check_icm_6", "check_icm_7",
    "expectation", "lightest",
]

CHECKERS: dict[str, Checker] = {
    "ICM-1": check_icm_1,
    "ICM-2": check_icm_2,
    "ICM-3": check_icm_3,
    "ICM-4": check_icm_4,
    "ICM-5": check_icm_5,
    "ICM-6": check_icm_6,
    "ICM-7": check_icm_7,
}


def _register() -> None:
    """Register ICM-1 … ICM-7; the package's names become the recording wrappers."""
    for rule_id, fn in list(CHECKERS.items()):
        globals()[fn.__name__] = CHECKERS[rule_id] = register(rule_id, fn).checker


_register()
