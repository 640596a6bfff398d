"""``failover-harness run PATH… [pytest options]``: options ``run`` does not know, and everything
after ``--``, reach pytest as they are (README, "The two commands"); ``matrix --clients`` says it takes
``module:attr``."""

from __future__ import annotations

import subprocess
import sys

from harness.cli import build_parser
from harness.cli.run_cmds import split_passthrough

FH = [sys.executable, "-m", "harness.cli"]

SUITE = '''
import pytest
from harness.rules.verdict import Verdict

@pytest.mark.rule("DUR-1")
def test_alpha(check):
    check(Verdict("DUR-1", True, "x", "x"))

@pytest.mark.rule("DUR-1")
def test_beta(check):
    check(Verdict("DUR-1", False, "every write present", "write 7 lost", [0]))
'''


def test_split_turns_foreign_tokens_into_pytest_args(tmp_path) -> None:
    suite = tmp_path / "s"
    suite.mkdir()
    argv = [str(suite), "-x", "--maxfail", "2", "-p", "no:cacheprovider", "--client", "psycopg", "-k", "a",
            "--", "-m", "not slow", str(suite)]
    assert split_passthrough(argv) == [
        str(suite), "--pytest-arg=-x", "--pytest-arg=--maxfail", "--pytest-arg=2", "--pytest-arg=-p",
        "--pytest-arg=no:cacheprovider", "--client", "psycopg", "-k", "a", "--pytest-arg=-m",
        "--pytest-arg=not slow", f"--pytest-arg={suite}"]
    # a path after a flag-like pytest option stays a path; --opt=value keeps no pending value
    assert split_passthrough(["-x", str(suite), "--tb=short", str(suite)]) == [
        "--pytest-arg=-x", str(suite), "--pytest-arg=--tb=short", str(suite)]


def test_run_passes_unknown_options_and_double_dash_to_pytest(tmp_path) -> None:
    suite = tmp_path / "test_two.py"
    suite.write_text(SUITE)
    base = FH + ["run", str(suite), "--results", str(tmp_path / "r"), f"--pytest-arg=--history-dir={tmp_path / 'h'}"]
    typed = subprocess.run(base + ["-k", "alpha", "-p", "no:randomly", "--co", "-q"],
                           capture_output=True, text=True, timeout=120)
    assert typed.returncode == 0, typed.stdout + typed.stderr
    assert "test_alpha" in typed.stdout and "test_beta" not in typed.stdout  # --co reached pytest
    dashed = subprocess.run(base + ["--", "-k", "beta", "-q"], capture_output=True, text=True, timeout=120)
    assert dashed.returncode == 1, dashed.stdout + dashed.stderr  # only the violated test ran
    assert "1 failed" in dashed.stdout and "passed" not in dashed.stdout


def test_matrix_help_documents_import_paths() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = sub.choices["matrix"].format_help()
    assert "module:factory" in " ".join(text.split())
