"""``failover-harness run`` from a user's project folder: the shipped suites by profile name or by their
``suites/...`` path, ``--client module:attr`` found in the current directory without PYTHONPATH, the
outputs under that folder, ``--history-dir DIR`` as an option of ``run``, and a client of another
profile refused in one line before pytest starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.cli import build_parser
from harness.cli.run_cmds import split_passthrough
from harness.cli.suites import suite_paths
from harness.resources import suites_dir
from tests.support.checkout import REPO

ADAPTER = '''
from harness.clients.persistent.direct import direct

def make(*args, **kwargs):
    return direct(*args, **kwargs)
'''


def _fh(cwd: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The command line run in ``cwd`` with only the harness on PYTHONPATH (not ``cwd``), and the
    default outputs (no ``FAILOVER_HARNESS_REPORTS`` of the caller's)."""
    env = {k: v for k, v in os.environ.items() if k != "FAILOVER_HARNESS_REPORTS"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _one_line(out: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_profile_and_shipped_paths_name_the_shipped_suites(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a project folder with no suites of its own
    assert suite_paths(None, "lpq") == [str(suites_dir() / "lpq")]
    assert suite_paths(None, "cross-cutting,durability") == [str(suites_dir() / "durability")] * 2
    assert suite_paths([], None) == [str(suites_dir())]
    assert suite_paths(["suites/lpq/test_lpq_group.py::test_x"], None) == [
        f"{suites_dir() / 'lpq' / 'test_lpq_group.py'}::test_x"]
    (tmp_path / "mine").mkdir()
    assert suite_paths(["mine"], None) == ["mine"]  # a path of the project itself wins


def test_history_dir_is_an_option_of_run_even_when_the_folder_exists(tmp_path: Path) -> None:
    histories = tmp_path / "h"
    histories.mkdir()  # the second run of the same command: the folder exists by now
    args = build_parser().parse_args(["run", *split_passthrough(["--profile", "lpq", "--history-dir",
                                                                 str(histories)])])
    assert args.history_dir == str(histories) and args.paths == [] and args.profile == "lpq"


def test_bad_profile_path_and_foreign_client_are_one_line(tmp_path: Path) -> None:
    _one_line(_fh(tmp_path, "run", "--profile", "nope"), "no shipped suites for profile 'nope'", "lpq")
    _one_line(_fh(tmp_path, "run", "suites/nope"), "no such suite path", "--profile")
    _one_line(_fh(tmp_path, "run", "suites/lpq", "--client", "persistent/pgbouncer-session"),
              "persistent/pgbouncer-session", "--profile lpq")
    _one_line(_fh(tmp_path, "run", "--profile", "lpq", "--client", "nowhere_module:make"),
              "cannot import module 'nowhere_module'")
    assert not (tmp_path / "reports" / "allure-results").exists() or not any(
        (tmp_path / "reports" / "allure-results").iterdir())


def test_module_attr_client_is_found_in_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "my_adapters.py").write_text(ADAPTER)
    out = _fh(tmp_path, "run", "--profile", "persistent", "--client", "my_adapters:make", "--co", "-q")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "test_per_state.py::" in out.stdout  # the shipped persistent suites were collected
    assert f"rootdir: {tmp_path}" in out.stdout or str(tmp_path) in out.stderr
    assert f"results {tmp_path / 'reports' / 'allure-results'}" in out.stderr  # printed once at start
    assert out.stderr.count("[failover-harness] results ") == 1
    assert (tmp_path / "reports" / "allure-results").is_dir()


def test_matrix_and_nightly_find_the_shipped_suites_and_the_adapter_here(tmp_path: Path) -> None:
    (tmp_path / "my_adapters.py").write_text(ADAPTER)
    # every column is resolved before any suite runs: my_adapters:make imports from here, the next one not
    _one_line(_fh(tmp_path, "matrix", "--profile", "persistent", "--clients", "my_adapters:make,no_such_mod:make"),
              "cannot import module 'no_such_mod'")
    _one_line(_fh(tmp_path, "matrix", "--profile", "nope"), "unknown profile 'nope'")
    out = _fh(tmp_path, "nightly", "--job", "--profile", "nope", "--out", str(tmp_path / "job"))
    _one_line(out, "unknown profile 'nope'")
