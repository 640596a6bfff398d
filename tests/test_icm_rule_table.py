"""The ICM suites' rule markers: every suite test's ``@pytest.mark.rule(...)`` names exactly the rules
its checker calls judge (each checker's rule ID read from its ``@rule("ICM-N")`` decorator), and the
rule × test table of docs/icm.md shows the same (read from the sources, nothing imported or run)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITES = ROOT / "suites" / "icm"
TABLE = re.compile(r"<!-- rule-table:icm -->(.*?)<!-- /rule-table:icm -->", re.S)


def _marker_rules(fn: ast.FunctionDef) -> set[str] | None:
    for dec in fn.decorator_list:
        if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and dec.func.attr == "rule"
                and isinstance(dec.func.value, ast.Attribute) and dec.func.value.attr == "mark"):
            return {a.value for a in dec.args if isinstance(a, ast.Constant)}
    return None


def _checker_rules() -> dict[str, str]:
    """Checker name -> rule ID, from the ``@rule("ICM-N")`` decorators of harness/rules/icm/checks.py."""
    tree = ast.parse((ROOT / "harness" / "rules" / "icm" / "checks.py").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Name) and dec.func.id == "rule"
                        and isinstance(dec.args[0], ast.Constant)):
                    out[node.name] = dec.args[0].value
    return out


CHECKER_RULES = _checker_rules()


def _judged_rules(fn: ast.FunctionDef) -> set[str]:
    names = {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {CHECKER_RULES[name] for name in names if name in CHECKER_RULES}


def test_every_icm_checker_is_registered_under_its_rule_id() -> None:
    assert sorted(CHECKER_RULES.values()) == sorted(f"ICM-{i}" for i in range(1, 8))


def _suite_tests() -> dict[str, ast.FunctionDef]:
    tests = {}
    for path in sorted(SUITES.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                tests[node.name] = node
    return tests


def test_every_icm_suite_test_marks_exactly_the_rules_it_judges() -> None:
    tests = _suite_tests()
    assert len(tests) >= 10
    for name, fn in tests.items():
        marked, judged = _marker_rules(fn), _judged_rules(fn)
        assert marked is not None, f"{name} has no @pytest.mark.rule"
        assert judged, f"{name} judges no ICM rule"
        assert marked == judged, f"{name}: marked {sorted(marked)}, judged {sorted(judged)}"


def test_the_docs_rule_table_shows_the_markers() -> None:
    text = TABLE.search((ROOT / "docs" / "icm.md").read_text())
    assert text is not None, "docs/icm.md has no rule-table:icm section"
    rows = [line for line in text.group(1).splitlines() if line.startswith("| `test_")]
    tests = _suite_tests()
    shown: dict[str, set[str]] = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        name = cells[0].strip("`").split("[")[0]
        rules = {f"ICM-{i}" for i, cell in enumerate(cells[1:], start=1) if cell == "✔"}
        assert shown.setdefault(name, rules) == rules, f"{name}: its parametrized rows differ"
        assert all(cell == "✔" or re.fullmatch(r"[A-Z]", cell) for cell in cells[1:]), row
    assert set(shown) == set(tests)
    for name, fn in tests.items():
        assert shown[name] == _marker_rules(fn), name
