"""PER-1 … PER-10 - PolarProxy persistent connections (RULEBOOK, seed 002).

Pure checkers ``checker(events, **params) -> Verdict``, each named by what it checks and registered
under its rule ID; no I/O. See ``docs/persistent.md``. :mod:`~harness.rules.persistent.model` reads
the history (switchovers, operations per front connection, the cases PER-4 … PER-8 judge, read-only
node removals); :mod:`~harness.rules.persistent.checks` holds the checkers. Importing the package
registers them with :mod:`harness.rules.registry`."""

from __future__ import annotations

from harness.rules.persistent.checks import (
    MAINTENANCE_FAULTS,
    check_cursor_not_kept,
    check_drain_window,
    check_endpoint_support,
    check_keepalive_on_switchover,
    check_open_transaction_not_kept,
    check_partial_result_not_kept,
    check_readonly_node_removal,
    check_recovery_window,
    check_session_state_restored,
    check_temp_tables_not_kept,
)
from harness.rules.persistent.model import (
    DISCONNECTED_ENDPOINTS,
    NETWORK_OR_SERVER_FAULTS,
    PERSISTENT_ENDPOINTS,
    Case,
    OnNode,
    Op,
    Removal,
    Switchover,
    View,
    build_view,
    removals_of,
)
from harness.rules.registry import Checker, family_checkers

#: Rule ID -> the registered checker (PER-1 … PER-10, in RULEBOOK order).
CHECKERS: dict[str, Checker] = family_checkers("PER")

__all__ = [
    "CHECKERS", "DISCONNECTED_ENDPOINTS", "MAINTENANCE_FAULTS", "NETWORK_OR_SERVER_FAULTS", "PERSISTENT_ENDPOINTS",
    "Case", "OnNode", "Op", "Removal", "Switchover", "View", "build_view", "check_cursor_not_kept",
    "check_drain_window", "check_endpoint_support", "check_keepalive_on_switchover",
    "check_open_transaction_not_kept", "check_partial_result_not_kept", "check_readonly_node_removal",
    "check_recovery_window", "check_session_state_restored", "check_temp_tables_not_kept", "removals_of",
]
