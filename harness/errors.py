"""The two kinds of failure the harness reports, kept apart on purpose (RULEBOOK OBS-1).

* A client breaking a documented rule is a :class:`RuleViolation` - an ``AssertionError`` whose
  message starts with the rule ID (Allure: *failed*).
* The harness itself failing (a node that did not start, a proxy that did not answer, bad input)
  is a :class:`HarnessError` (Allure: *broken*). It never derives from ``AssertionError``.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every failure of the harness itself (never a rule violation, OBS-1)."""


class ConfigError(HarnessError, ValueError):
    """Bad input from a user or a caller: the message names what is wrong and how to fix it."""


class MissingDependencyError(HarnessError):
    """A binary or package the harness needs is not installed; the message says how to get it."""


class TopologyError(HarnessError):
    """A database node or topology failed to do what was asked (start, stop, promote, replicate)."""


class NodeStartError(TopologyError):
    """A database server did not come up; the message carries the tail of its log."""


class InvalidOperation(TopologyError):
    """A role operation that makes no sense in the current state (the message names the state)."""


class UnknownNodeError(InvalidOperation, KeyError):
    """A node name that the topology does not have."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown node"


class ProxyError(HarnessError):
    """The fault proxy (Toxiproxy or the embedded server) failed or answered with an error."""


class RuleViolation(AssertionError):
    """A client broke a documented rule. ``str()`` starts with the rule ID (e.g. ``MIR-5: ...``)."""

    def __init__(self, rule_id: str, message: str) -> None:
        self.rule_id = rule_id
        super().__init__(f"{rule_id}: {message}")
