"""Where the harness keeps machine-wide state: run directories and cached data-directory templates.

Everything lives under one base directory (``FAILOVER_HARNESS_HOME``, default
``/tmp/failover-harness``) that the unprivileged database user can traverse, so that ``down --all``
can find every run that any process on this machine left behind.
"""

from __future__ import annotations

import os
from pathlib import Path


def harness_home() -> Path:
    """The base directory for runs and templates (env ``FAILOVER_HARNESS_HOME``)."""
    base = Path(os.environ.get("FAILOVER_HARNESS_HOME", "/tmp/failover-harness"))
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
