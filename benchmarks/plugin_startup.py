"""What the harness's pytest plugin costs an unrelated pytest run of the same environment (README, "Use
it in your project"): the wall time of ``python -m pytest -q`` on a small test file that uses no
harness fixture, with the plugin loaded (as it always is once the harness is installed) and with it
blocked (``-p no:failover_harness``), run in alternation so both see the same machine load.

The figure is the median of the per-pair differences, with a distribution-free 90 % interval, judged
against the target (under 50 ms). On a loaded machine the whole runs vary by more than the plugin
costs, so a second, steadier figure isolates the part the plugin adds: the time to import it (with
pytest already imported) in fresh interpreters; its hooks do nothing further in such a run::

    python benchmarks/plugin_startup.py [--rounds 21] [--python PATH]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.report.targets import median_interval, verdict_text  # noqa: E402

TARGET_MS = 50.0
APP_TEST = '''
def test_sorts():
    assert sorted([3, 1, 2]) == [1, 2, 3]

def test_joins():
    assert "-".join(["a", "b"]) == "a-b"
'''


def _once(python: str, folder: Path, blocked: bool) -> float:
    """Seconds of one ``pytest -q`` run of the app's test file (plugin loaded, or blocked)."""
    argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"]
    if blocked:
        argv += ["-p", "no:failover_harness"]
    t0 = time.perf_counter()
    out = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - t0
    if out.returncode != 0 or "2 passed" not in out.stdout:
        raise SystemExit(f"the app's tests did not pass ({'blocked' if blocked else 'loaded'}): {out.stdout[-500:]}")
    return seconds


IMPORT_PROBE = ("import time, pytest; t = time.perf_counter(); import harness.plugin; "
                "print(time.perf_counter() - t)")


def import_seconds(python: str, rounds: int) -> list[float]:
    """Seconds to import the plugin module after pytest, each in a fresh interpreter."""
    return [float(subprocess.run([python, "-c", IMPORT_PROBE], capture_output=True, text=True, check=True,
                                 timeout=60).stdout) for _ in range(rounds)]


def measure(python: str, rounds: int) -> dict[str, list[float]]:
    """Per round: the loaded run's and the blocked run's seconds (alternating which goes first)."""
    loaded: list[float] = []
    blocked: list[float] = []
    with tempfile.TemporaryDirectory(prefix="fh-plugin-startup-") as tmp:
        folder = Path(tmp)
        (folder / "test_app.py").write_text(APP_TEST)
        _once(python, folder, False), _once(python, folder, True)  # warm the file cache
        for i in range(rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            for is_blocked in order:
                (blocked if is_blocked else loaded).append(_once(python, folder, is_blocked))
    return {"loaded": loaded, "blocked": blocked}


def main() -> int:
    """Measure and print the plugin's start-up overhead and its verdict against the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--python", default=sys.executable, help="the environment's python (default: this one)")
    args = parser.parse_args()
    runs = measure(args.python, args.rounds)
    diffs_ms = [(a - b) * 1000 for a, b in zip(runs["loaded"], runs["blocked"], strict=True)]
    loaded = median_interval([s * 1000 for s in runs["loaded"]])
    blocked = median_interval([s * 1000 for s in runs["blocked"]])
    print(f"pytest -q of an unrelated test file, {args.rounds} rounds, {args.python}")
    print(f"  plugin loaded : {loaded.text(' ms', digits=0)}")
    print(f"  plugin blocked: {blocked.text(' ms', digits=0)}")
    print("  overhead      : " + verdict_text(median_interval(diffs_ms), TARGET_MS, at_least=False, unit=" ms",
                                              what="pairs"))
    imports_ms = [s * 1000 for s in import_seconds(args.python, args.rounds)]
    print("  plugin import : " + verdict_text(median_interval(imports_ms), TARGET_MS, at_least=False, unit=" ms",
                                              what="interpreters"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
