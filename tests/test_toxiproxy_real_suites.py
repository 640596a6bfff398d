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
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.toxiproxy.select import find_server_binary

REPO = Path(__file__).resolve().parents[1]
SUITES = ["suites/durability", "suites/mirroring"]
Verdicts = dict[str, tuple[str, list[tuple[str, object]]]]


def real_binary() -> str | None:
    """``TOXIPROXY_SERVER_BIN`` (must exist), else ``../shared/toxiproxy/toxiproxy-server``, else PATH."""
    if os.environ.get("TOXIPROXY_SERVER_BIN"):
        return find_server_binary()  # raises MissingDependencyError naming a bad path
    beside = REPO.parent / "shared" / "toxiproxy" / "toxiproxy-server"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("toxiproxy-server")


def _env(kind: str, binary: str, reports: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TOXIPROXY_URL", "TOXIPROXY_SERVER_BIN")}
    # no toxiproxy-server on PATH for the embedded run (the selection would spawn it)
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and not os.access(os.path.join(d, "toxiproxy-server"), os.X_OK))
    if kind == "real":
        env["TOXIPROXY_SERVER_BIN"] = binary
    env["FAILOVER_HARNESS_REPORTS"] = str(reports)
    env.setdefault("PYTHONPATH", str(REPO))
    return env


def run_suites(kind: str, binary: str, reports: Path, select: list[str] | None = None) -> tuple[float, Verdicts]:
    """Run the suites with the ``kind`` fault proxy; (seconds, verdicts per test id)."""
    args = [sys.executable, "-m", "harness.cli", "run", *(select or SUITES)]
    t0 = time.monotonic()
    proc = subprocess.run(args, cwd=REPO, env=_env(kind, binary, reports), capture_output=True, text=True,
                          timeout=1200)
    seconds = time.monotonic() - t0
    verdicts: Verdicts = {}
    for path in sorted((reports / "histories").glob("*.jsonl")):
        meta = json.loads(path.read_text(encoding="utf-8").splitlines()[0])["meta"]
        verdicts[meta["test"]] = (meta["outcome"], [(v["rule_id"], v["valid"]) for v in meta["verdicts"]])
    assert verdicts, f"the {kind} run saved no history (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
    return seconds, verdicts


def environment(reports: Path) -> str:
    """The run's Allure ``environment.properties`` (which fault proxy it used)."""
    return (reports / "allure-results" / "environment.properties").read_text(encoding="utf-8")


def differences(a: Verdicts, b: Verdicts) -> dict[str, tuple[object, object]]:
    """Tests whose outcome or verdicts differ between two runs (or that only one run has)."""
    return {t: (a.get(t), b.get(t)) for t in sorted(set(a) | set(b)) if a.get(t) != b.get(t)}


@pytest.mark.timeout(2400)  # two runs of the suites, and a re-run of any test that differed
def test_durability_and_mirroring_give_the_same_verdicts_through_the_real_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = real_binary()
    if binary is None:
        pytest.skip("no real toxiproxy-server (TOXIPROXY_SERVER_BIN, ../shared/toxiproxy/, PATH): nothing to "
                    "compare the embedded server with")
    t_emb, embedded = run_suites("embedded", binary, tmp_path / "embedded")
    t_real, real = run_suites("real", binary, tmp_path / "real")
    assert "embedded Toxiproxy-compatible server" in environment(tmp_path / "embedded")
    real_env = environment(tmp_path / "real")
    assert "spawned toxiproxy-server 2.12" in real_env and binary in real_env, real_env
    assert "derived from its trace log" in real_env
    diff = differences(embedded, real)
    again: dict[str, tuple[object, object]] = {}
    if diff:  # once more, only those tests, both ways
        ids = [t for t in diff if t in embedded and t in real]
        _, emb2 = run_suites("embedded", binary, tmp_path / "embedded-again", ids)
        _, real2 = run_suites("real", binary, tmp_path / "real-again", ids)
        again = differences(emb2, real2)
        again.update({t: d for t, d in diff.items() if t not in ids})
    with capsys.disabled():
        print(f"\n[real toxiproxy] {len(embedded)} suite tests: embedded {t_emb:.1f} s, real {t_real:.1f} s; "
              f"differences {len(diff)} (after a re-run: {len(again)})")
    assert not again, json.dumps(again, indent=1, default=str)
    assert len(embedded) >= 16 and sum(bool(v) for _, v in embedded.values()) >= 16, embedded  # not vacuous
