"""MIR-1 … MIR-13 - the SQL Server database mirroring client rules (RULEBOOK, seeds 000/001).

Pure checkers ``checker(events, **params) -> Verdict``, each named by what it checks and registered
under its rule ID (``CHECKERS["MIR-7"] is check_partner_retry_delays``); no I/O. See
``docs/mirroring.md``. :mod:`~harness.rules.mirroring.model` holds the attempt model (opens, attempts,
rounds, outcomes), :mod:`~harness.rules.mirroring.scaffold` the shared parameters and the
:func:`~harness.rules.mirroring.scaffold.mir_rule` decorator, and the checkers are grouped by theme:
:mod:`~harness.rules.mirroring.partners` (MIR-1 … 4, 9, 10), :mod:`~harness.rules.mirroring.timing`
(MIR-5 … 8, 13) and :mod:`~harness.rules.mirroring.connections` (MIR-11, 12). Importing the package
registers the checkers with :mod:`harness.rules.registry`; the names below are the registry's
recording wrappers (verdicts carry the parameters they were judged with).
"""

from __future__ import annotations

from harness.rules.mirroring.connections import check_no_automatic_reconnect, check_redirect_keeps_initial_name
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
from harness.rules.mirroring.partners import (
    check_database_required,
    check_initial_partner_first,
    check_no_failover_partner_no_alternation,
    check_partner_alternation,
    check_partner_cache_update,
    check_stale_failover_partner,
)
from harness.rules.mirroring.timing import (
    check_no_timeout_no_end,
    check_partner_retry_delays,
    check_retry_time_schedule,
    check_shutdown_aborts_attempts,
    check_truncated_last_round,
)
from harness.rules.registry import Checker, family_checkers

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
    "check_database_required",
    "check_initial_partner_first",
    "check_no_automatic_reconnect",
    "check_no_failover_partner_no_alternation",
    "check_no_timeout_no_end",
    "check_partner_alternation",
    "check_partner_cache_update",
    "check_partner_retry_delays",
    "check_redirect_keeps_initial_name",
    "check_retry_time_schedule",
    "check_shutdown_aborts_attempts",
    "check_stale_failover_partner",
    "check_truncated_last_round",
    "retry_delay",
    "retry_time",
]

#: Rule ID -> the registered checker (MIR-1 … MIR-13, in RULEBOOK order).
CHECKERS: dict[str, Checker] = family_checkers("MIR")
