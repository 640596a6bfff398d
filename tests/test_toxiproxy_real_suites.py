"""The real Toxiproxy as the fault proxy: ``suites/durability`` and ``suites/mirroring`` run once with
the embedded server and once with a spawned real ``toxiproxy-server`` (its connection events derived
from its log, timing rules included), and every test must reach the same outcome with the same
verdicts (rule id and valid, read from the saved histories' meta).

``make test`` runs this in its second pass (``TOXIPROXY_SERVER_BIN`` = ``../shared/toxiproxy/
toxiproxy-server`` when that file exists; override with ``make test TOXIPROXY_SERVER=PATH``).
Without any real binary (that variable, ``../shared/toxiproxy/`` beside the checkout, or PATH) it is
skipped: there is nothing to compare with. A test whose verdicts differ is run once more in both
modes before the difference counts (a timing flake does not repeat; a real difference does)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from harness.toxiproxy.select import find_server_binary
from tests.support.suite_runs import REPO, SuiteRun, differences, environment, run_suites


def real_binary() -> str | None:
    """``TOXIPROXY_SERVER_BIN`` (must exist), else ``../shared/toxiproxy/toxiproxy-server``, else PATH."""
    if os.environ.get("TOXIPROXY_SERVER_BIN"):
        return find_server_binary()  # raises MissingDependencyError naming a bad path
    beside = REPO.parent / "shared" / "toxiproxy" / "toxiproxy-server"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("toxiproxy-server")


@pytest.mark.timeout(2400)  # two runs of the suites, and a re-run of any test that differed
def test_durability_and_mirroring_give_the_same_verdicts_through_the_real_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], local_suite_run: SuiteRun) -> None:
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
    diff = differences(embedded, real)
    again: dict[str, tuple[object, object]] = {}
    if diff:  # once more, only those tests, both ways
        ids = [t for t in diff if t in embedded and t in real]
        emb2 = run_suites("embedded", binary, tmp_path / "embedded-again", ids).verdicts
        real2 = run_suites("real", binary, tmp_path / "real-again", ids).verdicts
        again = differences(emb2, real2)
        again.update({t: d for t, d in diff.items() if t not in ids})
    with capsys.disabled():
        print(f"\n[real toxiproxy] {len(embedded)} suite tests: embedded {t_emb:.1f} s, real {t_real:.1f} s; "
              f"differences {len(diff)} (after a re-run: {len(again)})")
    assert not again, json.dumps(again, indent=1, default=str)
    assert len(embedded) >= 16 and sum(bool(v) for _, v in embedded.values()) >= 16, embedded  # not vacuous
