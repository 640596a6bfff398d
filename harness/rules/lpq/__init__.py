"""LPQ-1 … LPQ-6 - libpq's documented multi-host rules (RULEBOOK LPQ), the family every PostgreSQL
driver with a host list is measured against. Pure checkers ``checker(events, **params) ->
Verdict``, each named by what it checks and registered under its rule ID
(``CHECKERS["LPQ-1"] is check_hosts_in_order``); :mod:`~harness.rules.lpq.model` holds the
open/attempt model. Importing the package registers the checkers with :mod:`harness.rules.registry`
(the names below become the registry's
recording wrappers). See ``docs/lpq.md``."""

from __future__ import annotations

from harness.rules.lpq.checks import (
    check_auth_failure_stops,
    check_hosts_in_order,
    check_next_host_on_failure,
    check_per_host_timeout,
    check_random_host_order,
    check_session_attributes,
    chi_square,
)
from harness.rules.lpq.model import MIN_CONNECT_TIMEOUT, HostListOpen, acceptable, host_list_opens
from harness.rules.registry import Checker, family_checkers

__all__ = [
    "CHECKERS", "MIN_CONNECT_TIMEOUT", "HostListOpen", "acceptable", "check_hosts_in_order",
    "check_next_host_on_failure",
    "check_per_host_timeout", "check_session_attributes", "check_auth_failure_stops", "check_random_host_order",
    "chi_square", "host_list_opens",
]

#: Rule ID -> the registered checker (LPQ-1 … LPQ-6, in RULEBOOK order).
CHECKERS: dict[str, Checker] = family_checkers("LPQ")
