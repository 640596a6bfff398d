"""The cached data-directory template every engine copies its nodes from (the local backend's
topologies for every profile: DUR-1, MIR, PER, ACR, ICM, LPQ): built once per machine and settings
under a lock file beside it, in a private work folder, then renamed into place."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.errors import TopologyError
from harness.topology.process import RunAs


def cached_template(final: Path, built: Callable[[Path], bool], build: Callable[[Path, RunAs], None],
                    run_as: RunAs) -> Path:
    """``final`` once ``built(final)`` says it is complete: else ``build(final, run_as)`` makes it,
    under an exclusive lock file beside it, so concurrent workers of one machine build it once. A
    build that fails (a full disk: initdb's ENOSPC) leaves no half-built work folder taking space."""
    if built(final):
        return final
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built(final):
            try:
                build(final, run_as)
            except BaseException:
                shutil.rmtree(final.parent / f".{final.name}.build-{os.getpid()}", ignore_errors=True)
                raise
    return final


def build_folder(final: Path, run_as: RunAs) -> Path:
    """A fresh work folder beside ``final`` for this process (mode 0700, owned by ``run_as``) to
    build the template in before it is renamed to ``final``."""
    work = final.parent / f".{final.name}.build-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o700)
    run_as.chown(work)
    return work


def copy_tree(template: Path, dests: Sequence[Path], timeout: float = 60, what: str = "the template") -> None:
    """Copy ``template`` (``what``, for messages) to each of ``dests`` (in parallel), keeping owner and
    modes (``cp -a``), within ``timeout`` seconds (docs/topology.md, "Bringing a topology up": every
    long step has a deadline). A copy that fails (e.g. ENOSPC: its message says "No space left on
    device") or overruns is a TopologyError, its ``cp`` processes killed."""
    procs = [subprocess.Popen(["cp", "-a", "--reflink=auto", str(template), str(d)], stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True) for d in dests]
    deadline = time.monotonic() + timeout
    errors: list[str] = []
    try:
        for p in procs:
            try:
                err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))[1]
            except subprocess.TimeoutExpired:
                raise TopologyError(f"copying {what} {template} did not finish within "
                                    f"{timeout:.0f} s (is its disk full or hanging?)") from None
            if p.returncode != 0:
                errors.append(" ".join(err.split())[:300])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if errors:
        raise TopologyError(f"copying {what} failed: {'; '.join(errors)}")
