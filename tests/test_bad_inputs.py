"""Every bad input to the real command line is one line on stderr naming what is
wrong and the fix, with exit code 2 (usage/config) or 3 (harness), and never a traceback.

Each probe runs ``python -m harness.cli ...`` as a user would, against a real detached run (real
PostgreSQL pair behind the embedded fault proxy) where it needs one. :func:`probes` is also what the
before/after count of the issue's note was made with (the same list against the code before it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

FH = [sys.executable, "-m", "harness.cli"]
LONG_ID = "x" * 300

TINY_SUITE = '''
import pytest

@pytest.mark.rule("DUR-1")
def test_cross_cutting_only(history):
    history.record("op.ok", f="write", value=1)
'''


@dataclass(frozen=True)
class Probe:
    """One bad input: the command line after ``failover-harness`` and a fragment its error line names."""

    name: str
    argv: list[str]
    says: str


def write_inputs(root: Path) -> dict[str, Path]:
    """The files the probes need: two real saved histories (mirroring retries, persistent sessions),
    histories with a wrong header or meta, a folder, a plain file, an empty results folder, a tiny
    suite of one cross-cutting test."""
    from harness.history.store import save_jsonl
    from harness.history.synthetic import mirroring_retry_history, switchover_sessions_history

    files = {"mir": save_jsonl(mirroring_retry_history(), root / "mir.jsonl"),
             "per": save_jsonl(switchover_sessions_history(), root / "per.jsonl")}
    first, *rest = (root / "mir.jsonl").read_text().splitlines()
    good = json.loads(first)
    bad_heads = {
        "verdicts_number": {**good, "meta": {**good["meta"], "verdicts": 5}},
        "rule_id_number": {**good, "meta": {**good["meta"], "verdicts": [{"rule_id": 3, "valid": True}]}},
        "origin_text": {**good, "meta": {**good["meta"], "monotonic_origin": "soon"}},
        "rule_params_number": {**good, "meta": {**good["meta"], "rule_params": {"MIR-5": 3}}},
        "version_text": {**good, "version": "one"},
        "meta_list": {**good, "meta": ["not", "an", "object"]},
        "params_list": {**good, "meta": {**good["meta"], "verdicts": [
            {"rule_id": "MIR-5", "valid": True, "details": {"params": [15]}}]}},
    }
    for name, head in bad_heads.items():
        path = root / f"bad-{name}.jsonl"
        path.write_text("\n".join([json.dumps(head), *rest]) + "\n")
        files[name] = path
    (root / "folder").mkdir()
    (root / "results").mkdir()
    (root / "plain-file").write_text("not a folder\n")
    (root / "plain-file-2").write_text("not a report folder either\n")
    (root / "test_tiny.py").write_text(TINY_SUITE)
    files.update(folder=root / "folder", results=root / "results", file=root / "plain-file",
                 file2=root / "plain-file-2",
                 suite=root / "test_tiny.py")
    return files


def probes(run: str, f: dict[str, Path]) -> list[Probe]:
    """Every bad input the tests try (``run``: a live detached run; ``f``: from :func:`write_inputs`)."""
    mir, per, folder, file = str(f["mir"]), str(f["per"]), str(f["folder"]), str(f["file"])
    tiny = [str(f["suite"]), "--results", str(f["results"])]
    check = ["check", mir, "--param", "initial=A", "--param", "failover=B", "--rules"]  # the partners of ``mir``
    return [
        # fault arguments: finite, in range
        Probe("latency-nan", ["fault", "--run", run, "latency", "n1", "nan"], "finite number of milliseconds"),
        Probe("latency-1e400", ["fault", "--run", run, "latency", "n1", "1e400"], "not inf"),
        Probe("latency-negative", ["fault", "--run", run, "latency", "n1", "-5"], ">= 0"),
        Probe("latency-beyond-a-day", ["fault", "--run", run, "latency", "n1", "1e12"], "<= 86400000"),
        Probe("latency-text", ["fault", "--run", run, "latency", "n1", "soon"], "number of milliseconds"),
        Probe("jitter-nan", ["fault", "--run", run, "latency", "n1", "5", "--jitter", "nan"], "--jitter"),
        Probe("jitter-1e400", ["fault", "--run", run, "latency", "n1", "5", "--jitter", "1e400"], "--jitter"),
        Probe("jitter-text", ["fault", "--run", run, "latency", "n1", "5", "--jitter", "abc"], "--jitter"),
        Probe("latency-unknown-node", ["fault", "--run", run, "latency", "n9", "5"], "unknown node 'n9'"),
        # run IDs follow a pattern
        Probe("status-300-char-id", ["status", "--run", LONG_ID], "not a run ID"),
        Probe("status-path-id", ["status", "--run", "../../etc"], "not a run ID"),
        Probe("status-empty-id", ["status", "--run", ""], "not a run ID"),
        Probe("fault-300-char-id", ["fault", "--run", LONG_ID, "switchover"], "not a run ID"),
        Probe("down-300-char-id", ["down", "--run", LONG_ID], "not a run ID"),
        # --param values against each checker's annotated types
        Probe("param-login-timeout-text", [*check, "MIR-5", "--param", "login_timeout=abc"], "login_timeout"),
        Probe("param-login-timeout-inf", [*check, "MIR-3", "--param", "login_timeout=Infinity"], "finite"),
        Probe("param-initial-number", [*check, "MIR-1", "--param", "initial=5"], "initial"),
        Probe("param-failover-number", [*check, "MIR-4", "--param", "failover=5"], "failover"),
        Probe("param-delays-text", [*check, "MIR-7", "--param", "delays=soon"], "delays"),
        Probe("param-tolerance-list", [*check, "MIR-13", "--param", "tolerance=[1]"], "tolerance"),
        Probe("param-min-keep-rate-nan", ["check", per, "--rules", "PER-1", "--param", "min_keep_rate=nan"],
              "min_keep_rate"),
        Probe("param-min-keep-rate-NaN", ["check", per, "--rules", "PER-1", "--param", "min_keep_rate=NaN"],
              "finite"),
        Probe("param-max-errors-fraction", ["check", per, "--rules", "PER-1", "--param", "max_errors=1.5"],
              "max_errors"),
        Probe("param-processes-number", ["check", per, "--rules", "PER-3", "--param", "processes=5"], "processes"),
        Probe("param-drain-window-text", ["check", per, "--rules", "PER-4", "--param", "drain_window=long"],
              "drain_window"),
        Probe("param-mode-number", ["check", mir, "--rules", "DUR-1", "--param", "mode=5"], "mode"),
        # history headers and meta against the schema
        *[Probe(f"history-{name}", ["check", str(f[name])], field) for name, field in (
            ("verdicts_number", "meta.verdicts"), ("rule_id_number", "meta.verdicts[0].rule_id"),
            ("rule_params_number", "meta.rule_params"), ("version_text", "version"), ("meta_list", "meta"),
            ("params_list", "details.params"))],
        Probe("timeline-origin-text", ["timeline", str(f["origin_text"]), "-o", str(f["folder"] / "t.svg")],
              "meta.monotonic_origin"),
        # paths: a file where a folder is wanted and the other way round, unwritable places
        Probe("check-a-folder", ["check", folder], "is a folder"),
        Probe("timeline-a-folder", ["timeline", folder], "is a folder"),
        Probe("timeline-output-a-folder", ["timeline", mir, "-o", folder], "is a folder"),
        Probe("timeline-output-unwritable", ["timeline", mir, "-o", "/proc/fh-no/t.svg"], "cannot write"),
        Probe("report-unwritable-output", ["report", "--results", str(f["results"]), "--output", "/proc/fh-report"],
              "cannot write the report"),
        Probe("report-output-a-file", ["report", "--results", str(f["results"]), "--output", str(f["file2"])],
              "is a file"),
        Probe("report-results-a-file", ["report", "--results", file], "no Allure results"),
        Probe("run-results-a-file", ["run", str(f["suite"]), "--results", file], "is a file"),
        # no silent acceptance of an unknown client, whatever the suite
        Probe("run-unknown-client", ["run", *tiny, "--client", "nosuch"], "unknown client 'nosuch'"),
        Probe("run-unknown-profile-client", ["run", *tiny, "--client", "mirroring/nosuch"],
              "for profile mirroring"),
        Probe("run-client-import-fails", ["run", *tiny, "--client", "nomodule_xyz:make"], "cannot import"),
        # argparse's own errors are one line too
        Probe("up-bad-mode", ["up", "--mode", "sideways"], "invalid choice"),
        Probe("check-no-history", ["check"], "required"),
    ]


PROBE_NAMES = [p.name for p in probes("RUN", {k: Path(k) for k in (
    "mir", "per", "folder", "file", "file2", "results", "suite", "verdicts_number", "rule_id_number", "origin_text",
    "rule_params_number", "version_text", "meta_list", "params_list")})]


@pytest.fixture(scope="module")
def bad_input_world() -> Iterator[tuple[dict[str, str], dict[str, Probe]]]:
    """A harness home of its own with one detached pair behind the embedded fault proxy, and the files."""
    from harness.paths import templates_dir

    root = Path(tempfile.mkdtemp(prefix="fh-bad-inputs-", dir="/tmp"))
    root.chmod(0o755)
    env = dict(os.environ, FAILOVER_HARNESS_HOME=str(root / "home"), FAILOVER_HARNESS_TEMPLATES=str(templates_dir()),
               FAILOVER_HARNESS_REPORTS=str(root / "reports"))
    up = subprocess.run(FH + ["up", "--detach", "--json"], env=env, capture_output=True, text=True, timeout=180)
    assert up.returncode == 0, up.stderr
    run = json.loads(up.stdout)["run"]
    try:
        yield env, {p.name: p for p in probes(run, write_inputs(root))}
    finally:
        subprocess.run(FH + ["down", "--all"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("name", PROBE_NAMES)
def test_bad_input_is_one_line_and_exit_2_or_3(bad_input_world: tuple[dict[str, str], dict[str, Probe]],
                                               name: str) -> None:
    env, by_name = bad_input_world
    probe = by_name[name]
    out = subprocess.run(FH + probe.argv, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    assert out.returncode in (2, 3), (out.returncode, out.stdout[-2000:], out.stderr)
    assert len(lines) == 1, lines
    assert probe.says in lines[0] and lines[0].startswith("failover-harness"), lines[0]


def test_a_bad_fault_number_leaves_the_run_untouched(bad_input_world: tuple[dict[str, str], dict[str, Probe]]) -> None:
    """Refused before the run is touched: no toxic was added by any of the bad latency probes."""
    env, by_name = bad_input_world
    run = by_name["latency-nan"].argv[2]
    subprocess.run(FH + by_name["latency-1e400"].argv, env=env, capture_output=True, timeout=60)
    status = json.loads(subprocess.run(FH + ["status", "--run", run, "--json"], env=env, capture_output=True,
                                       text=True, timeout=60).stdout)
    from harness.toxiproxy.client import ToxiproxyClient

    client = ToxiproxyClient(status["fault_proxy"]["url"], timeout=5)
    assert all(not client.get_proxy(p["client"]).toxics for p in status["fault_proxy"]["proxies"].values())
    ok = subprocess.run(FH + ["fault", "--run", run, "latency", "n1", "5", "--jitter", "1"], env=env,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr  # a good one still works on the same run
    subprocess.run(FH + ["fault", "--run", run, "heal"], env=env, capture_output=True, timeout=60)


def test_an_unexpected_error_is_an_internal_error_line_with_a_log(tmp_path: Path) -> None:
    """The catch-all at the CLI entry: any exception that is not a harness error becomes one line saying
    "internal error, please report" and naming a log file that holds the traceback; exit 3."""
    env = dict(os.environ, FAILOVER_HARNESS_HOME=str(tmp_path / "home"))
    script = ("import sys\nimport harness.cli.report_cmds as r\n"
              "def boom(args):\n    raise RuntimeError('boom in ' + str(args.history))\n"
              "r.cmd_timeline = boom\nfrom harness.cli import main\nsys.exit(main(['timeline', 'h.jsonl']))\n")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 3 and len(lines) == 1, out.stderr
    assert "internal error, please report" in lines[0] and "RuntimeError: boom in h.jsonl" in lines[0]
    log = Path(lines[0].rsplit("the traceback is in ", 1)[1])
    assert log.parent == tmp_path / "home" / "logs" and "Traceback" in log.read_text()
    assert "Traceback" not in out.stdout + out.stderr


WRONG_VALUES = (5, "abc", float("nan"), float("inf"), {"a": 1}, [None], True)
PARTNERS = {"initial": "A", "failover": "B"}


def test_every_rule_parameter_pair_refuses_a_wrong_type_as_a_config_error() -> None:
    """Each annotated parameter of every registered checker, given values of the wrong type or not
    finite: a ConfigError naming the rule and the parameter, or (where the value fits the type) a
    verdict - never a TypeError/ValueError from inside the checker (28 of these 74 pairs crashed before)."""
    from harness.errors import ConfigError
    from harness.history.synthetic import mirroring_retry_history, switchover_sessions_history
    from harness.rules import registry
    from harness.rules.params import annotated_params

    histories = [mirroring_retry_history(), switchover_sessions_history()]
    refused: set[tuple[str, str]] = set()
    pairs = 0
    for rule_id in registry.all_rules():
        entry = registry.get(rule_id)
        typed = annotated_params(entry.checker)
        assert set(typed) | {"process"} >= set(entry.accepted_params() or []), rule_id
        base = {k: v for k, v in PARTNERS.items() if k in typed}  # the synthetic partners: checkers get going
        for name in typed:
            pairs += 1
            for value in WRONG_VALUES:
                for history in histories:
                    try:
                        entry.check(history, **{**base, name: value})
                    except ConfigError as exc:  # ours, or the checker's own for a value of the right type
                        if str(exc).startswith(f"{rule_id}: parameter {name}=") and "e.g." in str(exc):
                            refused.add((rule_id, name))
    assert pairs >= 60 and len(refused) == pairs  # every typed parameter refuses some wrong value


def test_good_parameters_still_reach_the_checker_converted_to_their_type() -> None:
    from harness.history.synthetic import mirroring_retry_history
    from harness.rules import registry

    verdict = registry.check("MIR-5", mirroring_retry_history(), login_timeout=15, tolerance=0.05, **PARTNERS)
    assert verdict.details["params"]["login_timeout"] == 15 and verdict.valid is not None
