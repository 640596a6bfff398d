"""Process plumbing for the local backend: spawn a server as the unprivileged database user in its
own process group, signal whole groups, and wait for processes to be really gone (zombies count as
gone: this machine's init may not reap them)."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import MissingDependencyError

# Popen objects of the servers this process started, so that it can reap them (no zombies).
_CHILDREN: dict[int, subprocess.Popen] = {}


@dataclass(frozen=True)
class RunAs:
    """The OS identity database servers run under (PostgreSQL refuses to run as root)."""

    uid: int
    gid: int
    name: str

    @property
    def switch(self) -> bool:
        """True when the harness must change user to start a server (it runs as root)."""
        return os.geteuid() != self.uid

    def popen_kwargs(self) -> dict:
        """Keyword arguments for subprocess that run the child as this user."""
        if not self.switch:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def chown(self, *paths: Path) -> None:
        """Give ``paths`` to this user (no-op when the harness already runs as it)."""
        if self.switch:
            for p in paths:
                os.chown(p, self.uid, self.gid)


def database_user() -> RunAs:
    """The user servers run as: ``FAILOVER_HARNESS_DB_USER`` or ``postgres`` when running as root,
    else the current user."""
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return RunAs(entry.pw_uid, entry.pw_gid, entry.pw_name)
    name = os.environ.get("FAILOVER_HARNESS_DB_USER", "postgres")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise MissingDependencyError(
            f"the harness runs as root and needs an unprivileged OS user {name!r} to run database "
            f"servers; install PostgreSQL (apt-get install -y postgresql creates 'postgres') or set "
            f"FAILOVER_HARNESS_DB_USER to an existing user") from None
    return RunAs(entry.pw_uid, entry.pw_gid, entry.pw_name)


def _become_subreaper() -> None:
    """Make this process adopt orphaned server processes (this machine's init does not reap them),
    so that :func:`wait_gone` can reap the zombies of a killed server group."""
    global _SUBREAPER
    if _SUBREAPER:
        return
    _SUBREAPER = True
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


_SUBREAPER = False


def spawn_server(argv: Sequence[str], log_path: Path, run_as: RunAs, cwd: Path,
                 env: dict[str, str] | None = None) -> int:
    """Start a long-running server as ``run_as`` in a new session (its own process group, so it
    ignores the terminal's Ctrl-C and can be signalled as a whole); output goes to ``log_path``."""
    _become_subreaper()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=cwd, start_new_session=True, env=env, **run_as.popen_kwargs())
    _CHILDREN[proc.pid] = proc
    return proc.pid


def run_tool(argv: Sequence[str], run_as: RunAs, cwd: Path | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a short tool (initdb, pg_rewind, pg_basebackup) as ``run_as`` and capture its output."""
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          stdin=subprocess.DEVNULL, **run_as.popen_kwargs())


def _reap(pid: int, wait: float = 0.0) -> None:
    proc = _CHILDREN.get(pid)
    if proc is None:
        return
    try:
        proc.wait(wait) if wait else proc.poll()
    except subprocess.TimeoutExpired:
        return
    if proc.returncode is not None:
        _CHILDREN.pop(pid, None)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of ``pid`` from /proc, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:  # binary, unbuffered text layer: 2-3x faster
            raw = fh.read()                           # than Path.read_text over a /proc scan
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    return fields[0].decode(), int(fields[2])


def start_ticks(pid: int | None) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22), or None when
    there is no such process: with the PID it names one process for good, since a PID is reused once
    its process is gone (so that ``down`` never signals a stranger that got a recorded PID)."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(raw[raw.rfind(b")") + 2:].split()[19])


def same_process(pid: int | None, started: int | None) -> bool:
    """Whether ``pid`` is alive and still the process that had start time ``started``
    (:func:`start_ticks`); a record without one (``started`` None, e.g. an older state) is taken
    as that process while the PID is alive."""
    if not pid_alive(pid):
        return False
    return started is None or start_ticks(pid) == started


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` is a live (non-zombie) process."""
    if not pid:
        return False
    _reap(pid)
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``; zombies of that group that this
    process adopted (as subreaper) are reaped on the way."""
    members = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            pid = int(entry.name)
            st = _stat(pid)
            if not st or st[1] != pgid:
                continue
            if st[0] not in ("Z", "X"):
                members.append(pid)
            elif pid not in _CHILDREN and parent_pid(pid) == me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
    return members


def parent_pid(pid: int) -> int:
    """The parent of ``pid`` (0 when gone; ``/proc/PID/stat`` field 4)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(raw[raw.rfind(")") + 2:].split()[1])


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (a postmaster's backends and auxiliary processes)."""
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and parent_pid(int(e.name)) == pid
            and (_stat(int(e.name)) or ("X",))[0] not in ("Z", "X")]


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to every process of group ``pgid`` (no error if the group is gone)."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def signal_pid(pid: int, sig: int) -> None:
    """Send ``sig`` to one process (no error if it is gone)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def wait_gone(pid: int, timeout: float, group: bool = False, poll: float = 0.005) -> bool:
    """Wait until ``pid`` (or its whole process group) has exited; True if it did in time. For a
    group the leader is watched first (one /proc read per poll), the whole group - a scan of every
    process's /proc entry, ~90 ms on a loaded machine with a few hundred processes (measured for the PER-1 stall) - only
    once the leader is gone: a postmaster or mysqld leads its group and exits last."""
    deadline = time.monotonic() + timeout
    while True:
        _reap(pid)
        alive = (pid_alive(pid) or bool(group_members(pid))) if group else pid_alive(pid)
        if not alive:
            _reap(pid, wait=1.0)  # no zombie left behind: PostgreSQL treats one as a live postmaster
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def kill_group(pgid: int, timeout: float = 5.0) -> bool:
    """SIGKILL a whole process group (resuming it first if stopped) and wait until it is gone."""
    signal_group(pgid, signal.SIGCONT)
    signal_group(pgid, signal.SIGKILL)
    return wait_gone(pgid, timeout, group=True)


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line contains ``text`` (to find leftovers of a run)."""
    found = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and pid_alive(int(entry.name)) and not _is_bystander(cmd):
            found.append(int(entry.name))
    return found


_BYSTANDERS = ("bash", "sh", "dash", "zsh", "ls", "grep", "cat", "tail", "less", "vi", "vim", "find", "rg")


def _is_bystander(cmdline: str) -> bool:
    """A shell or viewer that merely names a run's path is not part of the run."""
    first = cmdline.split(" ", 1)[0].rsplit("/", 1)[-1].lstrip("-")
    return first in _BYSTANDERS
