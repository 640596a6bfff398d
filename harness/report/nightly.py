"""The nightly chaos run's results: each job (one backend x profile x client) leaves a folder with
``job.json``, ``allure-results/`` and ``histories/``; :func:`merge` makes one Allure results
folder of them - each test told apart by its job (parameters ``backend`` and ``client``, a history
ID of its own, so the trend follows each job's test from night to night) - and the conformance
matrices per profile and backend from the histories."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.report.matrix import all_rules, build_matrix, collect_cells, write_matrix

JOB_FILE = "job.json"


def write_job(folder: Path, backend: str, profile: str, client: str | None) -> None:
    """Describe a job's output folder (read back by :func:`merge`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / JOB_FILE).write_text(json.dumps({"backend": backend, "profile": profile, "client": client}))


def find_jobs(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every job folder under ``root`` (any depth: artifact downloads nest them), sorted."""
    jobs = [(p.parent, json.loads(p.read_text())) for p in sorted(Path(root).rglob(JOB_FILE))]
    if not jobs:
        raise ConfigError(f"no nightly job results under {root} (each job folder holds {JOB_FILE}); "
                          "download the jobs' artifacts there first")
    return jobs


def _tag_result(data: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    client = job.get("client") or "-"
    params = [p for p in data.get("parameters", []) if p.get("name") not in ("backend", "client")]
    data["parameters"] = [*params, {"name": "backend", "value": job["backend"]}, {"name": "client", "value": client}]
    key = f"{data.get('historyId', data.get('fullName', ''))}|{job['backend']}|{client}"
    data["historyId"] = hashlib.md5(key.encode()).hexdigest()  # noqa: S324 - an ID, not security
    labels = [lb for lb in data.get("labels", []) if lb.get("name") != "parentSuite"]
    data["labels"] = [*labels, {"name": "parentSuite", "value": f"{job['backend']} / {client}"}]
    return data


def _merge_environment(files: list[Path]) -> str:
    values: dict[str, list[str]] = {}
    for f in files:
        for line in f.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and value.strip() not in values.setdefault(key.strip(), []):
                values[key.strip()].append(value.strip())
    return "".join(f"{k}={', '.join(v)}\n" for k, v in sorted(values.items()))


def merge(root: Path, results: Path, matrices: Path, families: dict[str, str]) -> dict[str, Any]:
    """Merge every job under ``root`` into the Allure ``results`` folder (emptied first) and write the
    conformance matrices ``<matrices>/<backend>/<profile>.{json,md,html}`` (``families``: profile ->
    rule family of its matrix). Returns a summary: jobs, result files, matrices."""
    jobs = find_jobs(root)
    if results.exists():
        shutil.rmtree(results)
    results.mkdir(parents=True)
    count = 0
    envs: list[Path] = []
    columns: dict[tuple[str, str], dict[str, Any]] = {}
    for folder, job in jobs:
        allure = folder / "allure-results"
        for f in sorted(allure.glob("*")) if allure.is_dir() else []:
            if f.name.endswith("-result.json"):
                data = _tag_result(json.loads(f.read_text()), job)
                (results / f.name).write_text(json.dumps(data))
                count += 1
            elif f.name == "environment.properties":
                envs.append(f)
            elif f.is_file() and not (results / f.name).exists():
                shutil.copy2(f, results / f.name)  # attachments, containers, categories.json
        family = families.get(job["profile"])
        if family and job.get("client") and (folder / "histories").is_dir():
            key = (job["backend"], job["profile"])
            columns.setdefault(key, {})[job["client"]] = collect_cells(folder / "histories", family)
    if envs:
        (results / "environment.properties").write_text(_merge_environment(envs))
    written = []
    for (backend, profile), cols in sorted(columns.items()):
        paths = write_matrix(build_matrix(profile, cols, all_rules(cols)), matrices / backend)
        written.append(str(paths["md"]))
    return {"jobs": len(jobs), "results": count, "matrices": written}
