"""Run directories: one per topology brought up, holding its state (roles, PIDs, ports), logs and
data. Teardown kills by recorded process group and by a scan for anything mentioning the run's path,
so ``down`` also cleans runs whose controlling process was SIGKILLed."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, TopologyError
from harness.paths import harness_home, runs_dir
from harness.ports import release_port
from harness.topology.containers import remove_resources
from harness.topology.process import kill_group, pid_alive, processes_mentioning, same_process, signal_pid, start_ticks
from harness.topology.state import EndpointRecord, ProcessRecord, RunState

STATE_FILE = "state.json"


#: What :func:`new_run_id` makes: ``MMDDhhmmss-xxxx`` (e.g. ``1201091755-628b``).
RUN_ID = re.compile(r"[0-9]{10}-[0-9a-f]{4}")


def new_run_id() -> str:
    """A short unique run ID (time-ordered prefix + random suffix), matching :data:`RUN_ID`."""
    return time.strftime("%m%d%H%M%S") + "-" + secrets.token_hex(2)


def run_path(run_id: str) -> Path:
    """The directory of run ``run_id`` (ConfigError if it is not a run ID or there is no such run)."""
    if not RUN_ID.fullmatch(run_id or ""):
        shown = run_id if len(run_id or "") <= 40 else f"{run_id[:30]}... ({len(run_id)} characters)"
        known = ", ".join(sorted(list_runs())) or "none"
        raise ConfigError(f"no run {shown!r}: that is not a run ID (run IDs look like 1201091755-628b, as 'up' "
                          f"prints them; runs on this machine: {known})")
    path = runs_dir() / run_id
    if not (path / STATE_FILE).exists():
        known = ", ".join(sorted(list_runs())) or "none"
        raise ConfigError(f"no run {run_id!r} on this machine (runs: {known}); "
                          f"start one with 'failover-harness up'")
    return path


def list_runs() -> list[str]:
    """IDs of every run directory on this machine."""
    return sorted(p.name for p in runs_dir().iterdir() if p.is_dir() and (p / STATE_FILE).exists())


#: run directory -> the thread of this process that holds its lock (a nested take would wait forever)
_HOLDERS: dict[str, int] = {}
_HOLDERS_GUARD = threading.Lock()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the run's lock (one role operation at a time, across processes). The thread that holds
    it already gets a TopologyError, not a hang: e.g. a switchover coordinator's resume that runs
    inside the switchover (``resume_inside_switchover``) and would record a process there."""
    key = str(Path(path).resolve())
    me = threading.get_ident()
    with _HOLDERS_GUARD:
        nested = _HOLDERS.get(key) == me
    if nested:
        raise TopologyError(f"the lock of run {Path(path).name} is already held by this thread (an operation "
                            "inside another one would wait for itself); do this after the operation instead")
    with open(path / ".lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        with _HOLDERS_GUARD:
            _HOLDERS[key] = me
        try:
            yield
        finally:
            with _HOLDERS_GUARD:
                _HOLDERS.pop(key, None)
            fcntl.flock(fh, fcntl.LOCK_UN)


def _load_raw(path: Path) -> dict[str, Any]:
    return json.loads((path / STATE_FILE).read_text())


def load_state(path: Path) -> RunState:
    """Read a run's state file."""
    return RunState.from_dict(_load_raw(path))


def save_state(path: Path, state: RunState) -> None:
    """Write a run's state file atomically."""
    tmp = path / f".{STATE_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(state.to_dict(), indent=1))
    tmp.replace(path / STATE_FILE)


def record_process(path: Path, name: str, pid: int, pgid: int | None = None, remove: bool = False) -> None:
    """Add (or, with ``remove``, drop) a process the run owns, so that ``down`` and the reaper stop it
    too (a pooler or proxy started in front of the run)."""
    with locked(path):
        state = load_state(path)
        state.processes = [p for p in state.processes if p.pid != pid]
        if not remove:
            state.processes.append(ProcessRecord(name, pid, pgid, start_ticks(pid)))
        save_state(path, state)


def record_endpoint(path: Path, endpoint: EndpointRecord, remove: bool = False) -> None:
    """Attach (or, with ``remove``, detach) a long-running client to the run: listed by ``status``,
    coordinated by the run's ``fault switchover`` (PER-1/PER-4), its process stopped by ``down``."""
    with locked(path):
        state = load_state(path)
        state.endpoints = [e for e in state.endpoints if e.name != endpoint.name]
        state.processes = [p for p in state.processes if p.pid != endpoint.pid]
        if not remove:
            state.endpoints.append(endpoint)
            state.processes.append(ProcessRecord(endpoint.name, endpoint.pid, None, start_ticks(endpoint.pid)))
        save_state(path, state)


def live_endpoints(path: Path) -> list[EndpointRecord]:
    """The run's attached clients whose process still runs (a killed one is skipped, not listed)."""
    return [e for e in load_state(path).endpoints if pid_alive(e.pid)]


def start_reaper(path: Path, owner_pid: int) -> int:
    """Start a watchdog that tears the run down if ``owner_pid`` dies without doing it (a crash or
    SIGKILL of the test run), or holds a detached run's port reservations. It exits by itself once the
    run directory is gone. Returns its PID."""
    return subprocess.Popen([sys.executable, "-m", "harness.topology.reaper", str(path), str(owner_pid)],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True).pid


def find_reaper(path: Path) -> int | None:
    """The PID of the run's live reaper, or None when it is gone."""
    return next((pid for pid in processes_mentioning(str(path)) if "harness.topology.reaper" in _cmdline(pid)), None)


def release_shared_memory(datadir: Path, wait: float = 3.0) -> bool:
    """Remove the System V shared-memory segment a PostgreSQL postmaster of ``datadir`` created (its
    ``postmaster.pid`` line 7: key and id) once no process is attached any more (a killed
    postmaster's children take up to ≈1.3 s to exit: waited for up to ``wait`` s). A postmaster that
    was SIGKILLed leaves it; PostgreSQL reclaims it only when a server starts again on that data
    directory, which never happens once the run's folder is deleted - so without this every killed
    node of every run leaks one segment until the kernel's SHMMNI (4096) is reached and no server on
    the machine can start ("could not create shared memory segment: No space left on device", seen
    here). Returns whether one was removed."""
    try:
        line = (datadir / "postmaster.pid").read_text().splitlines()[6].split()
        key, shmid = int(line[0]), int(line[1])
    except (OSError, IndexError, ValueError):
        return False
    deadline = time.monotonic() + wait
    while True:
        try:
            table = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        except OSError:
            return False
        row = next((r.split() for r in table if r.split()[:2] == [str(key), str(shmid)]), None)
        if row is None or len(row) <= 6:
            return False  # gone already (or not this segment)
        if row[6] == "0":
            return subprocess.run(["ipcrm", "-m", str(shmid)], capture_output=True).returncode == 0
        if time.monotonic() >= deadline:
            return False  # still attached: a live server's, or children that would not die
        time.sleep(0.05)


def down_run(path: Path) -> list[int]:
    """Stop every process of a run (any state, any owner) and delete its directory. Returns the PIDs
    that had to be killed."""
    killed: list[int] = []
    state: dict[str, Any] = {}  # read loosely: down must clean even a half-written or foreign state
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        state = _load_raw(path)
    # a recorded process is signalled only while its PID still names it (the start time recorded
    # with it): a process that ended on its own may have handed its PID to a stranger since
    owned = [p for p in state.get("processes", []) if same_process(p.get("pid"), p.get("started"))]
    for proc in owned:
        pid = proc["pid"]
        killed.append(pid)
        signal_pid(pid, 15)
    for node in state.get("nodes", []):
        pid = node.get("pid")
        if pid and (pid_alive(pid) or True):
            if pid_alive(pid):
                killed.append(pid)
            kill_group(pid, timeout=5)
    for proc in owned:
        pid = proc["pid"]
        if same_process(pid, proc.get("started")):
            kill_group(proc.get("pgid") or pid, timeout=2)
            signal_pid(pid, 9)
    for node in state.get("nodes", []):  # a SIGKILLed postmaster leaves its SysV segment behind
        if node.get("datadir") and state.get("backend", "local") == "local":  # (a container's: its own namespace)
            release_shared_memory(Path(str(node["datadir"])))
    if state.get("backend") == "compose" and state.get("run"):  # its containers, volumes, networks
        remove_resources(run=str(state["run"]))
    # anything else still mentioning this run (children of a crashed run, tools mid-way)
    for pid in processes_mentioning(str(path)):
        killed.append(pid)
        signal_pid(pid, 9)
    for port in state.get("ports", []):
        release_port(port)
    shutil.rmtree(path, ignore_errors=True)
    return killed


def down_all() -> dict[str, list[int]]:
    """Tear down every run on this machine, and kill any leftover process mentioning the runs
    directory (from runs whose directory is already gone)."""
    result = {run_id: down_run(runs_dir() / run_id) for run_id in list_runs()}
    for entry in runs_dir().iterdir():  # half-created runs without a state file
        if entry.is_dir():
            result.setdefault(entry.name, down_run(entry))
    remove_resources(home=str(harness_home()))  # compose resources of runs whose folder is gone
    strays = processes_mentioning(str(runs_dir()) + "/")
    strays = [p for p in strays if "harness.topology.reaper" not in _cmdline(p)]
    for pid in strays:
        signal_pid(pid, 9)
    if strays:
        result["(strays)"] = strays
    return result


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
