"""docs/matrix-ham.md (harness/report/ham_matrix.py, scripts/ham_matrix.py): the document is the
rendering of the committed result files; rows of a second manager (pg_auto_failover) need no code;
the p95 is set beside the documented bound; a malformed result file is one line naming it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError
from harness.report.ham_matrix import from_durability_output, load_results, render, validate

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "ham"


def result(manager: str, status: str = "kept", p95: float = 21.9, bound_s: float | None = 22) -> dict[str, Any]:
    return {"manager": manager, "source": f"bench-{manager}", "measured": "here",
            "matrix": {"rows": [{"fault": "machine loss", "rule": "DUR-1", "status": status, "observed": "a|b"}],
                       "timings": [{"fault": "machine loss", "what": "fault -> write", "runs": 10, "median": 20.91,
                                    "p95": p95, "bound_s": bound_s, "bound": "ttl + loop_wait"}]}}


def test_document_is_the_rendering_of_the_committed_results() -> None:
    doc = (ROOT / "docs" / "matrix-ham.md").read_text()
    assert render(load_results(RESULTS.glob("*.json"))) == doc, "docs/matrix-ham.md is stale: run scripts/ham_matrix.py"


def test_a_second_manager_is_rows_of_its_own() -> None:
    text = render([result("pg_auto_failover", "violated", p95=30.0), result("patroni")])
    verdicts = [line for line in text.splitlines() if line.startswith("| p")]
    assert verdicts[0].startswith("| patroni | machine loss | DUR-1 | **kept**")
    assert verdicts[1].startswith("| pg_auto_failover | machine loss | DUR-1 | **violated**")
    assert "a\\|b" in text  # a cell's pipe does not break the table
    timings = [line for line in text.splitlines() if "| 10 |" in line]
    assert timings[0].startswith("| patroni") and timings[0].endswith("| yes |")
    assert timings[1].startswith("| pg_auto_failover") and timings[1].endswith("| no |")


def test_no_documented_bound_is_a_dash_not_a_verdict() -> None:
    line = next(s for s in render([result("patroni", bound_s=None)]).splitlines() if "| 10 |" in s)
    assert line.endswith("| - |")


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.pop("manager"), "missing manager"),
    (lambda r: r["matrix"]["rows"][0].update(status="passed"), "rows[0].status is 'passed'"),
    (lambda r: r["matrix"]["timings"][0].update(p95="fast"), "timings[0].p95 is not a number"),
    (lambda r: r["matrix"]["timings"][0].pop("bound"), "timings[0]: missing bound"),
    (lambda r: r.update(matrix=[]), "matrix: expected an object"),
])
def test_malformed_result_is_one_line_naming_it(change: Any, message: str) -> None:
    r = result("patroni")
    change(r)
    with pytest.raises(ConfigError) as info:
        validate(r, "x.json")
    assert str(info.value).startswith("x.json") and message in str(info.value) and "\n" not in str(info.value)


def test_unreadable_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json: not a readable JSON result file"):
        load_results(tmp_path.glob("*.json"))


def durability_output(mode: str = "sync") -> dict[str, Any]:
    return {"manager": "patroni", "benchmark": "patroni_durability", "mode": mode, "rounds": 4,
            "plan": ["kill", "switchover", "kill", "failover"],
            "timing": {"ttl": 20, "loop_wait": 2, "retry_timeout": 3, "synchronous_mode": mode == "sync"},
            "acknowledged": 100, "seconds": 80, "load_before": [4.0], "load_after": [5.0],
            "failover_s": {"kill": {"runs": 2, "median": 20.1, "p95": 21.0},
                           "switchover": {"runs": 1, "median": 4.5, "p95": 4.5}, "failover": {"runs": 0}},
            "verdicts": [{"rule_id": "DUR-1", "status": "kept", "observed": "all 100", "details": {}},
                         {"rule_id": "DUR-1", "status": "kept", "observed": "3 lost",
                          "details": {"allowance_writes": 5}},
                         {"rule_id": "HAM-3", "status": "unknown", "observed": "no kill", "details": {}}]}


def test_durability_output_becomes_rows_and_timings(tmp_path: Path) -> None:
    m = from_durability_output(durability_output("async"))
    assert [r["rule"] for r in m["rows"]] == ["DUR-1", "DUR-1 (async bound)", "HAM-3"]
    assert "2 machine losses, 1 switchovers, 1 manual failovers" in m["rows"][0]["fault"]
    kill = next(t for t in m["timings"] if t["fault"].startswith("leader's machine lost"))
    assert kill["bound_s"] == 22 and next(t for t in m["timings"] if "switchover" in t["fault"])["bound_s"] is None
    assert len(m["timings"]) == 2  # an op with no runs has no timing row
    (tmp_path / "raw.json").write_text(json.dumps(durability_output()))
    loaded = load_results(tmp_path.glob("*.json"))
    assert loaded[0]["source"].startswith("benchmarks/patroni_durability.py --mode sync")
    assert "load average 4.0 -> 5.0" in loaded[0]["measured"]


def test_script_refuses_a_missing_folder(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "ham_matrix.py"), "--print", "--results",
                          str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no results folder" in out.stderr


def test_suite_histories_become_rows_per_verdict() -> None:
    from harness.report.ham_matrix import from_suite_histories

    verdict = {"rule_id": "HAM-1", "status": "kept", "observed": "x" * 500}
    metas = [{"test": "suites/ham/test_ham_patroni.py::test_switchover_through_patroni", "patroni": {},
              "verdicts": [verdict]},
             {"test": "suites/lpq/test_lpq_group.py::test_group[x]", "managed": {"manager": "patroni",
                                                                                "topology": "patroni-group3"},
              "verdicts": [{"rule_id": "LPQ-1", "status": "violated", "observed": "n2 first"}]},
             {"test": "suites/lpq/test_lpq_group.py::test_plain", "verdicts": [verdict]}]
    r = from_suite_histories(metas, "run", "here")
    assert r["manager"] == "patroni" and validate(r, "x") is r
    assert [(row["fault"], row["rule"], row["status"]) for row in r["matrix"]["rows"]] == [
        ("switchover through patroni", "HAM-1", "kept"),
        ("group (client suite on patroni-group3)", "LPQ-1", "violated")]
    assert r["matrix"]["rows"][0]["observed"].endswith(" …") and len(r["matrix"]["rows"][0]["observed"]) < 260


def test_scenarios_of_one_rule_are_one_cell_the_worst_deciding() -> None:
    from harness.report.ham_matrix import from_suite_histories

    meta = {"test": "t::test_x", "patroni": {}, "verdicts": [
        {"rule_id": "LPQ-1", "status": "kept", "observed": "a"},
        {"rule_id": "LPQ-1", "status": "unknown", "observed": "b"},
        {"rule_id": "LPQ-1", "status": "violated", "observed": "c"},
        {"rule_id": "LPQ-2", "status": "kept", "observed": "d"}]}
    rows = from_suite_histories([meta], "run", "here")["matrix"]["rows"]
    assert rows == [{"fault": "x", "rule": "LPQ-1", "status": "violated",
                     "observed": "3 scenarios: 1 kept, 1 violated, 1 unknown; c"},
                    {"fault": "x", "rule": "LPQ-2", "status": "kept", "observed": "d"}]


def test_suite_histories_of_no_or_several_managers_are_refused() -> None:
    from harness.report.ham_matrix import from_suite_histories

    with pytest.raises(ConfigError, match="no history of a manager"):
        from_suite_histories([{"test": "t", "verdicts": []}], "run", "here")
    with pytest.raises(ConfigError, match="several managers"):
        from_suite_histories([{"patroni": {}}, {"managed": {"manager": "pg_auto_failover"}}], "run", "here")


def test_p95_past_the_bound_but_within_the_rules_tolerance_says_so() -> None:
    r = result("patroni", p95=23.15)
    r["matrix"]["timings"][0]["tolerance_s"] = 5
    line = next(s for s in render([r]).splitlines() if "| 10 |" in s)
    assert line.endswith("| no (within the rule's +5 s) |")
    r["matrix"]["timings"][0]["p95"] = 27.5
    line = next(s for s in render([r]).splitlines() if "| 10 |" in s)
    assert line.endswith("| no |")


def test_pg_auto_failover_suite_histories_are_that_managers_rows() -> None:
    """The pgaf fixture of suites/ham records ``meta["pg_auto_failover"]``: its rows are pg_auto_failover's."""
    from harness.report.ham_matrix import from_suite_histories

    meta = {"test": "suites/ham/test_ham_pgaf.py::test_switchover_through_the_monitor", "pg_auto_failover": {},
            "verdicts": [{"rule_id": "HAM-1", "status": "kept", "observed": "one writer"}]}
    r = from_suite_histories([meta], "run", "here")
    assert r["manager"] == "pg_auto_failover"
    assert r["matrix"]["rows"] == [{"fault": "switchover through the monitor", "rule": "HAM-1", "status": "kept",
                                    "observed": "one writer"}]
    with pytest.raises(ConfigError, match="several managers"):
        from_suite_histories([meta, {"patroni": {}, "test": "t", "verdicts": []}], "run", "here")
