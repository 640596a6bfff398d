"""Which suites a ``run`` / ``matrix`` / ``nightly`` command means: the shipped suites by profile name
(``--profile lpq``), every profile (no path), or paths - a path that does not exist in the current
directory but names a shipped suite (``suites/lpq/test_lpq_group.py::test_x``) is the shipped one.
Also makes the current directory importable for ``--client module:attr`` (as ``python -m`` does)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.errors import ConfigError
from harness.profiles import PROFILES, Profile, get_profile
from harness.resources import suites_dir


def _folder(profile: Profile) -> str | None:
    return Path(profile.suites).name if profile.suites else None


def suite_folders() -> dict[str, Profile]:
    """Shipped suite folder name -> its profile (``durability`` -> cross-cutting)."""
    return {folder: p for p in PROFILES if p.built and (folder := _folder(p))}


def profile_suites(name: str) -> Path:
    """The shipped suites folder of a profile, named by profile (``cross-cutting``) or by its folder
    (``durability``); ConfigError listing the names otherwise."""
    folders = suite_folders()
    profile = folders.get(name)
    if profile is None:
        try:
            profile = get_profile(name)
        except ConfigError:
            profile = None
    folder = _folder(profile) if profile is not None else None
    if folder is None or not (suites_dir() / folder).is_dir():
        names = sorted({p.name for p in folders.values()} | set(folders))
        raise ConfigError(f"no shipped suites for profile {name!r}; use one of {', '.join(names)}")
    return suites_dir() / folder


def _shipped(target: str) -> Path | None:
    """The shipped suite a missing path names (``suites/lpq/x.py``, ``lpq/x.py``), or None."""
    parts = Path(target).parts
    if parts[:1] == ("suites",):
        parts = parts[1:]
    if not parts:
        return suites_dir()
    if parts[0] not in suite_folders():
        return None
    found = suites_dir().joinpath(*parts)
    return found if found.exists() else None


def suite_paths(paths: list[str] | None, profiles: str | None) -> list[str]:
    """The pytest paths of a run: ``--profile`` names (comma-separated), else the given paths (each
    existing here or naming a shipped suite), else every shipped suite. ConfigError for a path that
    is neither."""
    if profiles:
        if paths:
            raise ConfigError("give suite paths or --profile, not both (--profile runs the shipped suites)")
        return [str(profile_suites(name.strip())) for name in profiles.split(",") if name.strip()]
    if not paths:
        return [str(suites_dir())]
    out = []
    for p in paths:
        target, sep, rest = p.partition("::")
        if Path(target).exists():
            out.append(p)
            continue
        shipped = _shipped(target)
        if shipped is None:
            raise ConfigError(f"no such suite path {p!r}; give a file or folder, a shipped suite such as "
                              f"suites/{next(iter(suite_folders()), 'lpq')}, or --profile NAME "
                              f"(profiles: {', '.join(sorted(p.name for p in suite_folders().values()))})")
        out.append(f"{shipped}{sep}{rest}")
    return out


def _profile_of_path(path: str) -> Profile | None:
    """The profile whose shipped suites hold ``path`` (None for a path outside them or their root)."""
    try:
        rel = Path(path.partition("::")[0]).resolve().relative_to(suites_dir().resolve())
    except ValueError:
        return None
    return suite_folders().get(rel.parts[0]) if rel.parts else None


def check_client_for_paths(client: str | None, paths: list[str]) -> None:
    """Refuse in one line a registered ``--client`` that cannot serve a profile whose shipped suites
    are run (``run suites/lpq --client persistent/pgbouncer-session``), before pytest starts."""
    if not client or ":" in client:
        return
    from harness.clients.registry import resolve_client

    for path in paths:
        profile = _profile_of_path(path)
        if profile is not None and profile.default_client is not None:
            try:
                resolve_client(client, profile.name)
            except ConfigError as exc:
                raise ConfigError(f"{exc}; the {profile.name} suites need a {profile.name} client "
                                  f"(failover-harness run --profile {profile.name} --client NAME)") from None


def import_from_cwd() -> None:
    """Make the current directory importable, first, in this process and the processes it starts
    (pytest-xdist workers, per-client runs), as ``python -m`` does: ``--client my_adapters:make``
    finds ``./my_adapters.py`` without PYTHONPATH."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *parts])
