"""Watchdog process of one run: ``python -m harness.topology.reaper RUN_DIR OWNER_PID``.

Polls the owner; if the owner dies while the run directory still exists, tears the run down, so a
crashed or SIGKILLed test run leaks no database or proxy process. Exits when the directory is gone."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(run_dir: str, owner: str) -> None:
    """Watch ``owner``; tear ``run_dir`` down when it dies."""
    from harness.topology.process import pid_alive
    from harness.topology.run import down_run, load_state

    path, owner_pid = Path(run_dir), int(owner)
    while (path / "state.json").exists():
        if not pid_alive(owner_pid):
            try:
                if load_state(path).detached:
                    return
            except Exception:  # noqa: BLE001 - a half-written state still gets torn down
                pass
            down_run(path)
            return
        time.sleep(0.25)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
