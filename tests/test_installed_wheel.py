"""The harness as another project uses it: the wheel is built from this checkout, installed into a fresh
virtual environment in a temporary folder, and used there as a user would - the set-up, ``doctor``,
the README's test file on the fixtures (a switchover and DUR-1 on psycopg), one shipped suite by
profile name against the README's adapter defined in that folder, the report, and an unrelated
pytest file. The user's commands run with this checkout and the environment's site-packages mounted
read-only (a private mount namespace, as root), so anything written there fails the step; the
site-packages are also compared file by file before and after. The report's rule links must open
the rulebook installed with the package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.checkout import REPO

UNRELATED_TEST = '''
def test_app_logic():
    assert sorted([3, 1, 2]) == [1, 2, 3]
'''


def readme_block(first_line: str) -> str:
    """The README code block whose first line is ``first_line`` (e.g. ``# my_adapters.py``)."""
    text = (REPO / "README.md").read_text()
    for block in re.findall(r"```(?:python|yaml|sh)\n(.*?)```", text, re.S):
        if block.startswith(first_line + "\n"):
            return block
    raise AssertionError(f"the README has no code block starting with {first_line!r}")


def _sources(dest: Path) -> None:
    """Copy the checkout's files (tracked, and new ones not ignored) - a build never writes into it."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The wheel built and installed into a fresh venv outside the checkout; prints the seconds taken."""
    root = Path(tempfile.mkdtemp(prefix="fh-wheel-", dir="/tmp"))
    root.chmod(0o755)  # the database user traverses the harness home below it
    t0 = time.monotonic()
    src, dist, venv = root / "src", root / "dist", root / "venv"
    src.mkdir()
    _sources(src)
    copied = _snapshot(src)
    scratch = root / "build-tmp"  # pip's and setup.py's temporary files: removed with the folder
    scratch.mkdir()
    quiet = {**os.environ, "PYTHONWARNINGS": "ignore", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "TMPDIR": str(scratch)}
    quiet.pop("PYTHONPATH", None)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
                   check=True, env=quiet, capture_output=True, timeout=600)
    wheel = next(dist.glob("failover_harness-*.whl"))
    assert _snapshot(src) == copied  # the build wrote nothing into the source tree (no build/, no egg-info)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], check=True, env=quiet,
                   capture_output=True, timeout=900)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    print(f"[wheel] built and installed in {time.monotonic() - t0:.1f} s: {wheel.name}", file=sys.stderr)
    yield {"root": root, "venv": venv, "site": site, "wheel": wheel}
    shutil.rmtree(root, ignore_errors=True)


def _user_script(project: Path, venv: Path) -> str:
    """The user's commands, one after the other, each with its exit code on a ``== NAME rc`` line."""
    fh = venv / "bin" / "failover-harness"
    steps = {
        "setup": f"{fh} setup",
        "doctor": f"{fh} doctor",
        "user-test": f"{venv / 'bin' / 'pytest'} -q -p no:cacheprovider tests/test_orders.py",
        "suite": f"{fh} run --profile lpq --client my_adapters:make",
        "report": f"{fh} report",
        "unrelated": f"{venv / 'bin' / 'pytest'} -q -p no:cacheprovider other/test_app.py",
    }
    lines = [f"cd {project}"]
    for name, cmd in steps.items():
        lines.append(f"echo '== {name} start' >&2; {cmd} > {name}.out 2>&1; echo \"== {name} $?\" >&2")
    return "\n".join(lines)


def test_the_wheel_works_in_a_project_of_its_own(installed: dict[str, Path]) -> None:
    root, venv, site = installed["root"], installed["venv"], installed["site"]
    project = root / "project"
    (project / "tests").mkdir(parents=True)
    (project / "other").mkdir()
    (project / "tests" / "test_orders.py").write_text(readme_block("# tests/test_orders.py"))
    (project / "my_adapters.py").write_text(readme_block("# my_adapters.py"))
    (project / "other" / "test_app.py").write_text(UNRELATED_TEST)
    home = root / "home"
    from harness.paths import templates_dir

    # a user's environment: the venv first on PATH, no PYTHONPATH; the harness home and tools folder in
    # the temporary folder (the machine's initdb templates and npm cache are shared, for speed)
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8", "FAILOVER_HARNESS_HOME": str(home), "FAILOVER_HARNESS_TOOLS": str(root / "tools"),
           "FAILOVER_HARNESS_TEMPLATES": str(templates_dir()), "TMPDIR": str(root / "tmp")}
    (root / "tmp").mkdir()
    before = _snapshot(site)
    script = _user_script(project, venv)
    read_only = [str(REPO), str(site)]
    if os.geteuid() == 0 and shutil.which("unshare"):
        mounts = " && ".join(f"mount --bind -o ro {p} {p}" for p in read_only)
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f"{mounts} && {script}"]
    else:  # not root: no private mounts; the file-by-file comparisons below still hold
        argv = ["sh", "-c", script]
    t0 = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1500)
    print(f"[wheel] the user's steps took {time.monotonic() - t0:.1f} s", file=sys.stderr)
    codes = dict(re.findall(r"^== (\S+) (\d+)$", done.stderr, re.M))
    outputs = {name: (project / f"{name}.out").read_text() if (project / f"{name}.out").exists() else ""
               for name in ("setup", "doctor", "user-test", "suite", "report", "unrelated")}
    for name in outputs:
        assert codes.get(name) == "0", (f"{name} exited {codes.get(name)}:\n{outputs[name][-3000:]}\n"
                                        f"{done.stderr[-2000:]}")

    # the set-up installed the npm tools into the tools folder; doctor found the local backend usable
    assert (root / "tools" / "node_modules" / ".bin" / "allure").exists()
    assert "backend local (engine postgres): can run here" in outputs["doctor"]
    # the README's test and the shipped suite ran in the project; their outputs are there
    assert "1 passed" in outputs["user-test"]
    assert "3 passed" in outputs["suite"] and "my_adapters:make" in outputs["suite"]
    assert f"results {project / 'reports' / 'allure-results'}" in outputs["suite"]
    histories = sorted(p.name for p in (project / "reports" / "histories").glob("*.jsonl"))
    assert any("test_orders" in h for h in histories) and sum("test_lpq" in h for h in histories) == 3, histories
    report = project / "reports" / "allure-report" / "index.html"
    assert outputs["report"].strip().endswith(str(report)) and report.is_file()
    # the unrelated test file: the plugin loaded, nothing of the harness printed
    assert "1 passed" in outputs["unrelated"]
    assert not [line for line in outputs["unrelated"].splitlines() if "failover-harness" in line
                and not line.startswith("plugins:")]

    # nothing written into site-packages (read-only during the steps, and unchanged file by file)
    assert _snapshot(site) == before
    # the report's rule links open the rulebook installed with the package, at the rule's anchor
    from harness.report.builder import embedded_files

    links = set()
    for name, data in embedded_files(report).items():
        if name.startswith("data/test-cases/"):
            links |= set(re.findall(r"file://([^\"#]+)#([a-z0-9-]+)", data.decode(errors="replace")))
    assert {anchor for _, anchor in links} >= {"lpq-1", "lpq-6"}, links
    for path, anchor in links:
        rulebook = Path(path)
        assert rulebook.is_relative_to(site) and rulebook.is_file(), path
        assert f'<a id="{anchor}"></a>' in rulebook.read_text(), anchor
