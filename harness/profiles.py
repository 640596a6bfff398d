"""The one registry of what the harness checks: a :class:`Profile` per documented system (its rule
families, default client, client protocol, workload, suites) with the *explicit* list of modules
that register its clients and its checkers. Adding a profile is one folder in each layer (clients/,
workload/, rules/, suites/) plus one :class:`Profile` line in :data:`PROFILES`.

The client registry (:mod:`harness.clients.registry`) and the checker registry
(:mod:`harness.rules.registry`) import the modules listed here the first time they are asked; a
module that cannot be imported is a :class:`~harness.errors.ConfigError` naming it - never skipped.
This module imports nothing of the harness but its errors, so every layer may read it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

from harness.errors import ConfigError

ModuleKind = Literal["clients", "checkers"]


@dataclass(frozen=True)
class Profile:
    """One documented system whose rules the harness checks (RULEBOOK family IDs)."""

    name: str  # --profile / PROFILE/NAME in --client
    title: str  # the Allure epic
    families: tuple[str, ...]  # RULEBOOK rule families, e.g. ("MIR",)
    built: bool = True  # False: planned (named so errors can say so), nothing registered yet
    default_client: str | None = "reference"  # the registered client a suite gets without --client
    client_protocol: str | None = None  # "module:Class" every client of the profile implements
    client_modules: tuple[str, ...] = ()  # import to register the profile's clients
    checker_modules: tuple[str, ...] = ()  # import to register the profile's checkers
    workload: str | None = None  # module of the profile's workload generators
    suites: str | None = None  # folder of its pytest suites


PROFILES: tuple[Profile, ...] = (
    Profile("cross-cutting", "Cross-cutting", ("DUR", "OBS"), default_client=None,
            checker_modules=("harness.rules.durability",), workload="harness.workload.keywriter",
            suites="suites/durability"),
    Profile("mirroring", "Mirroring (SQL Server)", ("MIR",),
            client_protocol="harness.clients.mirroring.protocol:MirroringClient",
            client_modules=("harness.clients.mirroring",), checker_modules=("harness.rules.mirroring",),
            workload="harness.workload.mirroring", suites="suites/mirroring"),
    Profile("persistent", "Persistent connections (PolarProxy)", ("PER",),
            client_protocol="harness.clients.persistent.protocol:PersistentClient",
            client_modules=("harness.clients.persistent",), checker_modules=("harness.rules.persistent",),
            workload="harness.workload.oltp", suites="suites/persistent"),
    Profile("acr", "Automatic client reroute (DB2)", ("ACR",),
            client_protocol="harness.clients.acr.protocol:AcrClient",
            client_modules=("harness.clients.acr",), checker_modules=("harness.rules.acr",),
            workload="harness.workload.acr", suites="suites/acr"),
    Profile("icm", "Internet Cluster Manager (Domino)", ("ICM",),
            client_protocol="harness.clients.icm.protocol:IcmRouter",
            client_modules=("harness.clients.icm",), checker_modules=("harness.rules.icm",),
            workload="harness.workload.icm", suites="suites/icm"),
    Profile("lpq", "libpq multi-host rules (PostgreSQL drivers)", ("LPQ",),
            client_protocol="harness.clients.lpq.protocol:HostListAdapter",
            client_modules=("harness.clients.lpq",), checker_modules=("harness.rules.lpq",),
            workload="harness.workload.lpq", suites="suites/lpq"),
    Profile("app", "Application pools and ORMs", ("APP",), default_client="sqlalchemy-preping",
            client_protocol="harness.clients.app.protocol:AppPool",
            client_modules=("harness.clients.app",), checker_modules=("harness.rules.app",),
            workload="harness.workload.app", suites="suites/app"),
    Profile("ham", "HA managers (Patroni)", ("HAM",), default_client=None,
            checker_modules=("harness.rules.ham",), suites="suites/ham"),
)


def profile_names(built_only: bool = False) -> list[str]:
    """The profiles' names (only those built, with ``built_only``)."""
    return [p.name for p in PROFILES if p.built or not built_only]


def get_profile(name: str) -> Profile:
    """The profile called ``name`` (ConfigError listing the profiles otherwise)."""
    for p in PROFILES:
        if p.name == name:
            return p
    raise ConfigError(f"unknown profile {name!r}; use one of {', '.join(profile_names())}")


def profile_of_family(family: str) -> Profile | None:
    """The profile a rule family (``MIR``) belongs to, or None for a family no profile names."""
    family = family.upper()
    return next((p for p in PROFILES if family in p.families), None)


def profile_of_rules(rule_ids: list[str]) -> Profile | None:
    """The profile of the first rule ID whose profile has clients (a test citing DUR-1 and MIR-3 is a
    mirroring test), or None when no cited rule needs a client under test."""
    for rid in rule_ids:
        p = profile_of_family(rid.partition("-")[0])
        if p is not None and p.default_client is not None:
            return p
    return None


def import_modules(kind: ModuleKind) -> list[str]:
    """Import every module the built profiles list for ``kind`` (``clients`` or ``checkers``), so that
    they register themselves; a module that cannot be imported is a ConfigError naming it and the
    profile. Returns the module names."""
    names: list[str] = []
    for p in PROFILES:
        for module in p.client_modules if kind == "clients" else p.checker_modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ConfigError(f"profile {p.name!r} lists {kind} module {module!r} in harness/profiles.py, but "
                                  f"it cannot be imported ({exc}); fix the name there or the module") from exc
            names.append(module)
    return names
