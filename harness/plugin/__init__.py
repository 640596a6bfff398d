"""The failover-harness pytest plugin (one ``pytest11`` entry point: ``harness.plugin``).

* options (:mod:`.options`): ``--backend``, ``--engine``, ``--client``, ``--keep-on-failure``,
  ``--history-dir``; markers ``rule(*ids)``, ``slow``, ``topology(...)``, ``not_on(*backends, reason=)``;
* history (:mod:`.history`): the ``history`` fixture, saved and attached after every test;
* verdicts (:mod:`.verdict`): the ``check`` fixture, Allure labels, the results folder's files;
* clients (:mod:`.clients`): ``client_spec``, ``client_factory``;
* topology (:mod:`.topology`): ``pair``, ``group``, ``faults``.

A rule violation fails the test (AssertionError: Allure *failed*); an unknown verdict or any harness
error is *broken* (OBS-1). Safe under pytest-xdist: per-test file names, and the shared results files
are written by the controller.
"""

from __future__ import annotations

import pytest

from harness.plugin.clients import check_client, client_factory, client_spec
from harness.plugin.history import history, pytest_runtest_teardown
from harness.plugin.options import (
    HarnessOptions,
    add_environment,
    configure_options,
    harness_options,
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


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers, build the run's options and refuse, before any test, a backend that cannot
    run here or a client that does not exist."""
    configure_options(config)
    from harness.report.allure import install_redaction

    install_redaction(config)  # nothing allure-pytest writes holds a password (issue 17)
    config.addinivalue_line(
        "markers", "topology(mode='sync', mirror_readable=False, nodes=N, links='proxy'): how the test's "
                   "pair or group is built")
    config.addinivalue_line("markers", NOT_ON_MARKER)
    check_backend(config)
    check_client(config)


__all__ = [
    "HarnessOptions", "VerdictCheck", "_topology_factory", "add_environment", "check", "check_client", "client_factory",
    "client_spec", "faults", "group", "harness_options", "history", "pair", "pytest_addoption",
    "pytest_collection_modifyitems", "pytest_configure", "pytest_report_header", "pytest_runtest_makereport",
    "pytest_runtest_setup",
    "pytest_runtest_teardown", "pytest_sessionfinish", "rule_ids_of", "test_failed",
]
