"""ICM-1 … ICM-7 - Domino Internet Cluster Manager server selection (RULEBOOK, seed 004).

Pure checkers ``checker(events, **params) -> Verdict``, each named by what it checks and registered
under its rule ID (``CHECKERS["ICM-5"] is check_least_loaded``); no I/O. See ``docs/icm.md``.
:mod:`~harness.rules.icm.model` folds a history into requests and the cluster state each found,
:mod:`~harness.rules.icm.checks` holds the checkers. Importing the package registers them with
:mod:`harness.rules.registry`; the names below are the registry's recording wrappers."""

from __future__ import annotations

from harness.rules.icm.checks import (
    DEFAULT_PROBE_WINDOW,
    check_candidate_servers,
    check_last_resort,
    check_least_loaded,
    check_no_transparent_failover,
    check_port_probe,
    check_server_availability,
    check_server_exclusions,
)
from harness.rules.icm.model import TIE_BREAKS, Expectation, Request, ServerState, build, expectation, lightest
from harness.rules.registry import Checker, family_checkers

__all__ = [
    "CHECKERS", "DEFAULT_PROBE_WINDOW", "TIE_BREAKS", "Expectation", "Request", "ServerState", "build",
    "check_candidate_servers", "check_server_availability", "check_port_probe", "check_server_exclusions",
    "check_least_loaded", "check_last_resort", "check_no_transparent_failover",
    "expectation", "lightest",
]

#: Rule ID -> the registered checker (ICM-1 … ICM-7, in RULEBOOK order).
CHECKERS: dict[str, Checker] = family_checkers("ICM")
