"""``pgpool``: real pgpool-II 4.3 (Debian ``pgpool2``) in ``raw`` clustering mode in front of the
pair's principal, as a PER-profile client (PER-1..PER-8 judged as for any client).

pgpool-II has no way to hold sessions while the principal changes: a backend's address is fixed at
its start (``backend_port0`` "can only be set at server start"), and its own failover restarts every
child process. The adapter therefore does what an operator does: after the switchover it rewrites
``backend_hostname0``/``backend_port0`` to the new principal and restarts pgpool (fast shutdown);
the client sessions are lost (the suites judge what that means for each rule)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from typing import Any

from harness.clients.persistent.pooler import PoolerProgram
from harness.clients.persistent.protocol import Address
from harness.errors import MissingDependencyError
from harness.ports import allocate_port, release_port
from harness.redact import write_private_file
from harness.topology.process import database_user, kill_group, signal_group, spawn_server, wait_gone

PGPOOL_BIN = os.environ.get("FAILOVER_HARNESS_PGPOOL") or shutil.which("pgpool") or "/usr/sbin/pgpool"

_CONF = """backend_clustering_mode = 'raw'
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{dir}'
pcp_listen_addresses = ''
pcp_port = {pcp_port}
pcp_socket_dir = '{dir}'
pid_file_name = '{dir}/pgpool.pid'
logdir = '{dir}'
backend_hostname0 = '{host}'
backend_port0 = {backend_port}
backend_weight0 = 1
backend_flag0 = 'DISALLOW_TO_FAILOVER'
num_init_children = {children}
max_pool = 1
enable_pool_hba = on
pool_passwd = '{dir}/pool_passwd'
health_check_period = 0
sr_check_period = 0
load_balance_mode = off
failover_on_backend_error = off
log_destination = 'stderr'
"""


def pgpool_version() -> str:
    """``pgpool --version``, or MissingDependencyError naming the install command."""
    path = shutil.which(PGPOOL_BIN)
    if path is None:
        raise MissingDependencyError("pgpool-II is not installed: apt-get install -y pgpool2 (failover-harness setup "
                                     "lists it), or set FAILOVER_HARNESS_PGPOOL")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    return (out.stdout or out.stderr).strip().splitlines()[0]


class PgpoolClient(PoolerProgram):
    """pgpool-II 4.3 in raw mode before the principal; after a switchover it is re-pointed and
    restarted (its sessions are lost: pgpool cannot keep them, PER-1)."""

    name = "pgpool"

    def __init__(self, pair: Any, history: Any = None, drain_window: float = 60.0,
                 recovery_window: float = 60.0, children: int = 32, via_fault_proxy: bool = True) -> None:
        super().__init__(pair, history, drain_window, recovery_window, via_fault_proxy=via_fault_proxy)
        self.children = children
        self.pcp_port: int | None = None
        self._run_as: Any = None

    def _write_conf(self, target: Address) -> None:
        assert self.dir is not None
        text = _CONF.format(port=self.port, pcp_port=self.pcp_port, dir=self.dir, host=target[0],
                            backend_port=target[1], children=self.children)
        path = self.dir / "pgpool.conf"
        path.write_text(text)
        os.chmod(path, 0o644)

    def start(self) -> Address:
        """Write the configuration (the password only in the 0600 ``pool_passwd``), start pgpool as the
        database user, wait until it accepts a login."""
        self.version = pgpool_version()
        self._run_as = database_user()
        self.dir = self._make_dir("pgpool-", self._run_as)
        self.port, self.pcp_port = allocate_port(), allocate_port()
        self._run_as.chown(write_private_file(self.dir / "pool_passwd", f"{self.user}:TEXT{self.password}\n"))
        hba = self.dir / "pool_hba.conf"
        hba.write_text("host all all 127.0.0.1/32 scram-sha-256\nlocal all all trust\n")
        (self.dir / "pcp.conf").write_text("")
        try:
            self._launch(self._principal_address())
        except BaseException:
            self.stop()
            raise
        self._emit("client.start", address=f"127.0.0.1:{self.port}", version=self.version, pid=self.pid)
        return self.address  # type: ignore[return-value]

    def _launch(self, target: Address) -> None:
        assert self.dir is not None
        self._write_conf(target)
        binary = shutil.which(PGPOOL_BIN) or PGPOOL_BIN
        self.pid = spawn_server([binary, "-n", "-f", str(self.dir / "pgpool.conf"), "-a",
                                 str(self.dir / "pool_hba.conf"), "-F", str(self.dir / "pcp.conf")],
                                self.dir / "stdout.log", self._run_as, self.dir)
        self._register_pid()
        self.address = ("127.0.0.1", self.port)  # type: ignore[assignment]
        self._wait_ready()

    def _log_tail(self) -> str:
        if self.dir is None:
            return ""
        with contextlib.suppress(OSError):
            return "\n".join((self.dir / "stdout.log").read_text(errors="replace").splitlines()[-8:])
        return ""

    def _wait_ready(self, timeout: float = 20) -> None:
        self._wait_login("pgpool", timeout, lambda: "successfully started" in self._log_tail(), poll=0.05, retry=0.1)

    def _kill(self) -> None:
        if self.pid is not None:
            signal_group(self.pid, signal.SIGINT)  # pgpool: SIGINT = fast shutdown
            wait_gone(self.pid, 5)
            kill_group(self.pid, 3)  # and no child of it left serving an old session
            self._register_pid(remove=True)
            self.pid = None

    def stop(self) -> None:
        """Stop pgpool (fast shutdown, then SIGKILL of its group), release its ports, remove its folder."""
        if self.pid is not None:
            self._emit("client.stop", pid=self.pid)
            self._kill()
        for port in (self.port, self.pcp_port):
            if port is not None:
                release_port(port)
        self.port = self.pcp_port = None
        self._remove_dir()
        self.address = None

    def before_switchover(self) -> dict[str, Any]:
        """pgpool-II has nothing to drain with (no PAUSE): nothing happens before the swap."""
        return {"drained": False}

    def after_switchover(self, new_principal_address: Address) -> dict[str, Any]:
        """Re-point ``backend_*0`` at the new principal and restart pgpool (its sessions are lost)."""
        t0 = time.monotonic()
        target = self._switchover_target(new_principal_address)
        self._kill()
        self._launch(target)
        result = {"target": f"{target[0]}:{target[1]}", "restarted": True, "seconds": time.monotonic() - t0}
        self._emit("pgpool.restart", **result)
        return result

    def describe(self) -> dict[str, Any]:
        """Adds the version and the clustering mode."""
        return {**super().describe(), "version": self.version, "mode": "raw", "children": self.children}


def pgpool(*, pair: Any, history: Any = None, drain_window: float = 60.0, recovery_window: float = 60.0,
           **options: Any) -> PgpoolClient:
    """pgpool-II 4.3 in raw mode (PER-1..PER-8 judged as for any client)."""
    return PgpoolClient(pair, history, drain_window, recovery_window, **options)
