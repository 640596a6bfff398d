"""The client under test: ``client_spec`` (``--client`` as given) and ``client_factory`` (resolved for
the test's profile, from its rule IDs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.plugin.options import OPTIONS_KEY, HarnessOptions, rule_ids_of


def check_client(config: pytest.Config) -> None:
    """Refuse an unknown ``--client`` in one line at start-up, before any test and for every suite,
    whether or not a test of that client's profile is collected (never a silent pass)."""
    from harness.clients.registry import check_client_spec

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
    from harness.clients.registry import resolve_client
    from harness.profiles import profile_of_rules

    profile = profile_of_rules(rule_ids_of(request.node))
    return resolve_client(client_spec, profile.name if profile else None).factory


def check_client_for_items(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """The one-line reason why ``--client`` cannot serve a collected test (a client of another
    profile, e.g. ``persistent/pgbouncer-session`` for the ``lpq`` suites), or None when it serves
    every one. Checked once per profile, after collection and before any test runs."""
    from harness.clients.registry import resolve_client
    from harness.profiles import profile_of_rules

    spec = config.stash[OPTIONS_KEY].client
    if not spec or ":" in spec:
        return None
    seen: set[str] = set()
    for item in items:
        profile = profile_of_rules(rule_ids_of(item))
        if profile is None or profile.name in seen:
            continue
        seen.add(profile.name)
        try:
            resolve_client(spec, profile.name)
        except HarnessError as exc:
            return (f"{exc} (first such test: {item.nodeid}); run only that client's profile, e.g. "
                    f"failover-harness run --profile {spec.partition('/')[0] if '/' in spec else 'PROFILE'}")
    return None
