"""Same suites, same verdicts: the DUR and MIR suites run on the Compose backend (containers behind
the real Toxiproxy) and on local processes, one after the other, and every test that runs on both
ends with the same outcome and the same verdict per rule. A test marked ``not_on("compose")`` is
reported as skipped there with its reason (docs/compose.md lists them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.history.store import read_jsonl
from harness.paths import repo_root

SUITES = ("suites/durability", "suites/mirroring")


def _run(backend: str, out: Path, env: dict[str, str]) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Run the suites on ``backend``; per test: (outcome, sorted (rule, status) verdicts)."""
    histories = out / "histories"
    cmd = [sys.executable, "-m", "harness.cli", "run", *SUITES, "--backend", backend, "--results",
           str(out / "allure-results"), f"--pytest-arg=--history-dir={histories}", "--pytest-arg=-q",
           f"--pytest-arg=--junitxml={out / 'junit.xml'}"]
    proc = subprocess.run(cmd, cwd=repo_root(), env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-2000:]
    seen = {}
    for path in sorted(histories.glob("*.jsonl")):
        meta, _ = read_jsonl(path)
        verdicts = sorted((v["rule_id"], v["status"]) for v in meta.get("verdicts", []))
        seen[str(meta.get("test", path.stem))] = (str(meta.get("outcome")), verdicts)
    return seen


def _skipped(junit: Path) -> dict[str, str]:
    import xml.etree.ElementTree as ET

    skipped = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            skipped[case.get("name", "")] = skip.get("message", "")
    return skipped


@pytest.mark.timeout(1800)  # two full suite runs, one after the other, on a shared 2-core machine
def test_dur_and_mir_suites_give_the_same_verdicts_on_compose_and_local(tmp_path: Path,
                                                                       isolated_home: dict[str, str]) -> None:
    env = {**isolated_home, "PYTHONPATH": str(repo_root()), "FAILOVER_HARNESS_REPORTS": str(tmp_path)}
    compose = _run("compose", tmp_path / "compose", env)
    local = _run("local", tmp_path / "local", env)
    skipped = _skipped(tmp_path / "compose" / "junit.xml")
    assert all("not on backend compose:" in why for why in skipped.values()), skipped
    assert len(compose) >= len(local) - len(skipped) > 10  # every suite test ran (or said why not)
    differ = {t: (local.get(t), compose.get(t)) for t in set(local) | set(compose)
              if t in compose and local.get(t) != compose.get(t)}
    assert not differ, f"verdicts differ between local and compose: {differ}"
    assert set(local) - set(compose) == {t for t in local if t.split("::")[-1] in skipped}
