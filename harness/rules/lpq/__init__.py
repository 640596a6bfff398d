"""LPQ-1 … LPQ-6 - libpq's documented multi-host rules (RULEBOOK LPQ), the family every PostgreSQL
driver with a host list is measured against. Pure checkers ``check_lpq_N(events, **params) ->
Verdict``; :mod:`~harness.rules.lpq.model` holds the open/attempt model. Importing the package
registers the checkers with :mod:`harness.rules.registry` (the names below become the registry's
recording wrappers). See ``docs/lpq.md``."""

from __future__ import annotations

from harness.rules.lpq.checks import (
    check_lpq_1,
    check_lpq_2,
    check_lpq_3,
    check_lpq_4,
    check_lpq_5,
    check_lpq_6,
    chi_square,
)
from harness.rules.lpq.model import MIN_CONNECT_TIMEOUT, HostListOpen, acceptable, host_list_opens
from harness.rules.registry import Checker, register

__all__ = ["CHECKERS", "MIN_CONNECT_TIMEOUT", "HostListOpen", "acceptable", "check_lpq_1", "check_lpq_2",
           "check_lpq_3", "check_lpq_4", "check_lpq_5", "check_lpq_6", "chi_square", "host_list_opens"]

CHECKERS: dict[str, Checker] = {
    "LPQ-1": check_lpq_1,
    "LPQ-2": check_lpq_2,
    "LPQ-3": check_lpq_3,
    "LPQ-4": check_lpq_4,
    "LPQ-5": check_lpq_5,
    "LPQ-6": check_lpq_6,
}


def _register() -> None:
    """Register LPQ-1 … LPQ-6; the package's names become the recording wrappers."""
    for rule_id, fn in list(CHECKERS.items()):
        globals()[fn.__name__] = CHECKERS[rule_id] = register(rule_id, fn).checker


_register()
