"""``failover-harness setup`` (idempotent, progress lines, the npm tools into the tools folder, the exact
apt command when it may not install) and ``failover-harness doctor`` (every dependency present or
missing with its install command; exit 0 only when the chosen backend can run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.checkout import REPO

FH = [sys.executable, "-m", "harness.cli"]


def _fh(*argv: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FH, *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def test_doctor_lists_every_dependency_and_passes_for_the_local_backend() -> None:
    out = _fh("doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    for name in ("PostgreSQL 15 server", "MariaDB server", "Java runtime", "Node.js", "Allure command line",
                 "Docker engine", "Compose v2", "real Toxiproxy 2.12"):
        assert any(name in line and line.split()[0] in ("present", "MISSING") for line in out.stdout.splitlines()), name
    assert "postgres (PostgreSQL) 15." in out.stdout  # the version, not only the file
    assert out.stdout.rstrip().endswith("backend local (engine postgres): can run here")


def test_doctor_fails_for_a_backend_that_cannot_run_and_names_the_fix(tmp_path: Path) -> None:
    out = _fh("doctor", "--backend", "compose", env={"PATH": str(tmp_path)})  # no docker on this PATH
    assert out.returncode == 1, out.stdout + out.stderr
    missing = [line for line in out.stdout.splitlines() if line.strip().startswith("MISSING")]
    assert any("Docker CLI" in line and "failover-harness compose-setup" in line for line in missing), missing
    assert "backend compose (engine postgres): CANNOT run here" in out.stdout


def test_setup_installs_the_npm_tools_into_the_tools_folder_once(tmp_path: Path) -> None:
    env = {"FAILOVER_HARNESS_TOOLS": str(tmp_path / "tools")}
    first = _fh("setup", "--skip-system", env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "npm ci in" in first.stderr and all(line.startswith("[setup] ") for line in first.stderr.splitlines())
    allure = tmp_path / "tools" / "node_modules" / ".bin" / "allure"
    assert allure.exists() and (tmp_path / "tools" / "drivers" / "node" / "node_modules" / "pg").is_dir()
    second = _fh("setup", "--skip-system", env=env)
    assert second.returncode == 0 and "npm ci" not in second.stderr, second.stderr  # idempotent
    assert second.stderr.count("present in") == 2
    doctor = _fh("doctor", env={**env, "FAILOVER_HARNESS_HOME": str(tmp_path / "home")})
    assert f"present  Allure command line        {allure}" in doctor.stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None or not Path("/usr/bin/python3").exists(),
                    reason="needs root to become another user, and the system's python3")
def test_setup_without_root_prints_the_exact_command(tmp_path: Path) -> None:
    code = ("import sys; from harness.cli.deps import install_system; "
            "sys.exit(0 if install_system(['fh-no-such-package']) else 1)")
    # the system's python: the set-up's system step runs on the standard library alone, before any venv
    out = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", code], capture_output=True,
                         text=True, timeout=60, cwd="/", env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 1, out.stderr
    assert "[setup] install them with: sudo apt-get install -y --no-install-recommends fh-no-such-package" in out.stderr
