"""Shared plumbing of the router adapters that run a real program (HAProxy, nginx) in front of the ICM
cluster: a folder in the backing topology's run directory, two listen ports, the program started
as the database user with a generated configuration and registered in the run (so teardown and
the reaper stop it even after a crash), a readiness wait, and the cluster's state changes handed to
:meth:`ProcessRouter.on_change` (the adapter translates what its program can express)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.errors import ClientStartError, HarnessError, MissingDependencyError
from harness.ports import allocate_port, release_port
from harness.topology.process import database_user, kill_group, pid_alive, signal_group, spawn_server, wait_gone


def program_version(binary: str, args: list[str], package: str) -> str:
    """First line of ``binary args`` (stdout or stderr), or MissingDependencyError naming the package."""
    path = shutil.which(binary)
    if path is None:
        raise MissingDependencyError(f"{binary} is not installed: apt-get install -y {package} "
                                     "(failover-harness setup installs it)")
    out = subprocess.run([path, *args], capture_output=True, text=True, timeout=10)
    return ((out.stdout or out.stderr).strip().splitlines() or ["?"])[0]


class ProcessRouter:
    """Base of :class:`~harness.clients.icm.haproxy.HaproxyRouter` and
    :class:`~harness.clients.icm.nginx.NginxRouter` (an :class:`~harness.clients.icm.protocol.IcmRouter`)."""

    name = "process"
    mode = "proxy"
    binary = ""
    package = ""
    limitations: dict[str, str] = {}

    def __init__(self, cluster: Any, history: Any = None) -> None:
        self.cluster = cluster
        self.history = history
        self.dir: Path | None = None
        self.ports: dict[str, int] = {}
        self.pid: int | None = None
        self.version = ""
        self._unwatch: Any = None

    # -------------------------------------------------------------- what each adapter provides
    def config_text(self) -> str:  # pragma: no cover - overridden
        """The program's configuration for the cluster's current state."""
        raise NotImplementedError

    def argv(self) -> list[str]:  # pragma: no cover - overridden
        """The command line (foreground, the configuration in :attr:`dir`)."""
        raise NotImplementedError

    def on_change(self, type_: str, fields: dict[str, Any]) -> None:
        """A cluster state change (``icm.server.state`` ...): translate what the program can express."""

    # -------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Write the configuration, start the program as the database user, wait for both ports."""
        self.version = program_version(self.binary, ["-v"], self.package)
        run_as = database_user()
        base = Path(getattr(self.cluster.topology, "path", "") or tempfile.gettempdir())
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=base if base.is_dir() else None))
        os.chmod(self.dir, 0o755)
        run_as.chown(self.dir)
        self.ports = {"http": allocate_port(), "https": allocate_port()}
        try:
            self.write_config()
            self.pid = spawn_server(self.argv(), self.dir / "stdout.log", run_as, self.dir)
            self._register()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self._unwatch = self.cluster.watch(self._changed)
        if self.history is not None:
            self.history.record("client.start", client=self.name, version=self.version, pid=self.pid,
                                http=self.url("http"), https=self.url("https"))

    def write_config(self) -> Path:
        """(Re)write the configuration file."""
        assert self.dir is not None
        path = self.dir / f"{self.name}.conf"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.config_text())
        os.chmod(tmp, 0o644)
        tmp.replace(path)
        return path

    def record_reconfigured(self, fields: dict[str, Any]) -> None:
        """Record ``client.reconfigured`` after :meth:`on_change` applied a server's RESTRICTED /
        Server_MaxUsers change (ICM-4: what the router was told, for the checkers)."""
        if self.history is not None:
            self.history.record("client.reconfigured", client=self.name, server=fields.get("server"),
                                restricted=fields.get("restricted"), max_users=fields.get("max_users"))

    def _changed(self, type_: str, fields: dict[str, Any]) -> None:
        try:
            self.on_change(type_, fields)
        except HarnessError as exc:  # recorded: the router then simply does not know the change
            if self.history is not None:
                self.history.record("client.error", client=self.name, error=str(exc)[:300])

    def _register(self, remove: bool = False) -> None:
        register = getattr(self.cluster.topology, "register_process", None)
        if self.pid is not None and register is not None and getattr(self.cluster.topology, "run_id", None):
            with contextlib.suppress(OSError, HarnessError):
                register(self.name, self.pid, remove=remove)

    def log_tail(self) -> str:
        """The last lines of the program's output."""
        if self.dir is None:
            return ""
        with contextlib.suppress(OSError):
            return "\n".join((self.dir / "stdout.log").read_text(errors="replace").splitlines()[-10:])
        return ""

    def _wait_ready(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        pending = dict(self.ports)
        while pending:
            if self.pid is None or not pid_alive(self.pid):
                raise ClientStartError(f"{self.name} exited at start:\n{self.log_tail()}")
            for scheme, port in list(pending.items()):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    pending.pop(scheme)
            if time.monotonic() > deadline:
                raise ClientStartError(f"{self.name} does not listen on {sorted(pending.values())} after "
                                       f"{timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.02)

    def url(self, scheme: str, path: str = "/") -> str:
        """The router's URL for ``scheme``."""
        return f"{scheme}://127.0.0.1:{self.ports[scheme]}{path}"

    def stop(self) -> None:
        """Stop the program (TERM, then KILL), forget it in the run, release the ports."""
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self.pid is not None:
            signal_group(self.pid, signal.SIGTERM)
            if not wait_gone(self.pid, 3):
                kill_group(self.pid, 3)
            self._register(remove=True)
            self.pid = None
        for port in self.ports.values():
            release_port(port)
