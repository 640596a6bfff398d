"""The failover-harness pytest plugin (one ``pytest11`` entry point: ``harness.plugin``).

* options (:mod:`.options`): ``--fh-backend``, ``--fh-engine``, ``--fh-client``, ``--fh-keep-on-failure``,
  ``--fh-history-dir`` (the short names without ``fh-`` are reserved aliases); markers ``rule(*ids)``,
  ``slow``, ``topology(...)``, ``not_on(*backends, reason=)``;
* history (:mod:`.history`): the ``history`` fixture, saved and attached after every test;
* verdicts (:mod:`.verdict`): the ``check`` fixture, Allure labels, the results folder's files;
* clients (:mod:`.clients`): ``client_spec``, ``client_factory``;
* topology (:mod:`.topology`): ``pair``, ``group``, ``faults``.

A rule violation fails the test (AssertionError: Allure *failed*); an unknown verdict or any harness
error is *broken* (OBS-1). Safe under pytest-xdist: per-test file names, and the shared results files
are written by the controller.

Quiet unless used: in a pytest run that gives no harness option and collects no test using a harness
fixture or ``@pytest.mark.rule``, the plugin imports nothing heavy, starts and probes nothing and
prints nothing (start-up cost measured by ``benchmarks/plugin_startup.py``). It wakes at start-up when
a harness option is given, else after collection when a collected test needs it; the backend is
checked only when a collected test asks for a topology.
"""

from __future__ import annotations

import os
import sys

import pytest

from harness.plugin.clients import check_client, check_client_for_items, client_factory, client_spec
from harness.plugin.history import history, pytest_runtest_teardown
from harness.plugin.options import (
    ACTIVE_KEY,
    HarnessOptions,
    add_environment,
    configure_options,
    harness_options,
    header_line,
    options_given,
    pytest_addoption,
    pytest_report_header,
    pytest_runtest_makereport,
    rule_ids_of,
    test_failed,
)
from harness.plugin.topology import (
    NOT_ON_MARKER,
    _topology_factory,
    check_backend,
    faults,
    group,
    pair,
    pytest_collection_modifyitems,
)
from harness.plugin.verdict import VerdictCheck, check, pytest_runtest_setup, pytest_sessionfinish
from harness.resources import SUITES

#: Fixtures that make a test a harness test (the plugin wakes when one is collected).
HARNESS_FIXTURES = frozenset({"pair", "group", "faults", "history", "check", "client_factory", "client_spec",
                              "harness_options", "_topology_factory"})
TOPOLOGY_FIXTURES = frozenset({"pair", "group", "faults", "_topology_factory"})


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and build the run's options; when a harness option is given, wake the
    plugin now (:func:`activate`): a backend that cannot run here or a client that does not exist is
    refused before any test."""
    configure_options(config)
    config.addinivalue_line(
        "markers", "topology(mode='sync', mirror_readable=False, nodes=N, links='proxy'): how the test's "
                   "pair or group is built")
    config.addinivalue_line("markers", NOT_ON_MARKER)
    config.stash[ACTIVE_KEY] = False
    if options_given(config):
        activate(config, check_topology=True)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Before the first conftest is imported: :func:`keep_bytecode_out_of_the_package`."""
    keep_bytecode_out_of_the_package(args)


def keep_bytecode_out_of_the_package(args: list[str]) -> None:
    """A run of the installed suites writes nothing into site-packages: the assertion-rewritten bytecode
    of their modules goes under ``<harness home>/pycache`` (``sys.pycache_prefix``), unless the run
    chose a prefix itself. A checkout's suites keep their ``__pycache__`` as any source tree."""
    if sys.pycache_prefix or not any(SUITES in str(arg) for arg in args):
        return
    from harness.paths import harness_home
    from harness.resources import checkout_root

    if checkout_root() is None:
        sys.pycache_prefix = str(harness_home() / "pycache")
        os.environ.setdefault("PYTHONPYCACHEPREFIX", sys.pycache_prefix)  # pytest-xdist workers


def activate(config: pytest.Config, check_topology: bool) -> None:
    """Wake the plugin: redact what allure-pytest writes (nothing holds a password), refuse an unknown
    client and, with ``check_topology``, a backend that cannot run here (one line each)."""
    if config.stash[ACTIVE_KEY]:
        return
    config.stash[ACTIVE_KEY] = True
    from harness.report.allure import install_redaction

    install_redaction(config)
    if check_topology:
        check_backend(config)
    check_client(config)


def is_harness_test(item: pytest.Item) -> bool:
    """True when a collected test uses a harness fixture or cites a rule."""
    names = set(getattr(item, "fixturenames", ()))
    return bool(names & HARNESS_FIXTURES) or item.get_closest_marker("rule") is not None


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """After collection: wake the plugin when a collected test needs it (the backend is checked only
    when one asks for a topology), then refuse in one line a ``--client`` that cannot serve a collected
    test's profile - before any test runs."""
    config = session.config
    harness_items = [item for item in session.items if is_harness_test(item)]
    if not harness_items:
        return
    if not config.stash[ACTIVE_KEY]:
        needs_topology = any(set(getattr(i, "fixturenames", ())) & TOPOLOGY_FIXTURES for i in harness_items)
        activate(config, check_topology=needs_topology)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:  # woken now: say once where this run writes (the header did not)
            reporter.write_line(header_line(config))
    reason = check_client_for_items(config, harness_items)
    if reason:
        raise pytest.UsageError(f"failover-harness: {reason}")


__all__ = [
    "HarnessOptions", "VerdictCheck", "_topology_factory", "add_environment", "check", "check_client", "client_factory",
    "client_spec", "faults", "group", "harness_options", "history", "pair", "pytest_addoption",
    "pytest_collection_finish", "pytest_load_initial_conftests",
    "pytest_collection_modifyitems", "pytest_configure", "pytest_report_header", "pytest_runtest_makereport",
    "pytest_runtest_setup",
    "pytest_runtest_teardown", "pytest_sessionfinish", "rule_ids_of", "test_failed",
]
