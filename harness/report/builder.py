"""Build the offline Allure 2 HTML report from an ``allure-results`` folder.

Uses the npm ``allure-commandline`` installed under ``tools/node_modules`` by ``make setup`` (Allure 2
needs Java). Before generating it copies the trend folder ``history/`` of the previous report into the
results (so trend charts continue) and writes ``categories.json`` / ``environment.properties`` when
the run did not.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

from harness.errors import ConfigError, HarnessError, MissingDependencyError
from harness.paths import reports_dir, tools_home, unwritable_reason
from harness.report.allure import (
    RUN_PARAMETERS,
    collect_environment,
    read_environment,
    runs_in_results,
    write_categories,
    write_environment,
)


def allure_candidates() -> list[Path]:
    """Where the Allure command line is looked for, in order: env ``FAILOVER_HARNESS_ALLURE``; the
    tools folder ``failover-harness setup`` installs into (:func:`harness.paths.tools_home`); a
    checkout's ``tools/`` (``make setup``); ``allure`` on PATH."""
    override = os.environ.get("FAILOVER_HARNESS_ALLURE")
    if override:
        return [Path(override)]
    from harness.resources import checkout_root

    found = [tools_home() / "node_modules" / ".bin" / "allure"]
    root = checkout_root()
    if root is not None:
        found.append(root / "tools" / "node_modules" / ".bin" / "allure")
    on_path = shutil.which("allure")
    if on_path:
        found.append(Path(on_path))
    return found


def allure_binary() -> Path:
    """The first Allure command line of :func:`allure_candidates` that exists. Raises
    MissingDependencyError naming ``failover-harness setup`` when there is none."""
    candidates = allure_candidates()
    for path in candidates:
        if path.exists() and os.access(path, os.X_OK):
            return path
    raise MissingDependencyError(
        f"the Allure command line is not installed ({candidates[0]} is missing); run `failover-harness setup` "
        "(it installs it there with npm)")


def java_binary() -> str:
    """The ``java`` Allure 2 runs on (``$JAVA_HOME/bin/java`` or PATH); MissingDependencyError else."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise MissingDependencyError("Java is not installed (Allure 2 needs it); run `failover-harness setup` "
                                     "(Debian: apt-get install -y default-jre-headless)")
    return found


_EMBEDDED = re.compile(r"d\('([^']+)','([A-Za-z0-9+/=]*)'\)")


def embedded_files(index_html: Path) -> dict[str, bytes]:
    """The files a single-file Allure 2 report embeds (``data/...``, ``widgets/...``, ``history/...``),
    decoded from their base64 form: path -> content."""
    text = Path(index_html).read_text(encoding="utf-8", errors="replace")
    return {name: base64.b64decode(data) for name, data in _EMBEDDED.findall(text)}


def carry_trend_history(previous_report: Path, results: Path) -> bool:
    """Put the previous report's trend folder ``history/`` into ``results/history`` so the new
    report's trend charts include the earlier runs. Reads the folder of a multi-file report or the
    embedded copy of a single-file one. Returns True when there was a history to carry."""
    previous_report, target = Path(previous_report), Path(results) / "history"
    source = previous_report / "history"
    files: dict[str, bytes] = {}
    if source.is_dir():
        files = {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()}
    elif (previous_report / "index.html").is_file():
        embedded = embedded_files(previous_report / "index.html")
        files = {name.split("/", 1)[1]: data for name, data in embedded.items()
                 if name.startswith("history/") and "/" not in name.split("/", 1)[1]}
    if not files:
        return False
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name, data in files.items():
        (target / name).write_bytes(data)
    return True


def list_runs(results: Path) -> dict[str, str]:
    """Make the environment block name every engine, backend and client the results were run with
    (their Allure parameters), whatever each run wrote; returns the environment written."""
    env = read_environment(results)
    runs = runs_in_results(results)
    for key in RUN_PARAMETERS:
        if runs[key]:
            env[key] = ", ".join(runs[key])
    write_environment(results, env)
    return env


def _require_writable(folder: Path, option: str) -> None:
    reason = unwritable_reason(folder)
    if reason:
        raise ConfigError(f"cannot write the report into {folder} ({reason}); choose a folder you can write "
                          f"with {option}")


def build_report(results: Path | None = None, output: Path | None = None, *, single_file: bool = True,
                 environment: dict[str, str] | None = None, timeout: float = 300,
                 history_from: Path | None = None) -> Path:
    """Generate the Allure report of ``results`` (default ``reports/allure-results``) into ``output``
    (default ``reports/allure-report``) and return the HTML file (``index.html``).

    ``single_file=True`` makes one self-contained HTML (offline, no web server needed). The previous
    report's trend history is carried over; ``categories.json`` and ``environment.properties`` are
    written when missing (``environment`` overrides the detected values). ``history_from``: carry the
    trend from that earlier report instead (the previous nightly's; ConfigError when it holds none)."""
    results = Path(results) if results is not None else reports_dir() / "allure-results"
    output = Path(output) if output is not None else reports_dir() / "allure-report"
    _require_writable(output, "--output")  # before Allure: it would replace a file by a folder, or throw a stack
    if results.is_dir():
        _require_writable(results, "--results")  # the trend history and categories are written there
    if not results.is_dir():
        raise ConfigError(f"no Allure results at {results}; run the suites with --alluredir {results} "
                          "(make chaos does) or pass --results")
    if history_from is not None:
        if not carry_trend_history(Path(history_from), results):
            raise ConfigError(f"no Allure trend history in {history_from} (expected history/ or a single-file "
                              "index.html of an earlier report)")
    else:
        carry_trend_history(output, results)
    allure = allure_binary()
    java = java_binary()
    write_categories(results, overwrite=False)
    if not (results / "environment.properties").exists():
        write_environment(results, environment or collect_environment(
            "not recorded", "not recorded", None, extra={"client": "not recorded"}))
    list_runs(results)
    env = dict(os.environ, ALLURE_NO_ANALYTICS="true")
    env.setdefault("JAVA_HOME", str(Path(java).resolve().parent.parent))
    cmd = [str(allure), "generate", str(results), "-o", str(output), "--clean"]
    if single_file:
        cmd.append("--single-file")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"allure generate did not finish within {timeout:.0f} s") from None
    index = output / "index.html"
    if proc.returncode != 0 or not index.exists():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise HarnessError(f"allure generate failed (exit {proc.returncode}):\n{tail}")
    return index.resolve()
