"""Dynamic TCP port allocation that never collides between runs or pytest-xdist workers.

A free port is found by binding port 0 on the loopback; it is then reserved machine-wide with an
exclusive lock file under ``<harness home>/ports/`` naming the owning PID, so that two processes
that bind-and-release at the same moment cannot both hand out the same number. Reservations of
dead processes are reclaimed.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from harness.paths import harness_home, shared_dir

#: A TCP address as the harness passes it around: ``(host, port)``.
Address = tuple[str, int]


def _ports_dir() -> Path:
    return shared_dir(harness_home() / "ports")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(port: int) -> int | None:
    """The PID named by the reservation of ``port``, or None when it is not reserved."""
    try:
        return int((_ports_dir() / str(port)).read_text() or "0") or None
    except (OSError, ValueError):
        return None


def hand_over(ports: list[int], owner: int) -> None:
    """Make ``owner`` the holder of these reservations (atomically, file by file), so that a run that
    outlives the process which reserved its ports (``up --detach``) keeps them reserved until it is
    torn down; ports without a reservation are left alone."""
    for port in ports:
        path = _ports_dir() / str(port)
        if path.exists():
            tmp = path.with_name(f".{port}.{os.getpid()}.tmp")
            tmp.write_text(str(owner))
            os.replace(tmp, path)


def _try_reserve(port: int, owner: int) -> bool:
    path = _ports_dir() / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = int(path.read_text() or "0")
            except (OSError, ValueError):
                holder = 0
            if holder and _pid_alive(holder):
                return False
            path.unlink(missing_ok=True)  # stale reservation of a dead process
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(owner))
        return True
    return False


def allocate_port(host: str = "127.0.0.1", owner: int | None = None) -> int:
    """Return a TCP port that is free on ``host`` and reserved for ``owner`` (default: this PID)."""
    owner = owner or os.getpid()
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if _try_reserve(port, owner):
            return port
    raise OSError("could not reserve a free TCP port after 200 tries")


def release_port(port: int) -> None:
    """Drop the reservation of ``port`` (the port itself is closed by whoever used it)."""
    (_ports_dir() / str(port)).unlink(missing_ok=True)
