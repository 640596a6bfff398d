"""Checks made before a command creates state (docs/topology.md, "Before anything starts"): the
harness home (``FAILOVER_HARNESS_HOME``), its runs and templates folders, the reports folder
(``FAILOVER_HARNESS_REPORTS``) and the free space a topology will need. Each problem is one
:class:`~harness.errors.ConfigError` line naming the path, what is wrong and how to fix it (exit 2),
raised before any process is started, so a bad home never leaves a process behind (OBS-1)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from harness.errors import ConfigError
from harness.paths import default_home, unwritable_reason

HOME_ENV, REPORTS_ENV, TEMPLATES_ENV = "FAILOVER_HARNESS_HOME", "FAILOVER_HARNESS_REPORTS", "FAILOVER_HARNESS_TEMPLATES"
#: Disk use of one data-directory template of an engine, in MB (measured: PostgreSQL 15 35 MB, MariaDB
#: 10.11 114 MB), with room for the WAL/binlog a node writes while it starts and catches up.
FOOTPRINT_MB = {"postgres": 48, "mariadb": 130}
#: What a node adds on top of its copy of the template (logs, WAL of the first writes).
NODE_EXTRA_MB = 16


def home_path() -> Path:
    """The harness home as configured (not created): env ``FAILOVER_HARNESS_HOME`` or the default."""
    return Path(os.environ.get(HOME_ENV) or default_home())


def _fix(env: str) -> str:
    return f"set {env} to a writable folder on a disk with free space (e.g. {env}=/tmp/failover-harness)"


def check_folder(folder: Path, env: str, what: str) -> None:
    """``folder`` exists (or can be created) as a folder this process can write files into; else one
    ConfigError line naming it, the reason (a file, read-only, no permission, no space) and the fix."""
    reason = unwritable_reason(folder)
    if reason is not None:
        raise ConfigError(f"{what} {folder} cannot be used: {reason.lower()}; {_fix(env)}")


def free_mb(folder: Path) -> int:
    """Megabytes an unprivileged writer can still use on the file system of ``folder`` (its nearest
    existing ancestor when it does not exist yet)."""
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize // (1024 * 1024)


def needed_mb(engine: str, nodes: int, template_cached: bool) -> int:
    """About how many MB ``nodes`` nodes of ``engine`` need in the harness home: a copy of the
    template each plus :data:`NODE_EXTRA_MB`, and the template itself unless it is cached already."""
    footprint = FOOTPRINT_MB.get(engine, max(FOOTPRINT_MB.values()))
    return nodes * (footprint + NODE_EXTRA_MB) + (0 if template_cached else footprint)


def space_error(folder: Path, need: int, have: int | None = None) -> ConfigError:
    """The one-line error for a harness home without the space a step needs."""
    have = free_mb(folder) if have is None else have
    return ConfigError(f"the harness home {folder} has {have} MB free, needs ~{need} MB: {_fix(HOME_ENV)}")


def check_space(folder: Path, need: int) -> None:
    """ConfigError (:func:`space_error`) when ``folder``'s file system has less than ``need`` MB free."""
    have = free_mb(folder)
    if have < need:
        raise space_error(folder, need, have)


def _template_cached(templates: Path, engine: str) -> bool:
    prefix = {"postgres": "pg", "mariadb": "mariadb"}.get(engine, engine)
    try:
        return any(p.is_dir() and p.name.startswith(prefix) and not p.name.startswith(".")
                   for p in templates.iterdir())
    except OSError:
        return False


def check_state_folders() -> Path:
    """The home, its runs folder and the reports folder are usable (:func:`check_folder`); returns the
    home. What every command that writes state calls before it starts anything."""
    home = home_path()
    check_folder(home, HOME_ENV, f"the harness home ({HOME_ENV})")
    check_folder(home / "runs", HOME_ENV, "the runs folder of the harness home")
    from harness.paths import reports_dir

    reports = reports_dir(create=False)
    check_folder(reports, REPORTS_ENV, f"the reports folder ({REPORTS_ENV})")
    return home


def check_up(engine: str, nodes: int) -> None:
    """Everything ``up`` needs before it starts a process: the folders (:func:`check_state_folders`),
    the templates folder, and the free space of :func:`needed_mb` on each file system."""
    home = check_state_folders()
    templates = Path(os.environ.get(TEMPLATES_ENV) or home / "templates")
    env = TEMPLATES_ENV if os.environ.get(TEMPLATES_ENV) else HOME_ENV
    check_folder(templates, env, "the templates folder")
    cached = _template_cached(templates, engine)
    if _same_fs(home, templates):
        check_space(home, needed_mb(engine, nodes, cached))
    else:
        check_space(home, needed_mb(engine, nodes, True))
        if not cached:
            check_space(templates, needed_mb(engine, 0, False))


def _same_fs(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_dev == b.stat().st_dev
    except OSError:
        return True


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is a full disk: ENOSPC/EDQUOT, or a tool's output saying so."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(cur)
        if "No space left on device" in text or "Disk quota exceeded" in text:
            return True
        cur = cur.__cause__ or cur.__context__
    return False
