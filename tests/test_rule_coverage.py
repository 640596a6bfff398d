"""Every rule of a built profile is judged where a wrong client would break it: a suite test judges
it (its ``rule`` marker, docs/rule-coverage.md) and a checker test feeds its checker a history that
breaks it; the page of rule x suite-test tables is the one the suites generate now."""

from __future__ import annotations

from harness.rules import registry
from scripts.rule_tables import DOC, breaking_tests, profile_rows, render, suite_tests


def test_every_rule_is_judged_by_a_suite_test() -> None:
    cited = {r for t in suite_tests() for r in t.rules}
    missing = [r for _, _, rules, _ in profile_rows() for r in rules if r not in cited]
    assert not missing, f"rules no suite test judges: {missing}"


def test_every_rule_has_a_checker_test_with_a_breaking_history() -> None:
    found = breaking_tests()
    missing = [r for r in registry.all_rules() if not found.get(r)]
    assert not missing, f"rules whose checker no test makes fail: {missing}"


def test_every_cited_rule_is_registered() -> None:
    known = set(registry.all_rules())
    unknown = sorted({(t.label, r) for t in suite_tests() for r in t.rules if r not in known})
    assert not unknown, f"suite tests cite rules with no checker: {unknown}"


def test_the_rule_coverage_page_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), \
        "docs/rule-coverage.md is stale: run python -m scripts.rule_tables --write"
