"""The ICM cluster's database directory file (docs/icm.md): the replicas and their marks (*Out of
Service* / *Pending Delete*, ICM-1) written to ``<run>/icm-directory.json``, so that
``failover-harness fault --run RUN mark-state`` marks a replica from another process and the cluster
notices it on its next read."""

from __future__ import annotations

import contextlib
import fcntl
import json
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

MARKS = ("out-of-service", "pending-delete")
DIRECTORY_FILE = "icm-directory.json"


@contextlib.contextmanager
def locked_directory(path: Path) -> Any:
    """Hold the directory file's lock (``<file>.lock``, exclusive) while the block reads or writes it."""
    with open(path.with_suffix(".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def mark_in_run(run_path: Path, server: str, database: str, mark: str | None) -> dict[str, Any]:
    """``fault --run RUN mark-state``: mark a replica in the directory file of the ICM cluster of that
    run (the cluster records it on its next directory read). ConfigError when the run has none."""
    path = Path(run_path) / DIRECTORY_FILE
    if not path.exists():
        raise ConfigError(f"run {Path(run_path).name} has no ICM cluster (no {DIRECTORY_FILE}); mark-state needs "
                          "a run whose ICM cluster is up (suites/icm)")
    if mark is not None and mark not in MARKS:
        raise ConfigError(f"replica mark must be one of {', '.join(MARKS)} or none, not {mark!r}")
    with locked_directory(path):
        data = json.loads(path.read_text())
        key = f"{server}/{database}"
        if key not in data.get("replicas", {}):
            raise ConfigError(f"the ICM cluster of run {Path(run_path).name} has no replica {key}; replicas: "
                              f"{', '.join(data.get('replicas', {}))}")
        data["replicas"][key] = mark
        data["version"] = int(data.get("version", 0)) + 1
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    return {"fault": "mark-state", "server": server, "database": database, "mark": mark}
