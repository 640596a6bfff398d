"""The pytest plugin is loaded into every pytest run of an environment the harness is installed in: an
unrelated run (no harness option, no harness fixture, no rule mark) imports nothing heavy, checks no
backend and prints nothing of its own; a run whose tests use the fixtures wakes it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

UNRELATED = '''
import sys

def test_app_logic():
    assert sorted([3, 1, 2]) == [1, 2, 3]

def test_nothing_heavy_of_the_harness_was_imported():
    heavy = sorted(m for m in sys.modules if m.split(".")[:2] in (
        ["harness", "topology"], ["harness", "faults"], ["harness", "toxiproxy"], ["harness", "clients"],
        ["harness", "report"], ["harness", "workload"], ["harness", "history"], ["harness", "rules"]))
    assert heavy == []
'''

USES_PAIR = '''
def test_topology_wanted(pair):
    assert pair.principal.name == "n1"
'''


def _normalised(lines: list[str]) -> list[str]:
    """Output lines without the ones that differ between any two runs (plugin list, timings)."""
    return [re.sub(r" in [0-9.]+s", "", line) for line in lines if not line.startswith(("plugins:", "rootdir:"))]


def test_an_unrelated_run_is_untouched(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app=UNRELATED)
    with_plugin = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    with_plugin.assert_outcomes(passed=2)
    without = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:failover_harness")
    without.assert_outcomes(passed=2)
    assert _normalised(with_plugin.outlines) == _normalised(without.outlines)
    assert not any("failover-harness" in line for line in with_plugin.outlines if not line.startswith("plugins:"))
    assert with_plugin.errlines == without.errlines
    assert not (pytester.path / "reports").exists()  # no history folder, no results


def test_a_run_using_the_fixtures_wakes_the_plugin_after_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_uses_pair=USES_PAIR, test_app=UNRELATED.replace(
        "assert heavy == []", "assert heavy"))  # imported by now: a collected test asks for a topology
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3)  # the harness woke after collection: a real pair, and its modules loaded
    plain = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "test_app.py", "-k", "nothing_heavy")
    plain.assert_outcomes(failed=1)  # alone, the unrelated file keeps the harness asleep


def test_options_carry_the_fh_prefix(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    text = "\n".join(result.outlines)
    for name in ("backend", "client", "engine", "keep-on-failure", "history-dir"):
        assert f"--fh-{name}" in text


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="hiding PostgreSQL takes a private mount namespace (root)")
def test_a_missing_postgresql_matters_only_to_a_test_that_asks_for_a_topology(tmp_path: Path) -> None:
    """PostgreSQL hidden (an empty folder mounted over /usr/lib/postgresql): the unrelated file passes
    with no word of the harness; a file asking for ``pair`` is refused in one line naming the fix."""
    (tmp_path / "test_app.py").write_text(UNRELATED)
    (tmp_path / "test_uses_pair.py").write_text(USES_PAIR)
    empty = tmp_path / "empty"
    empty.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        pytest_cmd = " ".join([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args])
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               f"mount --bind {empty} /usr/lib/postgresql && {pytest_cmd}"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)

    unrelated = run("test_app.py")
    assert unrelated.returncode == 0 and "2 passed" in unrelated.stdout, unrelated.stdout + unrelated.stderr
    assert "failover-harness" not in unrelated.stdout + unrelated.stderr
    wanted = run("test_uses_pair.py")
    assert wanted.returncode == pytest.ExitCode.USAGE_ERROR, wanted.stdout + wanted.stderr
    errors = [line for line in wanted.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "PostgreSQL 15 server binaries not found" in errors[0], errors
    assert "apt-get install -y postgresql" in errors[0]
