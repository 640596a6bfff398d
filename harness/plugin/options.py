"""The harness's pytest options and their value (:class:`HarnessOptions`), the per-test report
keeping that teardown fixtures read (``--keep-on-failure``), and small helpers other plugin parts
share (:func:`rule_ids_of`, :func:`add_environment`, :func:`test_failed`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from harness.rules.verdict import Verdict


@dataclass(frozen=True)
class HarnessOptions:
    """The harness's command-line options as one value (fixture ``harness_options``)."""

    backend: str
    engine: str
    client: str | None
    keep_on_failure: bool
    history_dir: Path
    alluredir: Path | None
    worker: str  # pytest-xdist worker id ("gw0", ...) or "main"
    #: ``--topology``: a manager topology (``patroni-pair``, ``patroni-group3``) the ``pair`` / ``group``
    #: fixtures build instead of the backend's own (docs/ha-managers.md "Client suites under the manager")
    topology: str | None = None


OPTIONS_KEY = pytest.StashKey[HarnessOptions]()
ENV_KEY = pytest.StashKey[dict[str, Any]]()
REPORTS_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()
VERDICTS_KEY = pytest.StashKey[list["Verdict"]]()
ACTIVE_KEY = pytest.StashKey[bool]()
#: The harness's options: the ``--fh-`` names, and the short names kept as aliases (reserved: an app
#: whose conftest defines one of them gets pytest's "option names already added" error).
OPTION_NAMES = {"backend": ("--fh-backend", "--backend"), "client": ("--fh-client", "--client"),
                "engine": ("--fh-engine", "--engine"), "keep_on_failure": ("--fh-keep-on-failure", "--keep-on-failure"),
                "history_dir": ("--fh-history-dir", "--history-dir"), "topology": ("--fh-topology", "--topology")}


class _Default(str):
    """An option's default value, told apart from the same value given on the command line: a run
    that gives no harness option and uses no harness fixture leaves the plugin asleep."""

ATTACH_KEY = pytest.StashKey[tuple[bytes, str | None]]()
ENV_FRAGMENT = ".failover-harness-env-{worker}.json"


# ------------------------------------------------------------------------------ options and markers


def pytest_addoption(parser: pytest.Parser) -> None:
    """The harness options (group ``failover-harness``), each as ``--fh-NAME`` and a reserved short
    alias ``--NAME``. Nothing is imported or checked here: the values are checked when the plugin
    wakes (:func:`harness.plugin.activate`)."""
    group = parser.getgroup("failover-harness", "failover-harness: database failover checks")
    group.addoption(*OPTION_NAMES["backend"], dest="backend", default=_Default("local"), metavar="NAME",
                    help="where database nodes run: local processes (default) or compose containers behind the real "
                    "Toxiproxy (failover-harness compose-setup first)")
    group.addoption(*OPTION_NAMES["client"], dest="client", default=None, metavar="NAME",
                    help="client under test: a registered name (PROFILE/NAME when ambiguous) or an "
                    "import path module:attr; default: the reference client of each profile")
    group.addoption(*OPTION_NAMES["engine"], dest="engine", default=_Default("postgres"), metavar="NAME",
                    help="database engine of the pairs (default postgres; or mariadb)")
    group.addoption(*OPTION_NAMES["topology"], dest="fh_topology", default=None, metavar="NAME",
                    help="build the pair / group fixtures as a manager topology whose roles the manager swaps: "
                    "patroni-pair or patroni-group3 (local backend; tests it cannot serve are skipped with the "
                    "reason)")
    group.addoption(*OPTION_NAMES["keep_on_failure"], dest="keep_on_failure", action="store_true", default=False,
                    help="leave a failed test's nodes and run directory in place for inspection "
                    "(clean later with `failover-harness down --all`)")
    group.addoption(*OPTION_NAMES["history_dir"], dest="history_dir", default=None, metavar="DIR",
                    help="where each test's history (JSON lines) and timeline (SVG) are saved "
                    "(default: $FAILOVER_HARNESS_REPORTS/histories or <rootdir>/reports/histories)")


def _history_dir(config: pytest.Config) -> Path:
    option = config.getoption("history_dir")
    if option:
        path = Path(option).resolve()
    elif os.environ.get("FAILOVER_HARNESS_REPORTS"):
        path = Path(os.environ["FAILOVER_HARNESS_REPORTS"]) / "histories"
    else:  # the project pytest runs in: its rootdir, or where it was started when that is elsewhere
        here = config.invocation_params.dir
        base = config.rootpath if here.is_relative_to(config.rootpath) else here
        path = base / "reports" / "histories"
    if path.exists() and not path.is_dir():  # bad input: one line before any test, not a crash at the first save
        raise pytest.UsageError(f"failover-harness: the history folder {path} is a file; give a folder with "
                                "--history-dir DIR")
    return path


def options_given(config: pytest.Config) -> bool:
    """True when the run gave any harness option (on the command line, in addopts or an ini file)."""
    defaults = isinstance(config.getoption("backend"), _Default) and isinstance(config.getoption("engine"), _Default)
    return (not defaults or config.getoption("client") is not None or bool(config.getoption("keep_on_failure"))
            or config.getoption("history_dir") is not None or config.getoption("fh_topology") is not None)


def configure_options(config: pytest.Config) -> HarnessOptions:
    """Build the run's :class:`HarnessOptions` (stashed on the config) and register the markers."""
    config.addinivalue_line("markers", "rule(*ids): the RULEBOOK rule IDs a suite test checks")
    config.addinivalue_line("markers", "slow: long-running test (still part of make chaos)")
    config.addinivalue_line("markers", "bounds(**limits): a test's bounds for its checkers, e.g. "
                                       "bounds(recovery_s=2, failed_requests=5) (APP-1, APP-2)")
    alluredir = getattr(config.option, "allure_report_dir", None)
    workerinput = getattr(config, "workerinput", None)
    options = HarnessOptions(
        backend=str(config.getoption("backend")), engine=str(config.getoption("engine")),
        client=config.getoption("client"), keep_on_failure=config.getoption("keep_on_failure"),
        history_dir=_history_dir(config), alluredir=Path(alluredir).resolve() if alluredir else None,
        worker=workerinput["workerid"] if workerinput else "main", topology=config.getoption("fh_topology"))
    config.stash[OPTIONS_KEY] = options
    config.stash[ENV_KEY] = {}
    return options


def pytest_report_header(config: pytest.Config) -> str | None:
    """One header line naming backend, engine and client - only in a run that gave a harness option
    (an unrelated run of the same environment prints nothing)."""
    if not config.stash.get(ACTIVE_KEY, False):
        return None
    return header_line(config)


def header_line(config: pytest.Config) -> str:
    """Backend, engine, client and where the run writes: histories, Allure results, run state."""
    from harness.paths import harness_home

    opts = config.stash[OPTIONS_KEY]
    results = f" results={opts.alluredir}" if opts.alluredir else ""
    managed = f" topology={opts.topology}" if opts.topology else ""
    return (f"failover-harness: backend={opts.backend}{managed} engine={opts.engine} "
            f"client={opts.client or '(reference)'} histories={opts.history_dir}{results} "
            f"run-state={harness_home() / 'runs'}")


def add_environment(config: pytest.Config, **values: Any) -> None:
    """Add ``environment.properties`` entries learnt at run time (e.g. the topology fixtures'
    ``engine.version="PostgreSQL 15.10"``). Works on xdist workers too (merged by the controller)."""
    config.stash[ENV_KEY].update({k.replace("__", "."): v for k, v in values.items()})


def rule_ids_of(item: pytest.Item) -> list[str]:
    """The rule IDs cited by ``@pytest.mark.rule(...)`` on a test (all markers, in order, unique)."""
    ids: list[str] = []
    for mark in item.iter_markers("rule"):
        for rid in mark.args:
            if rid not in ids:
                ids.append(str(rid))
    return ids


def bounds_of(item: pytest.Item) -> dict[str, Any]:
    """The bounds a test sets with ``@pytest.mark.bounds(recovery_s=2, failed_requests=5)`` (keyword
    arguments of every such marker, the closest winning), passed to the checkers as parameters and so
    printed in their verdicts (``details["params"]``, and the expected text)."""
    out: dict[str, Any] = {}
    for mark in reversed(list(item.iter_markers("bounds"))):
        if mark.args:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.bounds takes keyword arguments only, "
                                    "e.g. bounds(recovery_s=2, failed_requests=5)")
        out.update(mark.kwargs)
    return out


def test_failed(request: pytest.FixtureRequest) -> bool:
    """True when the requesting test's setup or call failed - for teardown fixtures honouring
    ``--keep-on-failure`` (the ``pair``/``group`` fixtures use it)."""
    reports = request.node.stash.get(REPORTS_KEY, {})
    return any(rep.failed for rep in reports.values())


test_failed.__test__ = False  # type: ignore[attr-defined]  # not a test despite its name


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item so fixtures can tell a failed test at teardown."""
    report = yield
    item.stash.setdefault(REPORTS_KEY, {})[report.when] = report
    return report


@pytest.fixture(scope="session")
def harness_options(pytestconfig: pytest.Config) -> HarnessOptions:
    """The harness options of this run (backend, engine, client, keep_on_failure, history_dir,
    alluredir, worker)."""
    return pytestconfig.stash[OPTIONS_KEY]


