"""Every run its own test case (docs/reports.md): one suite test run on two engines and for two
clients into one results folder is three test cases side by side in the report - not one test with
"retries" - and the environment block names every engine, backend and client the results hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.report import allure as fa
from harness.report.builder import build_report, embedded_files

SUITE = '''
import pytest
from harness.rules.verdict import Verdict


@pytest.mark.rule("DUR-1")
def test_one_case(check):
    check(Verdict("DUR-1", True, expected="nothing lost", observed="nothing lost"))
'''

RUNS = [("postgres", "mirroring/reference"), ("mariadb", "mirroring/reference"),
        ("postgres", "mirroring/psycopg-multihost")]


def _run(project: Path, results: Path, engine: str, client: str) -> None:
    env = {**os.environ, "FAILOVER_HARNESS_REPORTS": str(project / "reports")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", str(project / "test_suite.py"),
                           f"--alluredir={results}", f"--engine={engine}", f"--client={client}",
                           "--backend=local", "--rootdir", str(project)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_two_engines_and_two_clients_are_separate_test_cases(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    results = tmp_path / "allure-results"
    for engine, client in RUNS:
        _run(tmp_path, results, engine, client)
    written = [json.loads(p.read_text()) for p in results.glob("*-result.json")]
    assert len(written) == 3
    assert len({r["historyId"] for r in written}) == 3  # three test cases, none a "retry" of another
    params = sorted(tuple(sorted((p["name"], p["value"].strip("'")) for p in r["parameters"])) for r in written)
    assert params[0] == (("backend", "local"), ("client", "mirroring/psycopg-multihost"), ("engine", "postgres"))
    # the environment the runs appended: both engines, both clients
    env = fa.read_environment(results)
    assert env["engine"] == "postgres, mariadb"
    assert env["client"] == "mirroring/reference, mirroring/psycopg-multihost"

    index = build_report(results, tmp_path / "report")
    files = embedded_files(index)
    cases = [json.loads(v) for k, v in files.items() if k.startswith("data/test-cases/")]
    assert len(cases) == 3 and all(not c.get("retriesCount") for c in cases)
    shown = sorted(tuple(sorted((p["name"], p["value"].strip("'")) for p in c["parameters"])) for c in cases)
    assert shown == params
    widget = {e["name"]: e["values"] for e in json.loads(files["widgets/environment.json"])}
    assert widget["engine"] == ["postgres, mariadb"] and widget["backend"] == ["local"]
    summary = json.loads(files["widgets/summary.json"])
    assert summary["statistic"]["total"] == 3 and summary["statistic"]["passed"] == 3


def test_runs_in_results_and_the_environment_merge(tmp_path: Path) -> None:
    assert fa.runs_in_results(tmp_path) == {"engine": [], "backend": [], "client": []}
    merged = fa.merge_environment({"engine": "postgres", "machine": "m"}, {"engine": "mariadb", "machine": "m",
                                                                          "new": "x", "none": None})
    assert merged == {"engine": "postgres, mariadb", "machine": "m", "new": "x"}
    assert fa.merge_environment(merged, {"engine": "postgres"})["engine"] == "postgres, mariadb"
    fa.write_environment(tmp_path, {"a key": "x=y: z\\w"})
    assert fa.read_environment(tmp_path) == {"a_key": "x=y: z\\w"}
