"""Rule checkers: pure functions ``(history, **parameters) -> Verdict`` citing RULEBOOK IDs.
No I/O here; suites call them and assert the verdicts."""

from harness.rules.verdict import UNKNOWN, Verdict, assert_verdict, assert_verdicts

__all__ = ["UNKNOWN", "Verdict", "assert_verdict", "assert_verdicts"]
