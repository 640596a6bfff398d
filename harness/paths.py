"""Where the harness keeps machine-wide state (run directories, cached data-directory templates, logs,
installed tools) and where a run's outputs go (``reports/`` of the current directory).

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
    return shared_dir(Path(os.environ.get("FAILOVER_HARNESS_HOME") or default_home()))


def shared_dir(path: Path) -> Path:
    """Create ``path`` (and parents) as a sticky world-writable directory, like /tmp, so that the
    harness, the unprivileged database user and other users' runs can all use it."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        path.chmod(0o1777)
    except PermissionError:
        pass  # someone else's: it is already set up
    return path


def runs_dir() -> Path:
    """Directory holding one sub-directory per run (PIDs, logs, data, state)."""
    return shared_dir(harness_home() / "runs")


def templates_dir() -> Path:
    """Directory holding cached ``initdb`` templates, one per engine version and settings hash
    (env ``FAILOVER_HARNESS_TEMPLATES``; default ``<harness home>/templates``)."""
    return shared_dir(Path(os.environ.get("FAILOVER_HARNESS_TEMPLATES", harness_home() / "templates")))


def tools_home() -> Path:
    """Where ``failover-harness setup`` installs the npm tools (the Allure command line, the Node
    drivers): env ``FAILOVER_HARNESS_TOOLS``, else ``<FAILOVER_HARNESS_HOME>/tools`` when that is set,
    else the user's cache folder (``$XDG_CACHE_HOME/failover-harness`` or
    ``~/.cache/failover-harness``), which outlives a reboot unlike the RAM-backed run folder."""
    if os.environ.get("FAILOVER_HARNESS_TOOLS"):
        return Path(os.environ["FAILOVER_HARNESS_TOOLS"])
    if os.environ.get("FAILOVER_HARNESS_HOME"):
        return Path(os.environ["FAILOVER_HARNESS_HOME"]) / "tools"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "failover-harness"


def reports_dir(create: bool = True) -> Path:
    """The output folder of results, histories, reports and matrices: env ``FAILOVER_HARNESS_REPORTS``,
    else ``reports/`` in the current directory (the user's project; never the installed package)."""
    d = Path(os.environ.get("FAILOVER_HARNESS_REPORTS") or Path.cwd() / "reports").absolute()
    if create:
        d.mkdir(parents=True, exist_ok=True)
    return d


def unwritable_reason(folder: Path) -> str | None:
    """Why files cannot be written into ``folder`` (created with its parents when missing), or None
    when they can: a probe file is created and removed, so read-only mounts and permissions count. The
    callers turn a reason into a one-line ConfigError naming the folder (bad input, never a traceback)."""
    import tempfile

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return "it is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".fh-write-probe-"):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None
