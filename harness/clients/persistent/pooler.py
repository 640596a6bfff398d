"""Shared plumbing of the PER-profile adapters that run a real pooler program (PgBouncer, pgpool-II)
in front of the pair's principal (RULEBOOK PER-1..PER-8 are judged as for any client): its folder
in the pair's run directory, its PID registered in the run (so ``down`` and the reaper stop it even
after a crash), the readiness login, and the backend address it is pointed at before and after a
switchover."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from harness.clients.persistent.protocol import Address, ClientBase
from harness.errors import ClientStartError, HarnessError
from harness.topology.process import pid_alive


class PoolerProgram(ClientBase):
    """Base of :class:`~harness.clients.persistent.pgbouncer.PgBouncerClient` and
    :class:`~harness.clients.persistent.pgpool.PgpoolClient`; a subclass starts, kills and configures
    its program, setting :attr:`dir`, :attr:`port`, :attr:`pid` and :attr:`version` as it goes."""

    def __init__(self, pair: Any, history: Any = None, drain_window: float = 60.0,
                 recovery_window: float = 60.0, *, via_fault_proxy: bool = True) -> None:
        super().__init__(pair, history, drain_window, recovery_window)
        self.via_fault_proxy = via_fault_proxy  # the backend reached through the pair's fault proxy
        self.dir: Path | None = None
        self.port: int | None = None
        self.pid: int | None = None
        self.version: str | None = None

    def _principal_address(self) -> Address:
        """Where the program points its backend now: the principal's fault-proxy address (so the
        harness's faults reach the program's server connections), or its server address."""
        node = self.pair.principal
        return tuple(node.client_address if self.via_fault_proxy else node.server_address)  # type: ignore[return-value]

    def _switchover_target(self, new_principal_address: Address) -> Address:
        """The backend to re-point at after a coordinated switchover (PER-1/PER-4): the address the
        faults hand over, or the new principal's server address when not through the fault proxy."""
        return (tuple(new_principal_address) if self.via_fault_proxy  # type: ignore[return-value]
                else self._principal_address())

    def _make_dir(self, prefix: str, run_as: Any) -> Path:
        """A fresh folder for the program in the pair's run directory (else the system's temporary
        one), readable by and owned by the database user ``run_as`` the program runs as."""
        base = getattr(self.pair, "path", None)
        parent = Path(base) if base and Path(base).is_dir() else None
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        os.chmod(folder, 0o755)
        run_as.chown(folder)
        return folder

    def _register_pid(self, remove: bool = False) -> None:
        """Make the PID part of the pair's run so ``down``/the reaper stop it too (``remove``: forget it)."""
        register = getattr(self.pair, "register_process", None)
        if self.pid is None or register is None or not getattr(self.pair, "run_id", None):
            return
        with contextlib.suppress(OSError, HarnessError):
            register(self.name, self.pid, remove=remove)

    def _log_tail(self) -> str:  # pragma: no cover - overridden
        """The last lines of the program's log (for error messages)."""
        raise NotImplementedError

    def _wait_login(self, program: str, timeout: float, started: Callable[[], bool], *, poll: float,
                    retry: float) -> None:
        """Wait until the program, once ``started()`` (its log says so; checked every ``poll`` s),
        accepts a login (:meth:`_login_error`, retried every ``retry`` s) - no PER test traffic goes
        through it before. ClientStartError with its log tail when it exits or does not accept one
        within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.pid is None or not pid_alive(self.pid):
                raise ClientStartError(f"{program} exited at start:\n{self._log_tail()}")
            if not started():
                time.sleep(poll)
                continue
            error = self._login_error()
            if error is None:
                return
            last = error
            time.sleep(retry)
        raise ClientStartError(f"{program} did not accept a login within {timeout} s ({last}):\n{self._log_tail()}")

    def _login_error(self) -> str | None:
        """One application login through the program and ``SELECT 1``: None when it answered, else
        the error's text (the readiness wait before any PER test traffic)."""
        try:
            with psycopg.connect(self.dsn(), connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return None
        except psycopg.Error as exc:
            return str(exc).strip()

    def _remove_dir(self) -> None:
        """Remove the program's folder (configuration, password file, logs)."""
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
