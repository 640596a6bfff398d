"""pytest plugin (entry point ``pytest11``): options, markers and fixtures of failover-harness.

Options: ``--backend local|compose``, ``--client NAME|module:attr``, ``--engine postgres|mariadb``,
``--keep-on-failure``, ``--history-dir DIR``.
Markers: ``rule(*ids)`` (the RULEBOOK IDs a test checks: Allure labels, history meta) and ``slow``.
Fixtures: ``harness_options``, ``client_spec``, ``client_factory``, ``history``, ``check``.

Every test that uses ``history`` gets it saved (``<history dir>/<test>.jsonl`` plus ``.svg``) and, with
``--alluredir``, attached with its timeline whether it passed or failed. A rule violation fails the test
(AssertionError: Allure *failed*); an unknown verdict or any harness error is *broken* (OBS-1). Safe
under pytest-xdist: per-test file names, and the shared results files are written by the controller.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError
from harness.history.core import History
from harness.rules.verdict import Verdict, assert_verdicts

BACKENDS = ("local", "compose")
ENGINES = ("postgres", "mariadb")


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


OPTIONS_KEY = pytest.StashKey[HarnessOptions]()
ENV_KEY = pytest.StashKey[dict[str, Any]]()
REPORTS_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()
VERDICTS_KEY = pytest.StashKey[list[Verdict]]()
ATTACH_KEY = pytest.StashKey[tuple[bytes, str | None]]()
ENV_FRAGMENT = ".failover-harness-env-{worker}.json"


# ------------------------------------------------------------------------------ options and markers


def pytest_addoption(parser: pytest.Parser) -> None:
    """The harness options (group ``failover-harness``)."""
    group = parser.getgroup("failover-harness", "failover-harness: database failover checks")
    group.addoption("--backend", choices=BACKENDS, default="local",
                    help="where database nodes run: local processes (default) or Docker compose")
    group.addoption("--client", default=None, metavar="NAME",
                    help="client under test: a registered name (PROFILE/NAME when ambiguous) or an "
                    "import path module:attr; default: the reference client of each profile")
    group.addoption("--engine", choices=ENGINES, default="postgres",
                    help="database engine of the pairs (default postgres)")
    group.addoption("--keep-on-failure", action="store_true", default=False,
                    help="leave a failed test's nodes and run directory in place for inspection "
                    "(clean later with `failover-harness down --all`)")
    group.addoption("--history-dir", default=None, metavar="DIR",
                    help="where each test's history (JSON lines) and timeline (SVG) are saved "
                    "(default: $FAILOVER_HARNESS_REPORTS/histories or <rootdir>/reports/histories)")


def _history_dir(config: pytest.Config) -> Path:
    option = config.getoption("history_dir")
    if option:
        return Path(option).resolve()
    env = os.environ.get("FAILOVER_HARNESS_REPORTS")
    if env:
        return Path(env) / "histories"
    return config.rootpath / "reports" / "histories"


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and build the :class:`HarnessOptions` of the run."""
    config.addinivalue_line("markers", "rule(*ids): the RULEBOOK rule IDs a suite test checks")
    config.addinivalue_line("markers", "slow: long-running test (still part of make chaos)")
    alluredir = getattr(config.option, "allure_report_dir", None)
    workerinput = getattr(config, "workerinput", None)
    config.stash[OPTIONS_KEY] = HarnessOptions(
        backend=config.getoption("backend"), engine=config.getoption("engine"),
        client=config.getoption("client"), keep_on_failure=config.getoption("keep_on_failure"),
        history_dir=_history_dir(config), alluredir=Path(alluredir).resolve() if alluredir else None,
        worker=workerinput["workerid"] if workerinput else "main")
    config.stash[ENV_KEY] = {}


def pytest_report_header(config: pytest.Config) -> str:
    """One header line naming backend, engine and client."""
    opts = config.stash[OPTIONS_KEY]
    return (f"failover-harness: backend={opts.backend} engine={opts.engine} "
            f"client={opts.client or '(reference)'} histories={opts.history_dir}")


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


def test_failed(request: pytest.FixtureRequest) -> bool:
    """True when the requesting test's setup or call failed - for teardown fixtures honouring
    ``--keep-on-failure`` (the lead's ``pair``/``group`` fixtures use it)."""
    reports = request.node.stash.get(REPORTS_KEY, {})
    return any(rep.failed for rep in reports.values())


test_failed.__test__ = False  # type: ignore[attr-defined]  # not a test despite its name


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item so fixtures can tell a failed test at teardown."""
    report = yield
    item.stash.setdefault(REPORTS_KEY, {})[report.when] = report
    return report


# ------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def harness_options(pytestconfig: pytest.Config) -> HarnessOptions:
    """The harness options of this run (backend, engine, client, keep_on_failure, history_dir,
    alluredir, worker)."""
    return pytestconfig.stash[OPTIONS_KEY]


@pytest.fixture(scope="session")
def client_spec(harness_options: HarnessOptions) -> str | None:
    """The ``--client`` value as given (None = each profile's reference client); not resolved yet."""
    return harness_options.client


def _profile_of(rule_ids: list[str]) -> str | None:
    from harness.clients.registry import FAMILY_PROFILE

    for rid in rule_ids:
        profile = FAMILY_PROFILE.get(rid.partition("-")[0].upper())
        if profile:
            return profile
    return None


@pytest.fixture
def client_factory(request: pytest.FixtureRequest, client_spec: str | None) -> Callable[..., Any]:
    """The factory of the client under test for this test's profile (from its first profile rule ID:
    MIR -> mirroring, PER -> persistent, ACR -> acr, ICM -> icm). Resolved here, lazily; an unknown
    name is a ConfigError (broken) listing the known clients."""
    from harness.clients.registry import resolve_client

    return resolve_client(client_spec, _profile_of(rule_ids_of(request.node))).factory


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Validate ``@pytest.mark.rule`` IDs and, with ``--alluredir``, label the test for Allure - before
    any fixture is set up, so a test whose topology fixture fails is still labelled."""
    ids = rule_ids_of(item)
    if not ids:
        return
    from harness.report.allure import allure_active, apply_labels, validate_rule_ids

    ids = validate_rule_ids(ids)
    if allure_active(item.config):
        apply_labels(ids)


def _file_stem(nodeid: str) -> str:
    digest = hashlib.sha1(nodeid.encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[-100:]
    return f"{readable}-{digest}"


def _outcome(item: pytest.Item) -> str:
    reports = item.stash.get(REPORTS_KEY, {})
    for when in ("setup", "call"):
        rep = reports.get(when)
        if rep is not None and rep.failed:
            return "error" if when == "setup" else "failed"
        if rep is not None and rep.skipped:
            return "skipped"
    return "passed" if "call" in reports else "not run"


@pytest.fixture
def history(request: pytest.FixtureRequest, harness_options: HarnessOptions) -> Iterator[History]:
    """A fresh :class:`History` for this test, streamed to ``<history dir>/<test>.jsonl.partial`` while
    the test runs. After the test (passed or failed) it is saved to ``<history dir>/<test>.jsonl`` with
    its SVG timeline beside it, and attached to the Allure result (JSON + SVG) when ``--alluredir`` is
    on. ``meta`` holds the test id, rule IDs, backend, engine, client, worker, and at the end the
    outcome and the checked verdicts."""
    from harness.history.store import HistoryWriter

    item = request.node
    h = History(meta={"test": item.nodeid, "rules": rule_ids_of(item), "backend": harness_options.backend,
                      "engine": harness_options.engine, "client": harness_options.client or "reference",
                      "worker": harness_options.worker})
    path = harness_options.history_dir / f"{_file_stem(item.nodeid)}.jsonl"
    # Streamed while the test runs, so a crashed worker still leaves its history (``.partial``).
    writer = HistoryWriter(h, path.with_name(path.name + ".partial")).open()
    try:
        yield h
    finally:
        writer.close()
        _finish_history(item, h, path)
        writer.path.unlink(missing_ok=True)


def _finish_history(item: pytest.Item, h: History, path: Path) -> None:
    from harness.history.store import save_jsonl
    from harness.history.timeline import render_svg
    from harness.report.allure import allure_active

    h.meta["outcome"] = _outcome(item)
    h.meta["verdicts"] = [v.to_dict() for v in item.stash.get(VERDICTS_KEY, [])]
    save_jsonl(h, path)
    svg: str | None
    try:
        evidence = [i for v in item.stash.get(VERDICTS_KEY, []) if v.valid is not True for i in v.evidence]
        svg = render_svg(h, title=item.nodeid, evidence=evidence)
        path.with_suffix(".svg").write_text(svg, encoding="utf-8")
    except Exception as exc:  # a drawing bug must not hide the test's own result
        svg = None
        warnings.warn(f"timeline of {item.nodeid} could not be drawn: {type(exc).__name__}: {exc}",
                      stacklevel=1)
    if allure_active(item.config):
        # attached by pytest_runtest_teardown below, once every fixture is finalised, so that the
        # files sit on the test itself rather than under this fixture's "Tear down" entry
        item.stash[ATTACH_KEY] = (path.read_bytes(), svg)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After all fixtures are torn down, attach the saved history and timeline to the Allure test."""
    try:
        return (yield)
    finally:
        payload = item.stash.get(ATTACH_KEY, None)
        if payload is not None:
            from harness.report.allure import attach_history

            attach_history(payload[0], payload[1], name="history")


class VerdictCheck:
    """The ``check`` fixture's callable: ``check(verdict_or_list) -> list[Verdict]``."""

    def __init__(self, item: pytest.Item) -> None:
        self._item = item
        self.verdicts: list[Verdict] = item.stash.setdefault(VERDICTS_KEY, [])

    def __call__(self, verdicts: Verdict | Iterable[Verdict]) -> list[Verdict]:
        """Record each verdict (an Allure step: passed / failed / broken) and in the per-test list,
        then assert them together: a violation raises RuleViolation (AssertionError, message starts
        with the rule ID), an unknown verdict raises VerdictUnknown (a harness error, never a pass)."""
        from harness.report.allure import allure_active, verdict_step

        batch = [verdicts] if isinstance(verdicts, Verdict) else list(verdicts)
        for v in batch:
            if not isinstance(v, Verdict):
                raise ConfigError("check() takes Verdict objects (or a list of them), "
                                  f"not {type(v).__name__}")
        cited = rule_ids_of(self._item)
        for v in batch:
            if cited and v.rule_id not in cited:
                warnings.warn(f"{self._item.nodeid} checks {v.rule_id} but cites only {', '.join(cited)} "
                              f"in @pytest.mark.rule: add it so reports label the test", stacklevel=2)
        active = allure_active(self._item.config)
        self.verdicts.extend(batch)
        errors = [verdict_step(v, active) for v in batch]
        if any(e is not None for e in errors):
            assert_verdicts(batch)
        return batch


@pytest.fixture
def check(request: pytest.FixtureRequest) -> VerdictCheck:
    """``check(verdict_or_list)``: record verdicts as Allure steps and in this test's list (also saved
    in the history's meta), then assert them with :func:`harness.rules.assert_verdicts`."""
    return VerdictCheck(request.node)


# ------------------------------------------------------------------------- topology fixtures (lead)
# HOOK for harness.topology: the lead adds the `pair`, `group` and `faults` fixtures here. Contract:
#   * build them from `harness_options` (backend, engine) and record into the test's `history`
#     fixture (request it as a dependency so it is torn down - and saved - after the topology);
#   * on teardown, honour `harness_options.keep_on_failure` with `test_failed(request)`;
#   * report what was learnt at run time with `add_environment(request.config, engine__version=...)`.
# @pytest.fixture
# def pair(request, harness_options, history): ...
# @pytest.fixture
# def group(request, harness_options, history): ...
# @pytest.fixture
# def faults(pair, history): ...


# ------------------------------------------------------------------------------- session results


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With ``--alluredir``: write ``categories.json`` and ``environment.properties`` once, from the
    controller (xdist workers hand their run-time environment entries over as small files)."""
    config = session.config
    opts = config.stash.get(OPTIONS_KEY, None)
    if opts is None or opts.alluredir is None:
        return
    from harness.report.allure import allure_active, collect_environment, write_categories, write_environment

    if not allure_active(config):
        return
    extra = config.stash.get(ENV_KEY, {})
    if opts.worker != "main":  # xdist worker: leave our entries for the controller
        if extra:
            fragment = opts.alluredir / ENV_FRAGMENT.format(worker=opts.worker)
            fragment.parent.mkdir(parents=True, exist_ok=True)
            fragment.write_text(json.dumps(extra, default=str), encoding="utf-8")
        return
    merged: dict[str, Any] = {}
    for fragment in sorted(opts.alluredir.glob(ENV_FRAGMENT.format(worker="*"))):
        try:
            merged.update(json.loads(fragment.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            pass
        fragment.unlink(missing_ok=True)
    merged.update(extra)
    write_categories(opts.alluredir)
    write_environment(opts.alluredir, collect_environment(opts.backend, opts.engine, opts.client,
                                                          extra=merged))
