"""Which processes of a run are really there: each node's postmaster, every process the run owns (the
detached fault-proxy server, poolers, proxies), the fault proxy's API and the run's reaper - checked
against the machine, not read from the state file, so that ``status`` says ``dead`` for what is gone.

A PID counts only if that process did not start long before the run was created (a recycled PID of
some other program is not the run's process)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.topology.process import pid_alive
from harness.topology.run import find_reaper
from harness.topology.state import PAUSED, RUNNING, RunState
from harness.toxiproxy.client import ToxiproxyClient

DEAD = "dead"


@dataclass(frozen=True)
class ProcessStatus:
    """One process of a run as found on the machine: ``state`` is ``running``/``paused`` when it is
    there, ``dead`` when it should be but is not, or the recorded ``stopped``/``killed`` of a node."""

    name: str
    kind: str  # "node", "process", "fault-proxy" or "reaper"
    pid: int | None
    state: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``status --json`` prints under ``processes``."""
        return asdict(self)


def _started_at(pid: int) -> float | None:
    """Wall-clock start time of ``pid`` from /proc (None when it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, IndexError, StopIteration, ValueError):
        return None
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


#: How long before the run's ``created`` time its processes may start: the fault proxy of a detached run
#: is started first (up to its 15 s start deadline on a busy machine); ``btime`` has a 1 s grain.
START_MARGIN = 60.0


def is_run_process(pid: int | None, created: float) -> bool:
    """True when ``pid`` is alive and did not start long before the run was created."""
    if not pid or not pid_alive(pid):
        return False
    started = _started_at(pid)
    return started is None or started >= created - START_MARGIN


def _fault_proxy(state: RunState, processes: list[ProcessStatus]) -> ProcessStatus | None:
    """The fault proxy's API: a run without its own proxy process (in the test process, a spawned
    binary or TOXIPROXY_URL) is checked by asking the API; one with a recorded process by that too."""
    links = state.links
    if links.kind == "direct" or not links.url:
        return None
    recorded = next((p for p in processes if p.name == "toxiproxy-server"), None)
    if recorded is not None and recorded.state == DEAD:
        return ProcessStatus("fault-proxy API", "fault-proxy", recorded.pid, DEAD,
                             f"{links.url} (its server process is gone)")
    answers = ToxiproxyClient(links.url, timeout=5).is_available()  # refused at once when it is gone
    return ProcessStatus("fault-proxy API", "fault-proxy", recorded.pid if recorded else None,
                         RUNNING if answers else DEAD, links.url if answers else f"{links.url} does not answer")


def run_processes(path: Path, state: RunState) -> list[ProcessStatus]:
    """Every process ``status`` lists for a run, each checked on the machine (RULE: status tells the
    truth - a process that is gone is ``dead``, never the ``running`` the state file remembers)."""
    found: list[ProcessStatus] = []
    for node in state.nodes:
        if node.state in (RUNNING, PAUSED):
            alive = is_run_process(node.pid, state.created)
            found.append(ProcessStatus(node.name, "node", node.pid, node.state if alive else DEAD,
                                       "" if alive else f"postmaster {node.pid} is gone (recorded {node.state})"))
        else:
            found.append(ProcessStatus(node.name, "node", None, node.state))
    for proc in state.processes:
        alive = is_run_process(proc.pid, state.created)
        found.append(ProcessStatus(proc.name, "process", proc.pid, RUNNING if alive else DEAD))
    proxy = _fault_proxy(state, found)
    if proxy is not None:
        found.append(proxy)
    reaper = find_reaper(path)
    found.append(ProcessStatus("reaper", "reaper", reaper, RUNNING if reaper else DEAD,
                               "" if reaper else "nothing holds the run's port reservations or tears it down"))
    return found
