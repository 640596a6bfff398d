"""pytest plugin (entry point ``pytest11``): options, markers and fixtures of failover-harness."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers the suites use."""
    config.addinivalue_line("markers", "rule(*ids): the RULEBOOK rule IDs a suite test checks")
    config.addinivalue_line("markers", "slow: long-running test (still part of make chaos)")
