"""The client registry behind ``--client``: names, profiles, import paths and their errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.clients import registry as clients
from harness.errors import ConfigError


def make_a() -> str:
    return "a"


def make_b() -> str:
    return "b"


@pytest.fixture
def two_profiles() -> Iterator[None]:
    clients.register_client("mirroring", "zz-dup", make_a)
    clients.register_client("persistent", "zz-dup", make_b)
    yield
    clients.unregister_client("mirroring", "zz-dup")
    clients.unregister_client("persistent", "zz-dup")


def test_name_resolves_within_profile(two_profiles: None) -> None:
    assert clients.resolve_client("zz-dup", "mirroring").factory is make_a
    assert clients.resolve_client("persistent/zz-dup").factory is make_b
    assert "mirroring/zz-dup" in clients.known_clients()


def test_ambiguous_name_without_profile_asks_for_profile(two_profiles: None) -> None:
    with pytest.raises(ConfigError, match="several profiles .*write PROFILE/zz-dup"):
        clients.resolve_client("zz-dup")


def test_profile_prefix_must_match_the_test(two_profiles: None) -> None:
    with pytest.raises(ConfigError, match="is a persistent client, but this test needs a mirroring client"):
        clients.resolve_client("persistent/zz-dup", "mirroring")


def test_unknown_name_lists_known_ones(two_profiles: None) -> None:
    with pytest.raises(clients.UnknownClientError) as exc:
        clients.resolve_client("nope", "persistent")
    assert "unknown client 'nope' for profile persistent; known clients:" in str(exc.value)
    assert "zz-dup" in str(exc.value) and "my_package.my_module:make_client" in str(exc.value)


def test_import_path(two_profiles: None) -> None:
    assert clients.resolve_client(f"{__name__}:make_a", "icm").factory is make_a
    with pytest.raises(ConfigError, match="has no attribute 'missing'"):
        clients.resolve_client(f"{__name__}:missing")
    with pytest.raises(ConfigError, match="is not callable"):
        clients.resolve_client("harness.clients.registry:PROFILES")


def test_registration_errors() -> None:
    with pytest.raises(ConfigError, match="unknown client profile 'sqlserver'"):
        clients.register_client("sqlserver", "x", make_a)
    clients.register_client("icm", "zz-once", make_a)
    try:
        with pytest.raises(ConfigError, match="already registered"):
            clients.register_client("icm", "zz-once", make_b)
        clients.register_client("icm", "zz-once", make_b, replace=True)
        assert clients.resolve_client("zz-once", "icm").factory is make_b
    finally:
        clients.unregister_client("icm", "zz-once")
