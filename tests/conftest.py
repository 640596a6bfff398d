"""Shared fixtures of the harness's own tests."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.suite_runs import SuiteRun


@pytest.fixture
def isolated_home() -> Iterator[dict[str, str]]:
    """An environment with its own FAILOVER_HARNESS_HOME (so ``down --all`` in a test cannot touch
    other tests' runs), sharing the machine's template cache. The directory is traversable by the
    unprivileged database user."""
    from harness.paths import templates_dir

    home = Path(tempfile.mkdtemp(prefix="fh-home-", dir="/tmp"))
    home.chmod(0o755)
    env = dict(os.environ, FAILOVER_HARNESS_HOME=str(home), FAILOVER_HARNESS_TEMPLATES=str(templates_dir()))
    yield env
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def local_suite_run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> SuiteRun:
    """``suites/durability`` and ``suites/mirroring`` once on the local backend with the embedded
    fault proxy: the reference both same-verdict comparisons of a session read (the real Toxiproxy,
    tests/test_toxiproxy_real_suites.py; the compose backend, tests/test_compose_suites.py). Under
    pytest-xdist (make test's second pass runs the comparisons side by side) the first worker that
    needs it runs it under a lock in the session's common temporary folder and the others read its
    result: once per session, whichever worker each comparison lands on."""
    from tests.support.suite_runs import run_suites

    if worker_id == "master":
        return run_suites("embedded", None, tmp_path_factory.mktemp("local-suites"))
    shared = tmp_path_factory.getbasetemp().parent  # the same folder for every worker of this session
    with open(shared / "local-suites.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the run raised
        done = shared / "local-suites.json"
        if done.exists():
            return SuiteRun.from_json(done.read_text(encoding="utf-8"))
        run = run_suites("embedded", None, shared / "local-suites")
        done.write_text(run.to_json(), encoding="utf-8")
        return run


#: ``user_properties`` key of a line a test wants printed in the session's summary.
SUMMARY_KEY = "summary-line"


@pytest.fixture
def summary_line(record_property: pytest.RecordProperty) -> object:
    """``summary_line(text)`` prints ``text`` in the session's terminal summary: under pytest-xdist a
    worker's own output never reaches the terminal, a test report's properties do (the comparisons of
    make test's second pass print their figures this way)."""
    return lambda text: record_property(SUMMARY_KEY, text)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the ``summary_line`` texts of every test that ran (after its call phase)."""
    lines = [value for stat in terminalreporter.stats.values() for report in stat
             if getattr(report, "when", None) == "call"
             for key, value in getattr(report, "user_properties", []) if key == SUMMARY_KEY]
    if lines:
        terminalreporter.section("figures")
        for line in lines:
            terminalreporter.write_line(line)
