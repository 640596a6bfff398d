"""HAM-1 … HAM-7 - Patroni's and pg_auto_failover's documented promises (RULEBOOK HAM, docs/rules.md),
checked on the servers' own view and the manager's (:mod:`harness.rules.ham.model`). Pure checkers
``checker(events, **params) -> Verdict``, each named by what it checks and registered under its rule
ID (``CHECKERS["HAM-1"] is check_one_writer_at_a_time``). Importing the package registers them with
:mod:`harness.rules.registry`; the names below are the registry's recording wrappers."""

from __future__ import annotations

from harness.rules.ham.checks import (
    check_dcs_loss_demotion_window,
    check_failover_within_bound,
    check_former_leader_rejoins_new_timeline,
    check_health_endpoints_agree_with_servers,
    check_monitor_loss_alone_keeps_the_primary,
    check_one_writer_at_a_time,
    check_sync_mode_keeps_acknowledged_commits,
)
from harness.rules.registry import Checker, family_checkers

#: Rule ID -> the registered checker (HAM-1 … HAM-7, in RULEBOOK order).
CHECKERS: dict[str, Checker] = family_checkers("HAM")

__all__ = [
    "CHECKERS", "check_one_writer_at_a_time", "check_dcs_loss_demotion_window", "check_failover_within_bound",
    "check_sync_mode_keeps_acknowledged_commits", "check_health_endpoints_agree_with_servers",
    "check_former_leader_rejoins_new_timeline", "check_monitor_loss_alone_keeps_the_primary",
]
