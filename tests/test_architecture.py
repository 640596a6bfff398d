"""The architecture contract (pyproject.toml ``[tool.importlinter]``, docs/architecture.md): it holds on
the tree, and a deliberate back-import breaks it - so the contract can fail, and CI would see it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def _copy_of_the_tree(dest: Path) -> Path:
    shutil.copytree(REPO / "harness", dest / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=120)


def test_contracts_hold_and_a_back_import_breaks_them(tmp_path: Path) -> None:
    tree = _copy_of_the_tree(tmp_path)
    clean = _lint(tree)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "Contracts: 6 kept, 0 broken." in clean.stdout
    with (tree / "harness" / "topology" / "run.py").open("a") as fh:  # topology must never know faults
        fh.write("\nimport harness.faults  # deliberate back-import\n")
    with (tree / "harness" / "rules" / "verdict.py").open("a") as fh:  # checkers do no I/O
        fh.write("\nimport psycopg  # deliberate database import\n")
    with (tree / "harness" / "rules" / "durability.py").open("a") as fh:
        fh.write("\nimport pymysql  # deliberate database import\n")
    with (tree / "harness" / "capture" / "tcp.py").open("a") as fh:  # capture: standard library and errors only
        fh.write("\nimport harness.paths  # deliberate harness import\nimport yaml  # deliberate third-party import\n")
    broken = _lint(tree)
    assert broken.returncode != 0
    assert "harness.topology is not allowed to import harness.faults" in broken.stdout
    assert "harness.rules is not allowed to import psycopg" in broken.stdout
    assert "harness.rules is not allowed to import pymysql" in broken.stdout
    assert "harness.capture is not allowed to import harness.paths" in broken.stdout
    assert "harness.capture is not allowed to import yaml" in broken.stdout
    assert "No cycles are allowed in harness." in broken.stdout  # topology <-> faults is a cycle too
