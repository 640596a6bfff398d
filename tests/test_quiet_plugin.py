"""The pytest plugin is loaded into every pytest run of an environment the harness is installed in: an
unrelated run (no harness option, no harness fixture, no rule mark) imports nothing heavy, checks no
backend and prints nothing of its own; a run whose tests use the fixtures wakes it."""

from __future__ import annotations

import re

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
