"""``failover-harness run [PATH ...] [--profile NAME] [pytest options] [-- pytest options]``: run suites
with pytest and the harness plugin, writing Allure results to ``reports/allure-results`` of the
current directory. Exit code = pytest's (0 all kept, 1 violations or harness errors, 5 nothing
collected).

With neither PATH nor ``--profile`` every profile's shipped suites run; ``--profile lpq`` (or
``--profile lpq,persistent``) picks profiles. A PATH that does not exist here but names a shipped
suite (``suites/lpq``, ``suites/lpq/test_lpq_group.py::test_x``) runs the shipped one. The current
directory is pytest's rootdir (histories go to ``./reports/histories``) and is importable, so
``--client my_adapters:make`` finds ``./my_adapters.py`` as ``python -m`` would.

Options ``run`` does not know go to pytest as they are (``run suites/lpq -x --maxfail=2 -p
no:cacheprovider``), and so does everything after ``--`` (``run suites -- -k lpq``);
``--pytest-arg=X`` still works. An unknown option's value is recognised as such when it is not an
existing path (``-p no:cacheprovider``); write ``--opt=value`` or put it after ``--`` to be sure."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from harness.cli.suites import check_client_for_paths, import_from_cwd, suite_paths
from harness.errors import ConfigError
from harness.paths import harness_home, reports_dir, unwritable_reason


def pytest_args(args: argparse.Namespace) -> list[str]:
    """The pytest command line for ``run`` (also used by ``matrix``); the backend, engine and client are
    checked first, so a bad one is one line and exit 2 before pytest starts (no silent acceptance)."""
    from harness.clients.registry import check_client_spec
    from harness.topology import resolve

    resolve(args.backend, args.engine)
    import_from_cwd()
    check_client_spec(args.client)
    paths = suite_paths(args.paths, getattr(args, "profile", None))
    check_client_for_paths(args.client, paths)
    results = Path(args.results) if args.results else reports_dir() / "allure-results"
    argv = [*paths, f"--alluredir={results}", f"--fh-backend={args.backend}", f"--fh-engine={args.engine}",
            "-p", "no:cacheprovider", "-o", "testpaths=suites", "-ra",
            # this process imported the harness before pytest: it cannot rewrite the plugin's asserts (it has none)
            "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    if not any(a == "--rootdir" or a.startswith("--rootdir=") for a in args.pytest_args or []):
        argv.append(f"--rootdir={Path.cwd()}")  # the user's project, not the installed package
    if args.client:
        argv.append(f"--fh-client={args.client}")
    if getattr(args, "topology", None):
        argv.append(f"--fh-topology={args.topology}")
    if args.keep_on_failure:
        argv.append("--fh-keep-on-failure")
    if getattr(args, "history_dir", None):
        argv.append(f"--fh-history-dir={Path(args.history_dir).absolute()}")
    if args.jobs and args.jobs != "1":
        argv += ["-n", str(args.jobs)]
    if args.select:
        argv += ["-k", args.select]
    if args.markers:
        argv += ["-m", args.markers]
    return argv + list(args.pytest_args or [])


def cmd_run(args: argparse.Namespace) -> int:
    """Run the suites; returns pytest's exit code."""
    import pytest

    argv = pytest_args(args)
    results = Path(args.results) if args.results else reports_dir() / "allure-results"
    reason = unwritable_reason(results)
    if reason:
        raise ConfigError(f"cannot write Allure results into {results} ({reason}); choose a folder with --results")
    if results.exists() and not args.append_results:
        shutil.rmtree(results)  # one run, one set of results (trends come from the previous report)
    print_locations(results, Path(args.history_dir).absolute() if getattr(args, "history_dir", None) else None)
    print(f"[failover-harness] pytest {' '.join(argv)}", file=sys.stderr, flush=True)
    return int(pytest.main(argv))


def print_locations(results: Path, histories: Path | None) -> None:
    """Say once, at start, where this run writes: results, histories, run state and logs."""
    if histories is None:
        env = os.environ.get("FAILOVER_HARNESS_REPORTS")
        histories = (Path(env) if env else Path.cwd() / "reports").absolute() / "histories"
    home = harness_home()
    print(f"[failover-harness] results {results}; histories {histories}; run state {home / 'runs'}; "
          f"logs {home / 'logs'}", file=sys.stderr, flush=True)


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``run`` and ``matrix``."""
    p.add_argument("--backend", default="local", choices=["local", "compose"])
    p.add_argument("--engine", default="postgres", choices=["postgres", "mariadb"])
    p.add_argument("--topology", choices=["patroni-pair", "patroni-group3", "pgaf-pair", "pgaf-group3"],
                   help="patroni-*: suites' pairs and groups as a manager topology whose roles Patroni swaps "
                        "(tests it cannot serve are skipped with the reason); with suites/ham (--profile ham) "
                        "it selects that manager's HAM tests: pgaf-* runs pg_auto_failover's only "
                        "(docs/ha-managers.md)")
    p.add_argument("--client", help="client under test: a registered name or module:attr (default: the "
                                    "profile's reference client)")
    p.add_argument("--profile", help="run the shipped suites of these profiles (comma-separated, e.g. lpq or "
                                     "lpq,persistent); default with no PATH: every profile")
    p.add_argument("--results", help="Allure results folder (default reports/allure-results; emptied first)")
    p.add_argument("--history-dir", help="where each test's history and timeline are saved "
                                         "(default reports/histories)")
    p.add_argument("--append-results", action="store_true", help="keep earlier results in the folder")
    p.add_argument("--keep-on-failure", action="store_true", help="leave a failing test's topology up")
    p.add_argument("--jobs", "-n", default="1", help="pytest-xdist workers (timing suites prefer 1)")
    p.add_argument("-k", dest="select", help="pytest -k expression")
    p.add_argument("-m", dest="markers", help="pytest -m marker expression (e.g. 'not slow')")


def split_passthrough(argv: list[str]) -> list[str]:
    """``run``'s own arguments (after the word ``run``) with every token meant for pytest turned into
    ``--pytest-arg=TOKEN``: options ``run`` does not define, the values that follow them (tokens that
    are not existing paths), and everything after ``--``."""
    parser = argparse.ArgumentParser(add_help=False)
    register_into(parser)
    takes_value = {opt: action.nargs != 0 for action in parser._actions for opt in action.option_strings}
    out: list[str] = []
    pending_value = False  # the previous token was a run option that takes a value
    foreign = False  # the previous token was a pytest option: a following non-path token is its value
    for i, token in enumerate(argv):
        if token == "--":
            out += [f"--pytest-arg={t}" for t in argv[i + 1:]]
            break
        if pending_value:
            out.append(token)
            pending_value = False
            continue
        name = token.split("=", 1)[0]
        if token.startswith("-") and token != "-":
            if name in takes_value or token in ("-h", "--help"):
                out.append(token)
                pending_value = takes_value.get(name, False) and "=" not in token
                foreign = False
            else:
                out.append(f"--pytest-arg={token}")
                foreign = "=" not in token
            continue
        if foreign and not Path(token.split("::", 1)[0]).exists():
            out.append(f"--pytest-arg={token}")
        else:
            out.append(token)
        foreign = False
    return out


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run``."""
    p = sub.add_parser("run", help="run suites (pytest + the harness plugin, Allure results); options it "
                                   "does not know, and everything after --, go to pytest",
                       usage="%(prog)s [PATH ...] [options] [pytest options] [-- pytest options]")
    register_into(p)
    p.set_defaults(func=cmd_run)


def register_into(p: argparse.ArgumentParser) -> None:
    """``run``'s arguments (also read by :func:`split_passthrough`)."""
    p.add_argument("paths", nargs="*", help="suite folders or files (default: the shipped suites of --profile, "
                                            "or of every profile)")
    add_run_options(p)
    p.add_argument("--pytest-arg", dest="pytest_args", action="append", default=[],
                   help="extra argument passed to pytest as is (repeatable; or just write pytest's options, "
                        "or put them after --)")
