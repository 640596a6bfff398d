"""A wheel built where no C compiler works (``CC=false``; setup.py's extension is optional) installs and
runs the persistent proxy on its pure-Python framing and tracking: the wheel holds no compiled module,
the installed package says it runs the Python twins (``frames.COMPILED`` and ``fastpath.COMPILED``
false), and some of the proxy's end-to-end tests pass against the installed package - a copy of the
tests with no ``harness/`` beside them, so the package can only come from the wheel. The dependencies
are this environment's (a ``.pth`` file), so nothing is downloaded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_installed_wheel import _sources

#: A few of the proxy's end-to-end tests: state kept across a switchover, twenty busy sessions, the CLI
#: proxy, lazy re-prepare, a pipeline across a switchover.
E2E = ("test_session_state_survives_switchover or test_twenty_busy_sessions_all_kept or "
       "test_cli_persistent_proxy or test_lazy_re_prepare_sends_each_statement_at_its_first_use or "
       "test_pipeline_mode_across_switchover")

PROBE = """
import sys, harness
from harness.persistproxy import fastpath, frames
print(harness.__file__, frames.COMPILED, fastpath.COMPILED, "harness.persistproxy._frames" in sys.modules)
"""


@pytest.fixture(scope="module")
def no_compiler_install() -> Iterator[dict[str, Path]]:
    """The wheel built with ``CC=false``, installed into a fresh venv; yields its paths."""
    root = Path(tempfile.mkdtemp(prefix="fh-nocc-", dir="/tmp"))
    root.chmod(0o755)  # the database user traverses the harness home below it
    src, dist, venv, run = root / "src", root / "dist", root / "venv", root / "run"
    src.mkdir()
    _sources(src)
    env = {**os.environ, "CC": "false", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "TMPDIR": str(root)}
    env.pop("PYTHONPATH", None)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
                   check=True, env=env, capture_output=True, timeout=600)
    wheel = next(dist.glob("failover_harness-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", str(wheel)], check=True, env=env, capture_output=True, timeout=600)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run.mkdir()
    for name in ("tests", "conftest.py", "pyproject.toml"):
        (shutil.copytree if (src / name).is_dir() else shutil.copy2)(src / name, run / name)
    try:
        yield {"wheel": wheel, "venv": venv, "site": site, "run": run}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYTHONPATH", "FAILOVER_HARNESS_PURE_PYTHON"):
        env.pop(name, None)  # the Python path must come from the install alone, not from the switch
    return env


def test_the_wheel_holds_no_compiled_module(no_compiler_install: dict[str, Path]) -> None:
    names = zipfile.ZipFile(no_compiler_install["wheel"]).namelist()
    assert "harness/persistproxy/frames.py" in names
    assert not [n for n in names if n.endswith(".so")], names


def test_the_installed_package_runs_the_python_data_path(no_compiler_install: dict[str, Path]) -> None:
    venv, site = no_compiler_install["venv"], no_compiler_install["site"]
    res = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], cwd=no_compiler_install["run"], env=_env(),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    where, framing, tracking, loaded = res.stdout.split()
    assert Path(where).is_relative_to(site)
    assert (framing, tracking, loaded) == ("False", "False", "False")


def test_the_proxy_end_to_end_tests_pass_on_the_install(no_compiler_install: dict[str, Path]) -> None:
    venv, run = no_compiler_install["venv"], no_compiler_install["run"]
    assert not (run / "harness").exists()
    res = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_persistent_proxy.py", "-k", E2E], cwd=run, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "5 passed" in res.stdout, res.stdout[-2000:]
