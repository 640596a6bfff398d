"""``pgbouncer-session`` / ``pgbouncer-transaction``: real PgBouncer 1.18 (Debian) in session or
transaction pooling as PER-profile clients, coordinated with ``PAUSE`` / re-point ``[databases]`` +
``RELOAD`` / ``RESUME`` on its admin console (PER-1..PER-8 judged as for any client)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import Any

import psycopg

from harness.clients.persistent.pooler import PoolerProgram
from harness.clients.persistent.protocol import Address
from harness.errors import ConfigError, MissingDependencyError, PortInUseError
from harness.ports import allocate_port, release_port, retry_on_port_in_use
from harness.redact import write_private_file
from harness.topology import postgres as pg
from harness.topology.process import database_user, kill_group, signal_group, spawn_server, wait_gone

PGBOUNCER_BIN = os.environ.get("FAILOVER_HARNESS_PGBOUNCER") or shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


_INI = """[databases]
{databases}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir = {dir}
auth_type = scram-sha-256
auth_file = {dir}/userlist.txt
admin_users = {user}
pool_mode = {pool_mode}
max_client_conn = 500
default_pool_size = {pool_size}
server_login_retry = {server_login_retry}
query_wait_timeout = {query_wait_timeout}
server_connect_timeout = 5
ignore_startup_parameters = extra_float_digits,options
pidfile = {dir}/pgbouncer.pid
logfile = {dir}/pgbouncer.log
log_connections = 1
log_disconnections = 1
"""


def pgbouncer_version() -> str:
    """``pgbouncer --version`` first line, or MissingDependencyError naming the install command."""
    path = shutil.which(PGBOUNCER_BIN)  # also accepts an absolute path to an executable
    if path is None:
        raise MissingDependencyError("pgbouncer is not installed: apt-get install -y pgbouncer "
                                     "(failover-harness setup installs it), or set FAILOVER_HARNESS_PGBOUNCER")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    return (out.stdout or out.stderr).splitlines()[0].strip()


class PgBouncerClient(PoolerProgram):
    """Real PgBouncer 1.18 (session or transaction pooling) as a PER-profile client: run in the
    foreground as the unprivileged database user from its own ini in a folder of the pair's run
    directory (so the run's teardown kills it even if this object is lost). Coordinated switchover:
    ``PAUSE`` (waits up to the drain window for server connections to be released; in session mode it
    never completes while clients are connected) -> the switchover -> ``[databases]`` rewritten to the
    new principal + ``RELOAD`` -> ``RESUME``. ``server_login_retry`` 0.5 s (FACTS: the default 15 s
    refuses logins long after a re-point); ``query_wait_timeout`` = the recovery window (PER-3's
    analogue: a client waiting that long for a server is disconnected)."""

    #: re-point + ``RELOAD`` + ``RESUME`` change no run state (harness.faults.coordination, early resume)
    resume_inside_switchover = True

    def __init__(self, pair: Any, history: Any = None, drain_window: float = 60.0,
                 recovery_window: float = 60.0, pool_mode: str = "transaction", pool_size: int = 40,
                 server_login_retry: float = 0.5, via_fault_proxy: bool = True) -> None:
        if pool_mode not in ("session", "transaction"):
            raise ConfigError(f"pgbouncer pool_mode must be 'session' or 'transaction', not {pool_mode!r}")
        self.name = f"pgbouncer-{pool_mode}"
        super().__init__(pair, history, drain_window, recovery_window, via_fault_proxy=via_fault_proxy)
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.server_login_retry = server_login_retry
        self._target: Address | None = None
        self._pause_conn: psycopg.Connection | None = None
        self._pause_thread: threading.Thread | None = None

    # ------------------------------------------------------------------------- lifecycle
    def _write_ini(self, target: Address) -> None:
        assert self.dir is not None and self.port is not None
        databases = (f"{pg.APP_DATABASE} = host={target[0]} port={target[1]} dbname={pg.APP_DATABASE}\n"
                     f"postgres = host={target[0]} port={target[1]} dbname=postgres")
        text = _INI.format(databases=databases, port=self.port, dir=self.dir, user=self.user,
                           pool_mode=self.pool_mode, pool_size=self.pool_size,
                           server_login_retry=self.server_login_retry,
                           query_wait_timeout=max(1, round(self.recovery_window)))
        tmp = self.dir / "pgbouncer.ini.tmp"
        tmp.write_text(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.dir / "pgbouncer.ini")
        self._target = target

    def start(self) -> Address:
        """Write the ini and auth file, start pgbouncer as the database user, wait until it accepts
        a login through it."""
        self.version = pgbouncer_version()
        run_as = database_user()
        self.dir = self._make_dir(f"{self.name}-", run_as)
        self.port = allocate_port()
        # the password reaches pgbouncer in a 0600 file only (never its command line: no secret in any output)
        run_as.chown(write_private_file(self.dir / "userlist.txt", f'"{self.user}" "{self.password}"\n'))
        try:
            retry_on_port_in_use(lambda: self._launch(run_as), self._move_port)
        except BaseException:
            self.stop()
            raise
        self._emit("client.start", address=f"127.0.0.1:{self.port}", version=self.version, pool_mode=self.pool_mode,
                   pid=self.pid)
        return self.address

    def _launch(self, run_as: Any) -> None:
        """Write the ini for the current port, start pgbouncer and wait until it serves that port."""
        assert self.dir is not None
        self._write_ini(self._principal_address())
        binary = shutil.which(PGBOUNCER_BIN) or PGBOUNCER_BIN
        self.pid = spawn_server([binary, str(self.dir / "pgbouncer.ini")], self.dir / "stdout.log", run_as,
                                self.dir)
        self._register_pid()
        self.address = ("127.0.0.1", self.port)
        self._wait_ready()

    def _move_port(self, exc: BaseException) -> None:
        """pgbouncer could not bind its port (another program took it): stop it, take another port,
        record ``client.port_retry`` (harness.ports); :meth:`_launch` then starts it again."""
        assert self.dir is not None and self.port is not None
        self._kill()
        old, self.port = self.port, allocate_port()
        release_port(old)
        (self.dir / "pgbouncer.log").unlink(missing_ok=True)
        self._emit("client.port_retry", old_port=old, new_port=self.port, reason=str(exc).strip().splitlines()[0])

    def _kill(self) -> None:
        if self.pid is not None:
            signal_group(self.pid, signal.SIGTERM)
            if not wait_gone(self.pid, 3):
                kill_group(self.pid, 3)
            self._register_pid(remove=True)
            self.pid = None

    def _log_tail(self) -> str:
        if self.dir is None:
            return ""
        lines: list[str] = []
        for name in ("pgbouncer.log", "stdout.log"):
            with contextlib.suppress(OSError):
                lines += (self.dir / name).read_text(errors="replace").splitlines()[-8:]
        return "\n".join(lines)

    def _wait_ready(self, timeout: float = 15) -> None:
        self._wait_login("pgbouncer", timeout, self._listening, poll=0.02, retry=0.05)

    def _listening(self) -> bool:
        """Whether pgbouncer's log says it listens on its TCP port (not bound yet: do not log in
        elsewhere); PortInUseError when it could not bind it (it would go on with its Unix socket only)."""
        log = self._log_tail()
        if f"cannot listen on 127.0.0.1:{self.port}" in log:
            raise PortInUseError(f"pgbouncer could not bind 127.0.0.1:{self.port} (Address already in use)",
                                 self.port)
        return f"listening on 127.0.0.1:{self.port}" in log

    def stop(self) -> None:
        """Stop pgbouncer (SIGTERM: immediate shutdown in 1.18; then SIGKILL of its process group),
        forget its PID in the run state and remove its folder."""
        self._abandon_pause()
        if self.pid is not None:
            self._emit("client.stop", pid=self.pid)
            self._kill()
        if self.port is not None:
            release_port(self.port)
            self.port = None
        self._remove_dir()
        self.address = None

    # ------------------------------------------------------------------------- admin console
    def admin(self) -> psycopg.Connection:
        """An autocommit connection to the admin console (database ``pgbouncer``, simple protocol)."""
        conn = psycopg.connect(self.dsn(dbname="pgbouncer"), autocommit=True, connect_timeout=5,
                               cursor_factory=psycopg.ClientCursor)
        return conn

    def admin_command(self, command: str) -> list[tuple[Any, ...]]:
        """Run one admin-console command (``SHOW POOLS``, ``RELOAD``...) and return its rows."""
        with self.admin() as conn:
            cur = conn.execute(command)
            return cur.fetchall() if cur.description is not None else []

    def client_count(self) -> int:
        """Client connections pgbouncer holds for the application database (``SHOW CLIENTS``)."""
        with self.admin() as conn:
            cur = conn.execute("SHOW CLIENTS")
            cols = [d.name for d in cur.description or []]
            rows = cur.fetchall()
        i = cols.index("database")
        return sum(1 for r in rows if r[i] == pg.APP_DATABASE)

    def _abandon_pause(self) -> None:
        conn, self._pause_conn = self._pause_conn, None
        if conn is not None:
            with contextlib.suppress(OSError, psycopg.Error):
                sock = socket.socket(fileno=socket.dup(conn.fileno()))
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with contextlib.suppress(psycopg.Error):
                conn.close()
        if self._pause_thread is not None:
            self._pause_thread.join(5)
            self._pause_thread = None

    def before_switchover(self) -> dict[str, Any]:
        """PER-4 analogue: ``PAUSE`` and wait up to the drain window for it to complete (pgbouncer
        answers once every server connection is released). If it does not complete in time the
        switchover goes ahead anyway (busy clients then lose their server connection)."""
        t0 = time.monotonic()
        conn = self.admin()
        self._pause_conn = conn
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def pause() -> None:
            try:
                conn.execute("PAUSE")
                outcome["paused"] = True
            except psycopg.Error as exc:
                outcome["error"] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            finally:
                done.set()

        self._pause_thread = threading.Thread(target=pause, name=f"{self.name}-pause", daemon=True)
        self._pause_thread.start()
        completed = done.wait(self.drain_window)
        result = {"paused": bool(outcome.get("paused")), "completed_in_window": completed,
                  "seconds": time.monotonic() - t0, "error": outcome.get("error")}
        self._emit("pgbouncer.pause", **result)
        return result

    def after_switchover(self, new_principal_address: Address) -> dict[str, Any]:
        """Re-point ``[databases]`` at the new principal, ``RELOAD``, ``RESUME``."""
        t0 = time.monotonic()
        target = self._switchover_target(new_principal_address)
        self._write_ini(target)
        errors: list[str] = []
        with self.admin() as conn:
            conn.execute("RELOAD")
            try:
                conn.execute("RESUME")
            except psycopg.Error as exc:  # e.g. "pooler is not paused/suspended" after a failed PAUSE
                errors.append(str(exc).strip().splitlines()[0])
        self._abandon_pause()
        result = {"target": f"{target[0]}:{target[1]}", "seconds": time.monotonic() - t0, "errors": errors}
        self._emit("pgbouncer.resume", **result)
        return result

    def describe(self) -> dict[str, Any]:
        """Adds pool mode, version and settings."""
        return {**super().describe(), "pool_mode": self.pool_mode, "version": self.version,
                "server_login_retry": self.server_login_retry,
                "query_wait_timeout": max(1, round(self.recovery_window))}


def pgbouncer_session(*, pair: Any, history: Any = None, drain_window: float = 60.0,
                      recovery_window: float = 60.0, **options: Any) -> PgBouncerClient:
    """PgBouncer 1.18, ``pool_mode=session`` (PER-1..PER-8 judged as for any client)."""
    return PgBouncerClient(pair, history, drain_window, recovery_window, pool_mode="session", **options)


def pgbouncer_transaction(*, pair: Any, history: Any = None, drain_window: float = 60.0,
                          recovery_window: float = 60.0, **options: Any) -> PgBouncerClient:
    """PgBouncer 1.18, ``pool_mode=transaction`` (PER-1..PER-8 judged as for any client)."""
    return PgBouncerClient(pair, history, drain_window, recovery_window, pool_mode="transaction", **options)

