"""ACR-1 … ACR-9 - DB2 automatic client reroute (RULEBOOK, seed 003).

Pure checkers ``check_acr_N(events, **params) -> Verdict``; no I/O. See ``docs/acr.md``.
:mod:`~harness.rules.acr.model` reads the history (operations, transports seen by the fault proxy
and the refused-connect capture, member faults, published member lists, the server's statements per
session); :mod:`~harness.rules.acr.checks` holds the checkers, :mod:`~harness.rules.acr.judging` the
steps they share. Importing the package registers them with :mod:`harness.rules.registry`; the names
below are the registry's recording wrappers."""

from __future__ import annotations

from harness.rules.acr.checks import (
    check_acr_1,
    check_acr_2,
    check_acr_3,
    check_acr_4,
    check_acr_5,
    check_acr_6,
    check_acr_7,
    check_acr_8,
    check_acr_9,
)
from harness.rules.acr.judging import MODES
from harness.rules.acr.model import Model, build
from harness.rules.registry import Checker, register

CHECKERS: dict[str, Checker] = {
    "ACR-1": check_acr_1,
    "ACR-2": check_acr_2,
    "ACR-3": check_acr_3,
    "ACR-4": check_acr_4,
    "ACR-5": check_acr_5,
    "ACR-6": check_acr_6,
    "ACR-7": check_acr_7,
    "ACR-8": check_acr_8,
    "ACR-9": check_acr_9,
}


def _register() -> None:
    """Register ACR-1 … ACR-9; the package's names become the recording wrappers."""
    for rule_id, fn in list(CHECKERS.items()):
        globals()[fn.__name__] = CHECKERS[rule_id] = register(rule_id, fn).checker


_register()

__all__ = ["CHECKERS", "MODES", "Model", "build", "check_acr_1", "check_acr_2", "check_acr_3", "check_acr_4",
           "check_acr_5", "check_acr_6", "check_acr_7", "check_acr_8", "check_acr_9"]
