"""``reference-Nw``: the reference persistent proxy run as the CLI does it, ``failover-harness
persistent-proxy --workers N`` in a subprocess (a process per core, docs/persistent-proxy.md), as a
:class:`~harness.clients.persistent.protocol.PersistentClient` in front of a pair: what the benchmarks
put beside the in-process, one-worker ``reference`` row (PER-1..PER-8).

The password reaches the subprocess in ``PGPASSWORD`` (never argv: no secret in any output); the admin token is read
from the 0600 file the proxy writes into a private temporary folder, removed at ``stop()``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from harness.clients.persistent.attached import admin_post
from harness.clients.persistent.protocol import Address, ClientBase
from harness.errors import ClientStartError, CoordinationError

_START_TIMEOUT = 60.0


class ReferenceProcessClient(ClientBase):
    """``persistent-proxy --workers N --run ID --via client --admin 127.0.0.1:0`` in a subprocess (the
    run's nodes at their client addresses, re-read as nodes are added and removed; ``--backend`` for
    every node when the topology has no run);
    ``before_switchover`` = ``POST /drain``, ``after_switchover(address)`` = ``POST /resume`` on that
    address (PER-1, PER-4), through the supervisor's admin API (every worker)."""

    coordinates = True
    #: ``POST /resume``: changes no run state (harness.faults.coordination, early resume)
    resume_inside_switchover = True

    def __init__(self, pair: Any, history: Any = None, drain_window: float = 60.0, recovery_window: float = 60.0,
                 workers: int | None = None, listen_mode: str = "reuseport", **options: Any) -> None:
        super().__init__(pair, history, drain_window, recovery_window, user=options.pop("user", None),
                         password=options.pop("password", None))
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.name = f"reference-{self.workers}w"
        self.listen_mode = listen_mode  # --listen-mode: one shared socket, or SO_REUSEPORT per worker
        self._proc: subprocess.Popen[str] | None = None
        self._dir: Path | None = None
        self._admin: str | None = None
        self._token: str | None = None

    def _nodes(self) -> list[Address]:
        nodes = getattr(self.pair, "nodes", None) or [self.pair.principal]
        return [tuple(n.client_address) for n in nodes]  # type: ignore[misc]

    def start(self) -> Address:
        """Start the subprocess, wait for its JSON line (ClientStartError with its stderr if it fails)."""
        self._dir = Path(tempfile.mkdtemp(prefix="fh-refproc-"))
        os.chmod(self._dir, 0o700)
        argv = [sys.executable, "-m", "harness.cli", "persistent-proxy", "--user", self.user,
                "--admin", "127.0.0.1:0", "--token-file", str(self._dir / "admin.token"),
                "--workers", str(self.workers), "--listen-mode", self.listen_mode,
                "--drain-window", f"{self.drain_window:g}", "--recovery-window", f"{self.recovery_window:g}"]
        run_id = getattr(self.pair, "run_id", None)
        if run_id:  # follow the run's nodes as they are added and removed (the principal and /resume's allow-list)
            argv += ["--run", str(run_id), "--via", "client"]
        else:
            for host, port in self._nodes():
                argv += ["--backend", f"{host}:{port}"]
        env = {**os.environ, "PGPASSWORD": self.password or ""}
        self._err = open(self._dir / "stderr.log", "w+", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._err, stdin=subprocess.DEVNULL,
                                      text=True, env=env)
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], _START_TIMEOUT)
        line = self._proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise ClientStartError(f"{self.name}: persistent-proxy did not start within {_START_TIMEOUT:g} s: "
                                   f"{self._stderr()[-500:]}")
        info = json.loads(line)
        host, _, port = info["listen"].rpartition(":")
        self.address = (host, int(port))
        self._admin = f"http://{info['admin']}"
        self._token = Path(info["token_file"]).read_text().strip()
        self._emit("client.start", address=info["listen"], workers=self.workers)
        return self.address

    def _stderr(self) -> str:
        if self._dir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self._dir / "stderr.log").read_text(encoding="utf-8", errors="replace")
        return ""

    def _post(self, path: str, body: dict[str, Any], timeout: float) -> Any:
        if self._admin is None or self._token is None:
            raise CoordinationError(f"{self.name} is not started")
        return admin_post(self.name, self._admin, path, body, self._token, timeout)

    def before_switchover(self) -> Any:
        """PER-4: ``POST /drain`` (every worker, in parallel)."""
        return self._post("/drain", {}, timeout=self.drain_window + 30.0)

    def prepare_switchover(self, next_principal_address: Address) -> Any:
        """The PER-1 stall: ``POST /prepare`` - every worker pre-attaches its kept sessions to the
        node about to be promoted (answers at once)."""
        host, port = next_principal_address
        return self._post("/prepare", {"host": host, "port": int(port)}, timeout=30.0)

    def after_switchover(self, new_principal_address: Address) -> Any:
        """PER-1/2/3: ``POST /resume`` on the new principal's address."""
        host, port = new_principal_address
        return self._post("/resume", {"host": host, "port": int(port)}, timeout=self.recovery_window + 30.0)

    def status(self) -> dict[str, Any]:
        """The supervisor's ``GET /status`` (sessions of every worker, counters summed)."""
        if self._admin is None:
            raise CoordinationError(f"{self.name} is not started")
        return httpx.get(self._admin + "/status", timeout=30).json()

    def stop(self) -> None:
        """SIGTERM the supervisor (it stops its workers), SIGKILL after 20 s; remove the folder."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
                try:
                    self._proc.wait(20)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(10)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None
            self._emit("client.stop")
        if getattr(self, "_err", None) is not None:
            self._err.close()
            self._err = None  # type: ignore[assignment]
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self.address = None
        self._admin = self._token = None


def reference_workers(*, pair: Any, history: Any = None, drain_window: float = 60.0, recovery_window: float = 60.0,
                      workers: int | None = None, **options: Any) -> ReferenceProcessClient:
    """The CLI reference proxy with ``--workers`` (default: one per core) as a PersistentClient."""
    return ReferenceProcessClient(pair, history, drain_window, recovery_window, workers=workers, **options)


__all__ = ["ReferenceProcessClient", "reference_workers"]
