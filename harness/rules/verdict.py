"""Verdicts and how a test asserts them.

A checker returns ``Verdict(rule_id, valid, evidence, expected, observed)`` with ``valid`` one of
``True``, ``False`` or ``"unknown"``. :func:`assert_verdict` turns ``False`` into a
:class:`~harness.errors.RuleViolation` (an AssertionError whose message starts with the rule ID and
states expected vs observed) and ``"unknown"`` into :class:`VerdictUnknown` - never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.errors import RuleViolation, VerdictUnknown

UNKNOWN: Literal["unknown"] = "unknown"
Validity = bool | Literal["unknown"]


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one rule on one history.

    ``evidence`` lists the indices of the history events that decide the verdict; ``expected`` and
    ``observed`` are one-line human statements; ``details`` is free-form data for reports."""

    rule_id: str
    valid: Validity
    expected: str = ""
    observed: str = ""
    evidence: tuple[int, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.valid not in (True, False, UNKNOWN):
            raise ValueError(f"Verdict.valid must be True, False or 'unknown', not {self.valid!r}")
        object.__setattr__(self, "evidence", tuple(self.evidence))

    @property
    def status(self) -> str:
        """``kept``, ``violated`` or ``unknown`` (the words of the conformance matrix)."""
        if self.valid is True:
            return "kept"
        if self.valid is False:
            return "violated"
        return "unknown"

    @property
    def summary(self) -> str:
        """One line: rule ID, status, expected vs observed."""
        text = f"{self.rule_id} {self.status}"
        if self.expected or self.observed:
            text += f": expected {self.expected or '-'}; observed {self.observed or '-'}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (used by reports and the matrix)."""
        return {"rule_id": self.rule_id, "valid": self.valid, "status": self.status,
                "expected": self.expected, "observed": self.observed,
                "evidence": list(self.evidence), "details": self.details}


Count = int | Sized
Text = str | Callable[[], str]
Evidence = Iterable[int] | Callable[[], Iterable[int]]


def _count(value: Count) -> int:
    return value if isinstance(value, int) else len(value)


def tally(judged: Count, violations: Count = 0) -> Validity:
    """The tally every checker family ends with: any violation -> ``False``; nothing judged ->
    ``"unknown"`` (a rule the history never exercised is neither kept nor violated); else ``True``.

    ``judged`` and ``violations`` are counts or collections (their length counts). A checker counts
    a violation only among the cases it judged, so a violation decides even beside unjudged cases."""
    if _count(violations):
        return False
    if not _count(judged):
        return UNKNOWN
    return True


def _text(value: Text) -> str:
    return value() if callable(value) else value


def _evidence(value: Evidence) -> Iterable[int]:
    return value() if callable(value) else value


def tallied(rule_id: str, expected: str, *, judged: Count, violations: Count = 0, kept: Text,
            unknown: Text, violated: Text = "", evidence: Evidence = (), unknown_evidence: Evidence = (),
            violated_evidence: Evidence = (), details: Mapping[str, Any] | None = None) -> Verdict:
    """The verdict of :func:`tally` with the observation and evidence of its outcome: ``kept`` /
    ``evidence`` when kept, ``unknown`` / ``unknown_evidence`` when nothing was judged, ``violated``
    / ``violated_evidence`` on a violation. A text or evidence given as a callable is only computed
    for its own outcome (it may read the first violation or the last judged case)."""
    valid = tally(judged, violations)
    if valid is True:
        observed, ev = _text(kept), _evidence(evidence)
    elif valid is False:
        observed, ev = _text(violated), _evidence(violated_evidence)
    else:
        observed, ev = _text(unknown), _evidence(unknown_evidence)
    return Verdict(rule_id, valid, expected=expected, observed=observed, evidence=tuple(ev),
                   details=dict(details or {}))


def assert_verdict(verdict: Verdict) -> Verdict:
    """Pass a kept verdict through; raise RuleViolation for a violated one, VerdictUnknown otherwise."""
    if verdict.valid is True:
        return verdict
    if verdict.valid is False:
        evidence = f" (evidence: events {', '.join(map(str, verdict.evidence))})" if verdict.evidence else ""
        raise RuleViolation(verdict.rule_id,
                            f"expected {verdict.expected}; observed {verdict.observed}{evidence}")
    raise VerdictUnknown(verdict)


def assert_verdicts(verdicts: Iterable[Verdict]) -> list[Verdict]:
    """Assert several verdicts; every violation is reported together, the first rule ID leading."""
    verdicts = list(verdicts)
    violated = [v for v in verdicts if v.valid is False]
    if violated:
        lines = [f"{v.rule_id}: expected {v.expected}; observed {v.observed}" for v in violated]
        raise RuleViolation(violated[0].rule_id, "; ".join(lines)[len(violated[0].rule_id) + 2:])
    for v in verdicts:
        assert_verdict(v)
    return verdicts
