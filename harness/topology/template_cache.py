"""The cached data-directory template every engine copies its nodes from (the local backend's
topologies for every profile: DUR-1, MIR, PER, ACR, ICM, LPQ): built once per machine and settings
under a lock file beside it, in a private work folder, then renamed into place."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from harness.topology.process import RunAs


def cached_template(final: Path, built: Callable[[Path], bool], build: Callable[[Path, RunAs], None],
                    run_as: RunAs) -> Path:
    """``final`` once ``built(final)`` says it is complete: else ``build(final, run_as)`` makes it,
    under an exclusive lock file beside it, so concurrent workers of one machine build it once."""
    if built(final):
        return final
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built(final):
            build(final, run_as)
    return final


def build_folder(final: Path, run_as: RunAs) -> Path:
    """A fresh work folder beside ``final`` for this process (mode 0700, owned by ``run_as``) to
    build the template in before it is renamed to ``final``."""
    work = final.parent / f".{final.name}.build-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o700)
    run_as.chown(work)
    return work
