"""The real Toxiproxy as the fault proxy: ``suites/durability`` and ``suites/mirroring`` run once with
the embedded server and once with a spawned real ``toxiproxy-server`` (its connection events derived
from its log, timing rules included), and every test must reach the same outcome with the same
verdicts (rule id and valid, read from the saved histories' meta).

``make test`` runs this in its second pass (``TOXIPROXY_SERVER_BIN`` = ``../shared/toxiproxy/
toxiproxy-server`` when that file exists; override with ``make test TOXIPROXY_SERVER=PATH``).
Without any real binary (that variable, ``../shared/toxiproxy/`` beside the checkout, or PATH) it is
skipped: there is nothing to compare with. A test whose verdicts differ is run up to twice more in
both modes, and the difference counts only when no result of one mode ever agrees with one of the
other (``tests/support/suite_runs.py``: a timing flake does not repeat; a real difference does)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.toxiproxy.server_choice import find_server_binary
from tests.support.suite_runs import (
    REPO,
    SuiteRun,
    alike,
    compare_with_reruns,
    differences,
    environment,
    never_alike,
    run_suites,
)


def real_binary() -> str | None:
    """``TOXIPROXY_SERVER_BIN`` (must exist), else ``../shared/toxiproxy/toxiproxy-server``, else PATH."""
    if os.environ.get("TOXIPROXY_SERVER_BIN"):
        return find_server_binary()  # raises MissingDependencyError naming a bad path
    beside = REPO.parent / "shared" / "toxiproxy" / "toxiproxy-server"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("toxiproxy-server")


def test_a_server_difference_is_told_from_a_flake_and_unknown_agrees_with_either() -> None:
    ok, bad = ("passed", [("MIR-5", True)]), ("failed", [("MIR-5", False)])
    unobserved = ("passed", [("MIR-5", "unknown")])
    assert never_alike({"t": [ok, ok]}, {"t": [bad, bad]}) == {"t": ([ok, ok], [bad, bad])}
    assert never_alike({"t": [bad, ok]}, {"t": [ok]}) == {}
    assert never_alike({"t": [ok]}, {}) == {"t": ([ok], [])}
    assert alike(ok, unobserved) and not alike(bad, unobserved)
    failed_unobserved = ("failed", [("MIR-5", "unknown")])  # VerdictUnknown fails the test, says nothing
    assert alike(ok, failed_unobserved) and alike(failed_unobserved, ok)
    violated_and_unobserved = ("failed", [("MIR-5", False), ("MIR-7", "unknown")])
    assert not alike(violated_and_unobserved, ("passed", [("MIR-5", True), ("MIR-7", True)]))
    assert not alike(ok, ("passed", [("MIR-5", True), ("MIR-7", True)]))


def test_the_shared_local_run_read_back_by_another_worker_compares_equal(tmp_path: Path) -> None:
    """Under pytest-xdist the local DUR + MIR run is written once as JSON and read by the other worker
    (tests/conftest.py ``local_suite_run``): its verdicts must compare as the written ones do."""
    run = SuiteRun(1.5, {"t": ("passed", [("MIR-5", True), ("MIR-7", "unknown")]),
                         "u": ("failed", [("DUR-1", False)])}, tmp_path, "out")
    back = SuiteRun.from_json(run.to_json())
    assert back == run and differences(run.verdicts, back.verdicts) == {}
    assert differences(run.verdicts, SuiteRun.from_json(run.to_json().replace("false", "true")).verdicts) == {
        "u": (("failed", [("DUR-1", False)]), ("failed", [("DUR-1", True)]))}


@pytest.mark.timeout(2400)  # two runs of the suites, and re-runs of any test that differed
def test_durability_and_mirroring_give_the_same_verdicts_through_the_real_server(
        tmp_path: Path, summary_line: Callable[[str], None], local_suite_run: SuiteRun) -> None:
    binary = real_binary()
    if binary is None:
        pytest.skip("no real toxiproxy-server (TOXIPROXY_SERVER_BIN, ../shared/toxiproxy/, PATH): nothing to "
                    "compare the embedded server with")
    t_emb, embedded = local_suite_run.seconds, local_suite_run.verdicts  # shared with the compose comparison
    real_run = run_suites("real", binary, tmp_path / "real")
    t_real, real = real_run.seconds, real_run.verdicts
    assert "embedded Toxiproxy-compatible server" in environment(local_suite_run.reports)
    real_env = environment(tmp_path / "real")
    assert "spawned toxiproxy-server 2.12" in real_env and binary in real_env, real_env
    assert "derived from its trace log" in real_env
    remaining, flaky, differed = compare_with_reruns(
        embedded, real,
        lambda ids, k: run_suites("embedded", binary, tmp_path / f"embedded-again-{k}", ids).verdicts,
        lambda ids, k: run_suites("real", binary, tmp_path / f"real-again-{k}", ids).verdicts)
    summary_line(f"[real toxiproxy] {len(embedded)} suite tests: embedded {t_emb:.1f} s, real {t_real:.1f} s; "
                 f"differences {differed}, of which flakes of the machine (alike on a re-run) {len(flaky)}: "
                 f"{', '.join(flaky) or '-'}")
    assert not remaining, json.dumps(remaining, indent=1, default=str)
    assert len(embedded) >= 16 and sum(bool(v) for _, v in embedded.values()) >= 16, embedded  # not vacuous
