"""Where the harness keeps machine-wide state: run directories and cached data-directory templates.

Everything lives under one base directory (``FAILOVER_HARNESS_HOME``, default
``/dev/shm/failover-harness`` or ``/tmp/failover-harness``) that the unprivileged database user can
traverse, so that ``down --all`` can find every run that any process on this machine left behind.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    """``/dev/shm/failover-harness`` where a RAM-backed /dev/shm exists (copying and writing data
    directories is then memory-speed; the servers run with fsync off anyway), else
    ``/tmp/failover-harness``."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        stat = os.statvfs(shm)
        if stat.f_bavail * stat.f_frsize > 2 * 1024**3:
            return shm / "failover-harness"
    return Path("/tmp/failover-harness")


def harness_home() -> Path:
    """The base directory for runs and templates (env ``FAILOVER_HARNESS_HOME``, default
    :func:`default_home`)."""
    base = Path(os.environ.get("FAILOVER_HARNESS_HOME") or default_home())
    base.mkdir(parents=True, exist_ok=True)
    try:
        base.chmod(0o1777)
    except PermissionError:
        pass
    return base


def runs_dir() -> Path:
    """Directory holding one sub-directory per run (PIDs, logs, data, state)."""
    d = harness_home() / "runs"
    d.mkdir(exist_ok=True)
    try:
        d.chmod(0o1777)
    except PermissionError:
        pass
    return d


def templates_dir() -> Path:
    """Directory holding cached ``initdb`` templates, one per engine version and settings hash
    (env ``FAILOVER_HARNESS_TEMPLATES``; default ``<harness home>/templates``)."""
    d = Path(os.environ.get("FAILOVER_HARNESS_TEMPLATES", harness_home() / "templates"))
    d.mkdir(parents=True, exist_ok=True)
    try:
        d.chmod(0o1777)
    except PermissionError:
        pass
    return d


def repo_root() -> Path:
    """The repository root (the folder holding ``pyproject.toml``)."""
    return Path(__file__).resolve().parent.parent


def reports_dir() -> Path:
    """The ``reports/`` output folder (git-ignored content); env ``FAILOVER_HARNESS_REPORTS``."""
    d = Path(os.environ.get("FAILOVER_HARNESS_REPORTS", repo_root() / "reports"))
    d.mkdir(parents=True, exist_ok=True)
    return d
