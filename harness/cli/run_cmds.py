"""``failover-harness run [PATH ...] [pytest options] [-- pytest options]``: run suites with pytest and
the harness plugin, writing Allure results to ``reports/allure-results``. Exit code = pytest's (0 all
kept, 1 violations or harness errors, 5 nothing collected).

Options ``run`` does not know go to pytest as they are (``run suites/lpq -x --maxfail=2 -p
no:cacheprovider``), and so does everything after ``--`` (``run suites -- -k lpq``);
``--pytest-arg=X`` still works. An unknown option's value is recognised as such when it is not an
existing path (``-p no:cacheprovider``); write ``--opt=value`` or put it after ``--`` to be sure."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from harness.errors import ConfigError
from harness.paths import repo_root, reports_dir, unwritable_reason


def pytest_args(args: argparse.Namespace) -> list[str]:
    """The pytest command line for ``run`` (also used by ``matrix``); the backend, engine and client are
    checked first, so a bad one is one line and exit 2 before pytest starts (no silent acceptance)."""
    from harness.clients.registry import check_client_spec
    from harness.topology import resolve

    resolve(args.backend, args.engine)
    check_client_spec(args.client)
    profile = getattr(args, "profile", None)
    if profile and not args.paths:
        from harness.profiles import get_profile

        suites = get_profile(profile).suites
        if suites is None:
            raise ConfigError(f"profile {profile} has no suites")
        paths = [str(repo_root() / suites)]
    else:
        paths = args.paths or [str(repo_root() / "suites")]
    for p in paths:
        target = p.split("::", 1)[0]
        if not Path(target).exists():
            raise ConfigError(f"no such suite path {p!r}; suites live under {repo_root() / 'suites'}")
    results = Path(args.results) if args.results else reports_dir() / "allure-results"
    argv = [*paths, f"--alluredir={results}", f"--backend={args.backend}", f"--engine={args.engine}",
            "-p", "no:cacheprovider", "-o", "testpaths=suites", "-ra"]
    if args.client:
        argv.append(f"--client={args.client}")
    if args.keep_on_failure:
        argv.append("--keep-on-failure")
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
    print(f"[failover-harness] pytest {' '.join(argv)}", file=sys.stderr, flush=True)
    return int(pytest.main(argv))


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``run`` and ``matrix``."""
    p.add_argument("--backend", default="local", choices=["local", "compose"])
    p.add_argument("--engine", default="postgres", choices=["postgres", "mariadb"])
    p.add_argument("--client", help="client under test: a registered name or module:attr (default: the "
                                    "profile's reference client)")
    p.add_argument("--results", help="Allure results folder (default reports/allure-results; emptied first)")
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
    p.add_argument("paths", nargs="*", help="suite folders or files (default: suites/, or the profile's)")
    p.add_argument("--profile", help="run this profile's suites (e.g. app: suites/app) when no path is given")
    add_run_options(p)
    p.add_argument("--pytest-arg", dest="pytest_args", action="append", default=[],
                   help="extra argument passed to pytest as is (repeatable; or just write pytest's options, "
                        "or put them after --)")
