"""The Docker engine the Compose backend needs: whether one answers, starting one where none does
(never a second one), stopping only the one this harness started, and an SDK client.

Where no engine answers, systemd as PID 1 starts the ``docker`` unit; elsewhere (containers, CI
without services) ``dockerd`` runs in the background with host networking only (no bridge, no
iptables: ``--bridge=none --iptables=false --ip-forward=false --ip-masq=false``), and the PID of the
engine started that way is recorded in :func:`engine_record` so that :func:`stop_engine` stops that
one and nothing else."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import MissingDependencyError, TopologyError

DOCKERD_FLAGS = ("--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false")
#: Label on every container, volume and network of a run: its run ID.
RUN_LABEL = "io.failover-harness.run"
#: Label naming the harness home of the run (``down --all`` of one home leaves other homes alone).
HOME_LABEL = "io.failover-harness.home"


def engine_record() -> Path:
    """Where the PID of a ``dockerd`` this harness started is kept (env ``FAILOVER_HARNESS_DOCKERD_RECORD``)."""
    return Path(os.environ.get("FAILOVER_HARNESS_DOCKERD_RECORD", "/run/failover-harness-dockerd.json"))


def engine_answers(timeout: float = 10) -> bool:
    """True when a Docker engine answers ``docker version`` (the client alone is not enough)."""
    if shutil.which("docker") is None:
        return False
    try:
        res = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                             text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0 and bool(res.stdout.strip())


def _systemd_is_init() -> bool:
    try:
        return Path("/proc/1/comm").read_text().strip() == "systemd"
    except OSError:
        return False


def ensure_engine(say: Callable[[str], None], timeout: float = 60) -> str:
    """Make a Docker engine answer: nothing when one does; ``systemctl start docker`` under systemd;
    else start ``dockerd`` in the background (root only). Returns what it did
    (``running`` / ``systemd`` / ``started``); MissingDependencyError naming the fix otherwise."""
    if engine_answers():
        return "running"
    if _systemd_is_init() and shutil.which("systemctl"):
        say("no Docker engine answers: systemctl start docker")
        subprocess.run(["systemctl", "start", "docker"], check=False, capture_output=True)
        _wait_engine(timeout, "systemctl start docker")
        return "systemd"
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise MissingDependencyError("no Docker engine answers and dockerd is not installed; install it "
                                     "(Debian: apt-get install -y --no-install-recommends docker.io) or run "
                                     "'failover-harness compose-setup' as root")
    if os.geteuid() != 0:
        raise MissingDependencyError("no Docker engine answers and only root can start dockerd here; start the "
                                     "engine (sudo dockerd ...) or run 'failover-harness compose-setup' as root")
    log = Path("/var/log/failover-harness-dockerd.log")
    say(f"no Docker engine answers: starting dockerd {' '.join(DOCKERD_FLAGS)} (log {log})")
    with open(log, "ab") as out:
        proc = subprocess.Popen([dockerd, *DOCKERD_FLAGS], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    engine_record().write_text(json.dumps({"pid": proc.pid, "started": time.time()}))
    _wait_engine(timeout, f"dockerd (pid {proc.pid}, log {log})", proc)
    return "started"


def _wait_engine(timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine_answers(timeout=5):
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.2)
    raise TopologyError(f"the Docker engine did not answer after {what}; see its log")


def started_engine_pid() -> int | None:
    """The PID of the ``dockerd`` this harness started, while it runs (None otherwise)."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        pid = int(json.loads(engine_record().read_text())["pid"])
        if Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd":
            return pid
    return None


def stop_engine(say: Callable[[str], None], timeout: float = 30) -> bool:
    """Stop the ``dockerd`` this harness started (recorded by :func:`ensure_engine`), and only that
    one; returns True when it stopped one."""
    pid = started_engine_pid()
    engine_record().unlink(missing_ok=True)
    if pid is None:
        return False
    say(f"stopping the dockerd this harness started (pid {pid})")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)
    return True


def docker_client(timeout: float = 60) -> Any:
    """A docker SDK client for the local engine (MissingDependencyError naming the fix when the
    package or the engine is missing)."""
    try:
        import docker
    except ImportError:
        raise MissingDependencyError("the Python package 'docker' is missing; run 'failover-harness setup' "
                                     "(pip install -e .[dev])") from None
    try:
        return docker.from_env(timeout=timeout)
    except docker.errors.DockerException as exc:
        raise MissingDependencyError(f"no Docker engine answers ({exc}); "
                                     "run 'failover-harness compose-setup'") from None
