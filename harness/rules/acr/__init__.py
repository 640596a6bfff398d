"""ACR-1 … ACR-9 - DB2 automatic client reroute (RULEBOOK, seed 003).

Pure checkers ``check_acr_N(events, **params) -> Verdict``; no I/O. See ``docs/acr.md``.
:mod:`~harness.rules.acr.model` reads the history (operations, transports seen by the fault proxy
and the refused-connect capture, member faults, published member lists, the server's statements per
session); :mod:`~harness.rules.acr.checks` holds the checkers, :mod:`~harness.rules.acr.judging` the
steps they share. Importing the package registers them with :mod:`harness.rules.registry`; the names
below are the registry's recording wrappers."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from harness.history.core import Event
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
from harness.rules.acr.judging import MODES, client_params
from harness.rules.acr.model import Model, build
from harness.rules.registry import Checker, register, rule_params_from_meta
from harness.rules.verdict import Verdict

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


def params(rule_id: str, meta: Mapping[str, Any], process: str = "app") -> dict[str, Any]:
    """The parameters of ``rule_id``'s checker a history records: the client's mode and retry
    schedule (:func:`~harness.rules.acr.judging.client_params`) where the checker takes them, then
    ``meta["rule_params"][rule_id]``. The suites judge with these, and ``failover-harness check``
    re-checks a saved history with the same."""
    takes = inspect.signature(CHECKERS[rule_id]).parameters
    out = {k: v for k, v in client_params(meta, process).items() if k in takes}
    if process != "app" and "process" in takes:
        out["process"] = process
    out.update(rule_params_from_meta(rule_id)(meta))
    return out


def judge(events: list[Event], meta: Mapping[str, Any], *rules: str, process: str = "app") -> list[Verdict]:
    """Each of ``rules`` (``"ACR-2"`` …) judged on ``events`` with the parameters the history's
    ``meta`` records for ``process`` (:func:`params`): what the suites check, and what
    ``failover-harness check`` finds again offline."""
    return [CHECKERS[r](events, **params(r, meta, process)) for r in rules]


def _params_from_meta(rule_id: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    return lambda meta: params(rule_id, meta)


def _register() -> None:
    """Register ACR-1 … ACR-9 (parameters from the history: :func:`params`); the package's names
    become the recording wrappers."""
    for rule_id, fn in list(CHECKERS.items()):
        globals()[fn.__name__] = CHECKERS[rule_id] = register(rule_id, fn, _params_from_meta(rule_id)).checker


_register()

__all__ = ["CHECKERS", "MODES", "Model", "build", "judge", "params", "check_acr_1", "check_acr_2", "check_acr_3",
           "check_acr_4", "check_acr_5", "check_acr_6", "check_acr_7", "check_acr_8", "check_acr_9"]
