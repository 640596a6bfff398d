"""Same suites, same verdicts: the DUR and MIR suites run on the Compose backend (containers behind
the real Toxiproxy in its container) and on local processes (the session's ``local_suite_run``, which
the real-Toxiproxy comparison reads too), and every test that runs on both ends with the same outcome
and the same verdict per rule. A test marked ``not_on("compose")`` is reported as skipped there with
its reason (docs/compose.md lists them). A test whose verdicts differ is run up to twice more on both
backends; the difference counts only when no result of one ever agrees with one of the other
(``tests/support/suite_runs.py``; ``unknown`` agrees with either).

``make test`` runs this in its second pass (after ``failover-harness compose-setup``)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.topology.containers import harness_containers
from tests.support.suite_runs import SuiteRun, compare_with_reruns, differences, environment, run_suites


def _skipped(junit: Path) -> dict[str, str]:
    skipped = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            skipped[case.get("name", "")] = skip.get("message", "")
    return skipped


@pytest.mark.timeout(2400)  # one suite run on compose (and the local one, if not run yet), and re-runs
def test_dur_and_mir_suites_give_the_same_verdicts_on_compose_and_local(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], isolated_home: dict[str, str],
        local_suite_run: SuiteRun) -> None:
    home = {"FAILOVER_HARNESS_HOME": isolated_home["FAILOVER_HARNESS_HOME"],
            "FAILOVER_HARNESS_TEMPLATES": isolated_home["FAILOVER_HARNESS_TEMPLATES"]}
    compose = run_suites("compose", None, tmp_path / "compose", env=home)
    assert harness_containers(home=home["FAILOVER_HARNESS_HOME"]) == []  # every test's containers are gone
    local = local_suite_run.verdicts
    env = environment(compose.reports)
    assert "backend=compose" in env.splitlines() and "Toxiproxy container" in env, env
    skipped = _skipped(tmp_path / "compose" / "junit.xml")
    assert all("not on backend compose:" in why for why in skipped.values()), skipped
    diff = differences(local, compose.verdicts)
    only_local = {t for t in diff if t not in compose.verdicts}
    assert only_local == {t for t in local if t.split("::")[-1] in skipped}, (only_local, skipped)
    both = {t: v for t, v in local.items() if t not in only_local}
    remaining, flaky, differed = compare_with_reruns(
        both, compose.verdicts,
        lambda ids, k: run_suites("embedded", None, tmp_path / f"local-again-{k}", ids, env=home).verdicts,
        lambda ids, k: run_suites("compose", None, tmp_path / f"compose-again-{k}", ids, env=home).verdicts)
    unknown = sorted(t for t, (_, vs) in compose.verdicts.items() if any(v == "unknown" for _, v in vs))
    with capsys.disabled():
        print(f"\n[compose] {len(compose.verdicts)} suite tests: local {local_suite_run.seconds:.1f} s, "
              f"compose {compose.seconds:.1f} s; skipped on compose {len(skipped)}; differences {differed}, "
              f"of which flakes of the machine (alike on a re-run) {len(flaky)}: {', '.join(flaky) or '-'}; "
              f"with an unknown verdict on compose {len(unknown)}: {', '.join(unknown) or '-'}")
    assert not remaining, "verdicts differ between local and compose: " + json.dumps(remaining, indent=1, default=str)
    assert len(compose.verdicts) >= 16 and sum(bool(v) for _, v in compose.verdicts.values()) >= 16  # not vacuous
