"""Running ``suites/durability`` and ``suites/mirroring`` in a ``failover-harness run`` subprocess and
reading every test's outcome and verdicts back from the saved histories (the same-suites-same-verdicts
comparisons: embedded vs real Toxiproxy, local vs compose). One local run with the embedded server
serves both comparisons of a pytest session (``tests/conftest.py``: ``local_suite_run``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SUITES = ["suites/durability", "suites/mirroring"]
Verdicts = dict[str, tuple[str, list[tuple[str, object]]]]


@dataclass
class SuiteRun:
    """One run of the suites: its seconds, verdicts per test id, folder and output."""

    seconds: float
    verdicts: Verdicts
    reports: Path
    output: str

    def to_json(self) -> str:
        """This run as JSON (read back by :meth:`from_json`)."""
        return json.dumps({"seconds": self.seconds, "verdicts": self.verdicts, "reports": str(self.reports),
                           "output": self.output})

    @classmethod
    def from_json(cls, text: str) -> SuiteRun:
        """The run :meth:`to_json` wrote, its verdicts as tuples again (as compared)."""
        data = json.loads(text)
        verdicts = {t: (outcome, [tuple(v) for v in vs]) for t, (outcome, vs) in data["verdicts"].items()}
        return cls(data["seconds"], verdicts, Path(data["reports"]), data["output"])


def suite_env(kind: str, binary: str | None, reports: Path) -> dict[str, str]:
    """The environment of a run with the ``kind`` fault proxy (``embedded``, ``real``, or ``compose``:
    the compose backend brings its own real Toxiproxy)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TOXIPROXY_URL", "TOXIPROXY_SERVER_BIN")}
    # no toxiproxy-server on PATH for the embedded run (the selection would spawn it)
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and not os.access(os.path.join(d, "toxiproxy-server"), os.X_OK))
    if kind == "real":
        assert binary, "a real run needs the toxiproxy-server binary"
        env["TOXIPROXY_SERVER_BIN"] = binary
    env["FAILOVER_HARNESS_REPORTS"] = str(reports)
    env.setdefault("PYTHONPATH", str(REPO))
    return env


def run_suites(kind: str, binary: str | None, reports: Path, select: list[str] | None = None,
               env: dict[str, str] | None = None, options: list[str] | None = None) -> SuiteRun:
    """Run the suites (or the ``select``ed test ids) with the ``kind`` fault proxy; ``kind="compose"``
    runs them on ``--backend compose``; ``options`` go to ``failover-harness run`` (e.g. ``--engine
    mariadb -m "not slow"``)."""
    args = [sys.executable, "-m", "harness.cli", "run", *(select or SUITES), *(options or [])]
    if kind == "compose":
        args += ["--backend", "compose", f"--pytest-arg=--junitxml={reports / 'junit.xml'}"]
    t0 = time.monotonic()
    proc = subprocess.run(args, cwd=REPO, env={**suite_env(kind, binary, reports), **(env or {})},
                          capture_output=True, text=True, timeout=1200)
    seconds = time.monotonic() - t0
    verdicts: Verdicts = {}
    for path in sorted((reports / "histories").glob("*.jsonl")):
        meta = json.loads(path.read_text(encoding="utf-8").splitlines()[0])["meta"]
        verdicts[meta["test"]] = (meta["outcome"], [(v["rule_id"], v["valid"]) for v in meta["verdicts"]])
    assert verdicts, f"the {kind} run saved no history (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
    return SuiteRun(seconds, verdicts, reports, proc.stdout[-6000:] + proc.stderr[-2000:])


def environment(reports: Path) -> str:
    """The run's Allure ``environment.properties`` (which fault proxy it used)."""
    return (reports / "allure-results" / "environment.properties").read_text(encoding="utf-8")


def differences(a: Verdicts, b: Verdicts) -> dict[str, tuple[object, object]]:
    """Tests whose outcome or verdicts differ between two runs (or that only one run has)."""
    return {t: (a.get(t), b.get(t)) for t in sorted(set(a) | set(b)) if a.get(t) != b.get(t)}

RERUNS = 2  # re-runs of a differing test in both modes before the difference counts


def alike(a: Any, b: Any) -> bool:
    """Two results of one test agree: the same outcome, the same rules, and no rule kept in one and
    violated in the other. ``unknown`` (not observable in that run, e.g. a machine stall beyond every
    tolerance) agrees with either: it is a gap in the observation, not a different behaviour."""
    if a is None or b is None:
        return a is b
    (outcome_a, verdicts_a), (outcome_b, verdicts_b) = a, b
    va, vb = dict(verdicts_a), dict(verdicts_b)
    if set(va) != set(vb):
        return False
    if outcome_a != outcome_b and not (_unobserved(outcome_a, va) or _unobserved(outcome_b, vb)):
        return False
    return all(va[r] == vb[r] or "unknown" in (va[r], vb[r]) for r in va)


def _unobserved(outcome: str, verdicts: dict[str, object]) -> bool:
    """A test that failed only because a verdict was unknown (``VerdictUnknown``): no rule violated,
    at least one not observable. Its outcome says nothing about the client."""
    values = list(verdicts.values())
    return outcome == "failed" and False not in values and "unknown" in values


def never_alike(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> dict[str, tuple[list[Any], list[Any]]]:
    """Tests none of whose results in one mode agrees with any of its results in the other: a
    difference of the backend or fault proxy. A test that agreed once but not always is a flake of
    the machine (timing under load): printed by the callers, not failed."""
    return {t: (a.get(t, []), b.get(t, [])) for t in sorted(set(a) | set(b))
            if not any(alike(x, y) for x in a.get(t, []) for y in b.get(t, []))}


def compare_with_reruns(a: Verdicts, b: Verdicts, rerun_a: Callable[[list[str], int], Verdicts],
                        rerun_b: Callable[[list[str], int], Verdicts], reruns: int = RERUNS,
                        ) -> tuple[dict[str, tuple[list[Any], list[Any]]], list[str], int]:
    """Compare two runs of the suites; run a test that never agreed again in both modes (``rerun_x(ids,
    round)``), at most ``reruns`` times. Returns (the differences that remain, the tests that
    differed at first but agreed on a re-run, how many tests differed at first)."""
    samples_a: dict[str, list[Any]] = {t: [v] for t, v in a.items()}
    samples_b: dict[str, list[Any]] = {t: [v] for t, v in b.items()}
    remaining = never_alike(samples_a, samples_b)
    first = set(remaining)
    for round_ in range(1, reruns + 1):
        ids = [t for t in remaining if t in a and t in b]
        if not ids:
            break
        again_a, again_b = rerun_a(ids, round_), rerun_b(ids, round_)
        for t in ids:
            samples_a[t].append(again_a.get(t))
            samples_b[t].append(again_b.get(t))
        remaining = never_alike(samples_a, samples_b)
    return remaining, sorted(first - set(remaining)), len(first)
