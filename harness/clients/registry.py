"""The client-under-test registry: ``--client NAME`` -> a factory for one profile.

Adapters register themselves with :func:`register_client` when their module is imported; the
modules each profile lists in :data:`harness.profiles.PROFILES` are imported the first time a name
is resolved (a module that cannot be imported is a ConfigError naming it). A spec may also be an
import path ``package.module:attr`` naming the factory directly, so a third-party client needs no
registration.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness import profiles
from harness.errors import ConfigError, UnknownClientError

#: Profiles that have clients under test (built or planned).
PROFILES = tuple(p.name for p in profiles.PROFILES if p.default_client is not None)

Factory = Callable[..., Any]


@dataclass(frozen=True)
class ClientEntry:
    """A registered client: its profile, name and factory."""

    profile: str
    name: str
    factory: Factory


_clients: dict[tuple[str, str], ClientEntry] = {}
_lock = threading.RLock()
_loaded = False


def register_client(profile: str, name: str, factory: Factory, *, replace: bool = False) -> ClientEntry:
    """Register ``factory`` as client ``name`` of ``profile`` (one of :data:`PROFILES`)."""
    if profile not in PROFILES:
        raise ConfigError(f"unknown client profile {profile!r}; use one of {', '.join(PROFILES)}")
    entry = ClientEntry(profile, name, factory)
    with _lock:
        existing = _clients.get((profile, name))
        if existing is not None and existing.factory is not factory and not replace:
            raise ConfigError(f"client {name!r} is already registered for profile {profile}; "
                              "pass replace=True to override it")
        _clients[(profile, name)] = entry
    return entry


def unregister_client(profile: str, name: str) -> None:
    """Remove a registration (tests clean up with it)."""
    with _lock:
        _clients.pop((profile, name), None)


def _load_builtins() -> None:
    global _loaded
    with _lock:
        if _loaded:
            return
        profiles.import_modules("clients")
        _loaded = True


def known_clients(profile: str | None = None) -> list[str]:
    """Registered client names (``profile/name`` when no profile is given)."""
    _load_builtins()
    with _lock:
        keys = sorted(_clients)
    if profile is None:
        return [f"{p}/{n}" for p, n in keys]
    return [n for p, n in keys if p == profile]


def _import_module(name: str) -> Any:
    """Import ``name``; when its top package is not found, look in the current directory too (first,
    as ``python -m`` does), so a user's ``my_adapters.py`` needs no PYTHONPATH."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        if exc.name != name.partition(".")[0] or cwd in sys.path:
            raise
        sys.path.insert(0, cwd)
        return importlib.import_module(name)


def _import_path(spec: str) -> Factory:
    module_name, _, attr = spec.partition(":")
    try:
        module = _import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--client {spec}: cannot import module {module_name!r} ({exc}); check the "
                          "spelling and that the package is installed in this environment") from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"--client {spec}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise ConfigError(f"--client {spec}: {attr!r} is not callable (expected a client factory)")
    return target


def resolve_client(spec: str | None, profile: str | None = None) -> ClientEntry:
    """The client ``spec`` names: a registered name (``NAME`` or ``profile/NAME``) or an import path
    ``module:attr``. ``spec=None`` means the profile's reference client (registered as
    ``reference``). Raises :class:`UnknownClientError` listing the known names."""
    if profile is not None and profile not in PROFILES:
        raise ConfigError(f"unknown client profile {profile!r}; use one of {', '.join(PROFILES)}")
    if spec and ":" in spec:
        return ClientEntry(profile or "any", spec, _import_path(spec))
    name = spec or "reference"
    if "/" in name:
        profile_part, _, name = name.partition("/")
        if profile is not None and profile_part != profile:
            raise ConfigError(f"--client {spec} is a {profile_part} client, but this test needs a "
                              f"{profile} client")
        profile = profile_part
    _load_builtins()
    with _lock:
        matches = [e for (p, n), e in _clients.items() if n == name and (profile is None or p == profile)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ConfigError(f"--client {name} is registered for several profiles "
                          f"({', '.join(sorted(e.profile for e in matches))}); write PROFILE/{name}")
    if profile is not None and not profiles.get_profile(profile).built and not known_clients(profile):
        raise UnknownClientError(f"profile {profile!r} is planned, not built yet: it has no registered clients; "
                                 "give an import path such as my_package.my_module:make_client to try your own")
    known = known_clients(profile) if profile else known_clients()
    where = f" for profile {profile}" if profile else ""
    raise UnknownClientError(
        f"unknown client {name!r}{where}; known clients: {', '.join(known) or 'none registered yet'}. "
        "Give a registered name or an import path such as my_package.my_module:make_client")


def check_client_spec(spec: str | None) -> None:
    """Refuse a ``--client`` that names nothing, before any test runs and whichever tests are collected
    (no silent acceptance: a run must never pass and credit a client that does not exist). An import
    path ``module:attr`` must import to a callable, ``PROFILE/NAME`` must be registered for that profile,
    and a plain ``NAME`` for some profile; otherwise a ConfigError names the known clients."""
    if not spec:
        return
    _load_builtins()
    with _lock:
        names = {n for _, n in _clients}
    if ":" in spec or "/" in spec or spec not in names:
        resolve_client(spec)  # raises naming the problem; a plain name of several profiles is fine here
