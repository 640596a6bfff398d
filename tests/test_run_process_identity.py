"""``down`` signals a recorded process only while its PID still names it (harness.topology.run,
process.start_ticks): a process that ended on its own may hand its PID to a stranger, which ``down``,
``down --run`` and the reaper must leave alone (nothing leaked, and nothing else killed either)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from harness.topology.process import children_of, pid_alive, same_process, start_ticks
from harness.topology.run import down_run, load_state, record_process, save_state
from harness.topology.state import RunState


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


def _run_dir(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    save_state(path, RunState(run="identity", topology="pg-pair", engine="postgres", version="15", mode="async",
                              mirror_readable=False, created=time.time(), owner_pid=0))
    return path


def _gone(proc: subprocess.Popen[bytes]) -> bool:
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_a_recorded_process_carries_its_start_time_and_down_stops_it(tmp_path) -> None:
    path = _run_dir(tmp_path)
    proc = _sleeper()
    try:
        record_process(path, "pooler", proc.pid, proc.pid)
        [record] = load_state(path).processes
        assert record.started is not None and record.started == start_ticks(proc.pid)
        assert proc.pid in down_run(path)
        assert _gone(proc)
    finally:
        proc.kill()
        proc.wait()


def test_down_leaves_alone_a_live_pid_whose_start_time_is_not_the_recorded_one(tmp_path) -> None:
    """What a reused PID looks like: alive, but started at another time than the recorded process."""
    path = _run_dir(tmp_path)
    stranger = _sleeper()
    try:
        record_process(path, "pooler", stranger.pid, stranger.pid)
        state = load_state(path)
        state.processes[0].started = (state.processes[0].started or 0) - 1000  # the recorded one, long gone
        save_state(path, state)
        assert not same_process(stranger.pid, state.processes[0].started)
        assert stranger.pid not in down_run(path)
        assert stranger.poll() is None and pid_alive(stranger.pid)  # neither SIGTERM nor its group's SIGKILL
    finally:
        stranger.kill()
        stranger.wait()


def test_a_record_without_a_start_time_is_still_stopped(tmp_path) -> None:
    """A state written before start times were recorded: the PID alone decides, as it did."""
    path = _run_dir(tmp_path)
    proc = _sleeper()
    try:
        record_process(path, "pooler", proc.pid, proc.pid)
        state = load_state(path)
        state.processes[0].started = None
        save_state(path, state)
        assert same_process(proc.pid, None)
        assert proc.pid in down_run(path)
        assert _gone(proc)
    finally:
        proc.kill()
        proc.wait()


def test_start_ticks_of_no_process_is_none() -> None:
    proc = _sleeper()
    proc.kill()
    proc.wait()
    assert start_ticks(proc.pid) is None or not pid_alive(proc.pid)
    assert start_ticks(None) is None and not same_process(None, None)


def test_children_of_lists_live_children_only() -> None:
    """``children_of`` (a machine loss kills a postmaster's children with it) sees a live child, not an
    exited one."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in children_of(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert child.pid not in children_of(os.getpid())
