"""failover-harness: brings up primary/mirror database pairs behind a fault proxy, injects faults,
records what a client did and checks it against documented failover rules (see RULEBOOK IDs).

The public API suites and users import (``from harness import Pair, Faults, History, Verdict``):

* topology: :class:`Topology`, :class:`Pair`, :class:`Group`, :class:`Node`, :class:`OperationResult`
* faults: :class:`Faults`
* history: :class:`History`, :class:`Event`
* verdicts: :class:`Verdict`, :data:`UNKNOWN`, :class:`Check` (the ``check`` fixture)
* errors: :class:`RuleViolation`, :class:`HarnessError`, :class:`ConfigError`, :class:`VerdictUnknown`

Names are imported on first use, so ``import harness`` stays cheap for the command line."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Topology": "harness.topology.api", "Pair": "harness.topology.api", "Group": "harness.topology.api",
    "Node": "harness.topology.api", "OperationResult": "harness.topology.api",
    "Faults": "harness.faults.vocabulary",
    "History": "harness.history.core", "Event": "harness.history.core",
    "Verdict": "harness.rules.verdict", "UNKNOWN": "harness.rules.verdict",
    "RuleViolation": "harness.errors", "HarnessError": "harness.errors", "ConfigError": "harness.errors",
    "VerdictUnknown": "harness.errors",
    "Check": "harness.plugin.verdict",
}

__all__ = [
    "UNKNOWN", "Check", "ConfigError", "Event", "Faults", "Group", "HarnessError", "History", "Node",
    "OperationResult", "Pair", "RuleViolation", "Topology", "Verdict", "VerdictUnknown",
]

if TYPE_CHECKING:
    from harness.errors import ConfigError, HarnessError, RuleViolation, VerdictUnknown
    from harness.faults.vocabulary import Faults
    from harness.history.core import Event, History
    from harness.plugin.verdict import Check
    from harness.rules.verdict import UNKNOWN, Verdict
    from harness.topology.api import Group, Node, OperationResult, Pair, Topology


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
