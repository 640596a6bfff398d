"""``failover-harness run``: pytest with the harness plugin, one fresh set of Allure results per run,
pytest's exit code, and a clear error for a suite path that does not exist."""

from __future__ import annotations

import subprocess
import sys

FH = [sys.executable, "-m", "harness.cli"]

SUITE = '''
import pytest
from harness.rules.verdict import Verdict

@pytest.mark.rule("DUR-1")
def test_kept(history, check):
    history.record("op.ok", f="write", value=1)
    check(Verdict("DUR-1", True, "x", "x"))

@pytest.mark.rule("DUR-1")
def test_violated(history, check):
    check(Verdict("DUR-1", False, "every write present", "write 7 lost", [0]))
'''


def test_run_writes_fresh_results_and_returns_pytest_exit_code(tmp_path):
    suite = tmp_path / "test_tiny.py"
    suite.write_text(SUITE)
    results = tmp_path / "results"
    results.mkdir()
    (results / "stale-result.json").write_text("{}")
    out = subprocess.run(FH + ["run", str(suite), "--results", str(results),
                               f"--pytest-arg=--history-dir={tmp_path / 'h'}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr  # one violation: pytest's "tests failed"
    assert "1 failed, 1 passed" in out.stdout
    assert "DUR-1: expected every write present; observed write 7 lost" in out.stdout
    assert not (results / "stale-result.json").exists()
    assert len(list(results.glob("*-result.json"))) == 2
    assert len(list((tmp_path / "h").glob("*.jsonl"))) == 2


def test_run_rejects_a_missing_suite_path(tmp_path):
    out = subprocess.run(FH + ["run", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no such suite path" in out.stderr and "Traceback" not in out.stderr
