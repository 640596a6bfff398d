"""Watchdog process of one run: ``python -m harness.topology.reaper RUN_DIR OWNER_PID``.

Polls the owner; if the owner dies while the run directory still exists, tears the run down, so a
crashed or SIGKILLed test run leaks no database or proxy process. A detached run (``up --detach``,
``--keep-on-failure``) is left up: there the reaper lives on as the holder of the run's port
reservations (``status`` lists it) - but only once its ``up`` has finished: a run still marked
``starting`` whose owner died is torn down. Exits when the directory is gone."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(run_dir: str, owner: str) -> None:
    """Watch ``owner``; tear ``run_dir`` down when it dies."""
    from harness.topology.process import pid_alive
    from harness.topology.run import down_run

    path, owner_pid = Path(run_dir), int(owner)
    while (path / "state.json").exists():
        if not pid_alive(owner_pid) and not _detached(path):
            down_run(path)
            return
        time.sleep(0.25)


def _detached(path: Path) -> bool:
    from harness.topology.run import load_state

    try:
        state = load_state(path)
        return state.detached and not state.starting  # an 'up' that died half-way: tear it down
    except Exception:  # noqa: BLE001 - a half-written state still gets torn down
        return False


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
