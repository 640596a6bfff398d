"""The client under test: ``client_spec`` (``--client`` as given) and ``client_factory`` (resolved for
the test's profile, from its rule IDs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.clients.registry import check_client_spec, resolve_client
from harness.errors import HarnessError
from harness.plugin.options import OPTIONS_KEY, HarnessOptions, rule_ids_of
from harness.profiles import profile_of_rules


def check_client(config: pytest.Config) -> None:
    """Refuse an unknown ``--client`` in one line at start-up, before any test and for every suite,
    whether or not a test of that client's profile is collected (never a silent pass)."""
    try:
        check_client_spec(config.stash[OPTIONS_KEY].client)
    except HarnessError as exc:
        raise pytest.UsageError(f"failover-harness: {exc}") from None


@pytest.fixture(scope="session")
def client_spec(harness_options: HarnessOptions) -> str | None:
    """The ``--client`` value as given (None = each profile's reference client); not resolved yet."""
    return harness_options.client


@pytest.fixture
def client_factory(request: pytest.FixtureRequest, client_spec: str | None) -> Callable[..., Any]:
    """The factory of the client under test for this test's profile (from its first rule ID that
    belongs to a profile with clients: MIR -> mirroring, PER -> persistent). An unknown name is a
    ConfigError (broken) listing the known clients."""
    profile = profile_of_rules(rule_ids_of(request.node))
    return resolve_client(client_spec, profile.name if profile else None).factory
