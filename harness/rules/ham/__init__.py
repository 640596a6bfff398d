"""HAM-1 … HAM-6 - Patroni's documented promises (RULEBOOK HAM, docs/rules.md), checked on the
servers' own view and the REST API's answers (:mod:`harness.rules.ham.model`). Importing the
package registers the checkers."""

from __future__ import annotations

from harness.rules.ham.checks import (
    check_ham_1,
    check_ham_2,
    check_ham_3,
    check_ham_4,
    check_ham_5,
    check_ham_6,
)
from harness.rules.registry import Checker, register

__all__ = ["CHECKERS", "check_ham_1", "check_ham_2", "check_ham_3", "check_ham_4", "check_ham_5", "check_ham_6"]

CHECKERS: dict[str, Checker] = {
    "HAM-1": check_ham_1,
    "HAM-2": check_ham_2,
    "HAM-3": check_ham_3,
    "HAM-4": check_ham_4,
    "HAM-5": check_ham_5,
    "HAM-6": check_ham_6,
}


def _register() -> None:
    """Register HAM-1 … HAM-6; the package's names become the recording wrappers."""
    for rule_id, fn in list(CHECKERS.items()):
        globals()[fn.__name__] = CHECKERS[rule_id] = register(rule_id, fn).checker


_register()
