"""Same suites, same verdicts: every suite of ``make chaos`` runs on the Compose backend (containers
behind the real Toxiproxy in its container) and on local processes, and every test that runs on both
ends with the same outcome and the same verdict per rule - in three parts:

* DUR + MIR (PostgreSQL) against the session's ``local_suite_run``, which the real-Toxiproxy
  comparison reads too (one local run for both comparisons);
* ACR, APP, ICM, LPQ and PER (PostgreSQL) against a local run of their own;
* the MariaDB DUR and PER suites (``--engine mariadb -m "not slow"``, as ``make chaos`` runs them)
  against a local MariaDB run of their own.

A test marked ``not_on("compose")`` is reported as skipped there with its reason (docs/compose.md
lists them). A test whose verdicts differ is run up to twice more on both backends; the difference
counts only when no result of one ever agrees with one of the other (``tests/support/suite_runs.py``;
``unknown`` agrees with either).

``make test`` runs this in its second pass (after ``failover-harness compose-setup``); what it costs
is in docs/compose.md ("In make test")."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.topology.capabilities import refusal
from harness.topology.containers import harness_containers
from tests.support.suite_runs import REPO, SUITES, SuiteRun, compare_with_reruns, differences, environment, run_suites

#: The suites of the second part (every suite folder of ``make chaos`` but DUR and MIR).
OTHER_SUITES = ["suites/acr", "suites/app", "suites/icm", "suites/lpq", "suites/persistent"]
#: The MariaDB part: the suites and options of ``make chaos``'s MariaDB run (the Makefile's, checked below).
MARIADB_SUITES = ["suites/durability", "suites/persistent"]
MARIADB_OPTIONS = ["--engine", "mariadb", "-m", "not slow"]
AT_LEAST_MARIADB = 12  # the 2 DUR and 10 PER tests of that run (not vacuous)
#: Suite folders not compared on compose, each with the capability row (harness/topology/capabilities.py)
#: that refuses it there: suites/ham needs the Patroni and pg_auto_failover topologies (neither built on compose;
#: also not part of make chaos: make chaos-ham).
NOT_ON_COMPOSE = {"suites/ham": "patroni-pair / patroni-group3"}


def _skipped(junit: Path) -> dict[str, str]:
    skipped = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            skipped[case.get("name", "")] = skip.get("message", "")
    return skipped


def _home(isolated_home: dict[str, str]) -> dict[str, str]:
    return {"FAILOVER_HARNESS_HOME": isolated_home["FAILOVER_HARNESS_HOME"],
            "FAILOVER_HARNESS_TEMPLATES": isolated_home["FAILOVER_HARNESS_TEMPLATES"]}


def _compare(suites: list[str], local: SuiteRun, tmp_path: Path, home: dict[str, str],
             summary_line: Callable[[str], None], at_least: int, options: list[str] | None = None) -> None:
    """Run ``suites`` on compose and compare every test's outcome and verdicts with ``local``'s (re-runs
    of a differing test on both backends, with the same ``options``); nothing of the harness's may be
    left on the engine."""
    compose = run_suites("compose", None, tmp_path / "compose", suites, env=home, options=options)
    left = harness_containers(home=home["FAILOVER_HARNESS_HOME"])
    assert left == [], f"containers left by the compose run: {left}; its output:\n{compose.output}"  # every test's
    env = environment(compose.reports)
    assert "backend=compose" in env.splitlines() and "Toxiproxy container" in env, env
    skipped = _skipped(tmp_path / "compose" / "junit.xml")
    assert all("not on backend compose:" in why for why in skipped.values()), skipped
    diff = differences(local.verdicts, compose.verdicts)
    only_local = {t for t in diff if t not in compose.verdicts}
    assert only_local == {t for t in local.verdicts if t.split("::")[-1] in skipped}, (only_local, skipped)
    both = {t: v for t, v in local.verdicts.items() if t not in only_local}
    remaining, flaky, differed = compare_with_reruns(
        both, compose.verdicts,
        lambda ids, k: run_suites("embedded", None, tmp_path / f"local-again-{k}", ids, env=home,
                                  options=options).verdicts,
        lambda ids, k: run_suites("compose", None, tmp_path / f"compose-again-{k}", ids, env=home,
                                  options=options).verdicts)
    unknown = sorted(t for t, (_, vs) in compose.verdicts.items() if any(v == "unknown" for _, v in vs))
    part = " ".join([*(options or []), *(s.split("/")[-1] for s in suites)])
    summary_line(f"[compose {part}] {len(compose.verdicts)} suite tests: "
                 f"local {local.seconds:.1f} s, compose {compose.seconds:.1f} s; skipped on compose {len(skipped)}; "
                 f"differences {differed}, of which flakes of the machine (alike on a re-run) {len(flaky)}: "
                 f"{', '.join(flaky) or '-'}; with an unknown verdict on compose {len(unknown)}: "
                 f"{', '.join(unknown) or '-'}")
    assert not remaining, "verdicts differ between local and compose: " + json.dumps(remaining, indent=1, default=str)
    judged = sum(bool(v) for _, v in compose.verdicts.values())
    assert len(compose.verdicts) >= at_least and judged >= at_least, (len(compose.verdicts), judged)  # not vacuous


def test_the_parts_cover_every_suite_of_make_chaos() -> None:
    """A suite folder added later is compared too (or this fails): DUR + MIR and the rest together are
    every folder of suites/ but those :data:`NOT_ON_COMPOSE` names with the capability that says why;
    the MariaDB part is the Makefile's MariaDB run of ``make chaos`` (same suites, same marker
    expression), and that run is the same on both backends."""
    folders = sorted(f"suites/{p.name}" for p in (REPO / "suites").iterdir() if p.is_dir() and
                     any(p.glob("test_*.py")))
    assert sorted(SUITES + OTHER_SUITES + list(NOT_ON_COMPOSE)) == folders
    for capability in NOT_ON_COMPOSE.values():
        assert refusal("compose", capability), f"{capability} runs on compose: compare its suite there"
    recipe = (REPO / "Makefile").read_text().split("\nchaos:", 1)[1].split("\n\n", 1)[0]
    runs = re.findall(r'\$\(FH\) run --backend \$\(BACKEND\) --engine (\w+) --append-results -m "([^"]+)" \\\n'
                      r"\s*([^|;]+?)\s*\|\|", recipe)
    assert runs == [("mariadb", "not slow", " ".join(MARIADB_SUITES))], recipe
    assert MARIADB_OPTIONS == ["--engine", runs[0][0], "-m", runs[0][1]]
    assert "$(FH) run --backend $(BACKEND) --pytest-arg=--ignore=suites/ham suites;" in recipe  # every other suite


@pytest.mark.timeout(2400)  # one suite run on compose (and the local one, if not run yet), and re-runs
def test_dur_and_mir_suites_give_the_same_verdicts_on_compose_and_local(
        tmp_path: Path, summary_line: Callable[[str], None], isolated_home: dict[str, str],
        local_suite_run: SuiteRun) -> None:
    _compare(SUITES, local_suite_run, tmp_path, _home(isolated_home), summary_line, at_least=16)


@pytest.mark.timeout(2400)  # the suites on local, then on compose, and re-runs
def test_acr_app_icm_lpq_and_per_suites_give_the_same_verdicts_on_compose_and_local(
        tmp_path: Path, summary_line: Callable[[str], None], isolated_home: dict[str, str]) -> None:
    home = _home(isolated_home)
    local = run_suites("embedded", None, tmp_path / "local", OTHER_SUITES, env=home)
    _compare(OTHER_SUITES, local, tmp_path, home, summary_line, at_least=35)


@pytest.mark.timeout(2400)  # the suites on local, then on compose, and re-runs
def test_mariadb_dur_and_per_suites_give_the_same_verdicts_on_compose_and_local(
        tmp_path: Path, summary_line: Callable[[str], None], isolated_home: dict[str, str]) -> None:
    home = _home(isolated_home)
    local = run_suites("embedded", None, tmp_path / "local", MARIADB_SUITES, env=home, options=MARIADB_OPTIONS)
    _compare(MARIADB_SUITES, local, tmp_path, home, summary_line, at_least=AT_LEAST_MARIADB, options=MARIADB_OPTIONS)
