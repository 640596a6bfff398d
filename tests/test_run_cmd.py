"""``failover-harness run``: pytest with the harness plugin, one fresh set of Allure results per run,
pytest's exit code, and a clear error for a suite path that does not exist."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


def test_run_profile_selects_its_suites_and_refuses_an_unknown_profile():
    import argparse

    from harness.cli.run_cmds import pytest_args
    from harness.errors import ConfigError

    args = argparse.Namespace(paths=[], profile="app", backend="local", engine="postgres", client="sqlalchemy",
                              keep_on_failure=False, jobs="1", select=None, markers=None, pytest_args=[],
                              results=None)
    argv = pytest_args(args)
    assert argv[0].endswith("suites/app") and "--fh-client=sqlalchemy" in argv
    with pytest.raises(ConfigError, match="no shipped suites for profile 'nope'"):
        pytest_args(argparse.Namespace(**{**vars(args), "profile": "nope"}))


RECHECK_SUITE = '''
import pytest
from harness.rules.durability import check_no_acknowledged_write_lost

@pytest.mark.rule("DUR-1")
def test_lost_write(history, check):
    history.record("op.ok", process="w", op_id=1, f="write", value=1)
    history.record("op.ok", process="w", op_id=2, f="write", value=2)
    history.record("op.invoke", process="c", op_id=3, f="read_all", value=None)
    history.record("op.ok", process="c", op_id=3, f="read_all", value=[1])
    check(check_no_acknowledged_write_lost(history.events(), mode="async"))
'''


def test_saved_history_is_rechecked_offline_with_the_suites_parameters(tmp_path):
    """Acceptance (Foundation 3): ``failover-harness check HISTORY`` re-judges a suite's saved
    history with the rules and parameters the suite used, and gets the same verdict."""
    suite = tmp_path / "test_recheck.py"
    suite.write_text(RECHECK_SUITE)
    histories = tmp_path / "h"
    run = subprocess.run(FH + ["run", str(suite), "--results", str(tmp_path / "r"),
                               f"--pytest-arg=--history-dir={histories}"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "DUR-1" in run.stdout
    saved = next(histories.glob("*.jsonl"))
    again = subprocess.run(FH + ["check", str(saved)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 1, again.stderr
    assert again.stdout.startswith("DUR-1 VIOLATED") and "async" in again.stdout and "2" in again.stdout
    forced = subprocess.run(FH + ["check", str(saved), "--rules", "DUR-1", "--param", "mode=sync"],
                            capture_output=True, text=True, timeout=60)
    assert forced.returncode == 1 and "async" not in forced.stdout.split("observed")[0]


def test_the_readme_suite_example_runs_and_keeps_dur1(tmp_path):
    """The 10-line suite test shown in README.md is real: it runs against a real pair and passes."""
    import re

    from tests.support.checkout import repo_root

    readme = (repo_root() / "README.md").read_text()
    example = re.search(r"## A suite test\n\n```python\n(.*?)```", readme, re.S).group(1)
    suite = tmp_path / "test_readme_example.py"
    suite.write_text(example)
    out = subprocess.run(FH + ["run", str(suite), "--results", str(tmp_path / "r"),
                               f"--pytest-arg=--history-dir={tmp_path / 'h'}"], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout
