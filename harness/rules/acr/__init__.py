"""ACR-1 … ACR-9 - DB2 automatic client reroute (RULEBOOK, seed 003).

Pure checkers ``checker(events, **params) -> Verdict``, each named by what it checks and registered
under its rule ID (``CHECKERS["ACR-2"] is check_seamless_statement_replay``); no I/O. See
``docs/acr.md``. :mod:`~harness.rules.acr.model` reads the history (operations, transports seen by the
fault proxy and the refused-connect capture, member faults, published member lists, the server's
statements per session); :mod:`~harness.rules.acr.checks` holds the checkers,
:mod:`~harness.rules.acr.judging` the steps they share and their parameters (:func:`params`,
:func:`judge`). Importing the package registers them with :mod:`harness.rules.registry`; the names
below are the registry's recording wrappers."""

from __future__ import annotations

from harness.rules.acr.checks import (
    check_commit_after_fetch_fails_over,
    check_group_address_tried_last,
    check_later_failure_rolls_back,
    check_no_transport_before_first_statement,
    check_reason_codes,
    check_reroute_by_server_list,
    check_seamless_statement_replay,
    check_timeout_failure_codes,
    check_unreusable_transport_error,
)
from harness.rules.acr.judging import MODES, judge, params
from harness.rules.acr.model import Model, build
from harness.rules.registry import Checker, family_checkers

#: Rule ID -> the registered checker (ACR-1 … ACR-9, in RULEBOOK order).
CHECKERS: dict[str, Checker] = family_checkers("ACR")

__all__ = [
    "CHECKERS", "MODES", "Model", "build", "judge", "params", "check_reroute_by_server_list",
    "check_seamless_statement_replay", "check_later_failure_rolls_back", "check_unreusable_transport_error",
    "check_commit_after_fetch_fails_over", "check_group_address_tried_last",
    "check_no_transport_before_first_statement", "check_reason_codes", "check_timeout_failure_codes",
]
