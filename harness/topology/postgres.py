"""PostgreSQL engine for the local backend: binaries, the cached initdb template, per-node
configuration, start/stop/promote/rewind of one server, and admin queries over its Unix socket.

Traps handled here (see shared FACTS.md): sockets live outside the data directory (pg_rewind),
configuration lives outside the data directory (pg_rewind copies config files from the source),
``wal_retrieve_retry_interval=200ms`` (promotion stalls otherwise), CHECKPOINT after promotion
before pg_rewind, and a standby with ``hot_standby=off`` rejects logins (the inactive partner, MIR-7).
One job, over 600 lines: every per-server operation the Engine seam asks of PostgreSQL.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from harness.errors import MissingDependencyError, NodeStartError, PortInUseError, TopologyError
from harness.paths import templates_dir
from harness.redact import remember, write_private_file
from harness.topology.engine import Credentials, NodeConfig, module_functions
from harness.topology.process import (
    RunAs,
    database_user,
    kill_group,
    pid_alive,
    run_tool,
    signal_group,
    signal_pid,
    spawn_server,
    wait_gone,
)
from harness.topology.template_cache import build_folder, cached_template, copy_tree

APP_USER = "app"
APP_DATABASE = "app"
# The test login's password is random per machine (made with the template, see credentials_file):
# a fixed one could not be told apart from ordinary words when checking that no output holds it.
SUPERUSER = "postgres"

PG_HBA = """\
# failover-harness: admin over the Unix socket, replication over loopback, clients with SCRAM
local   all             all                                     trust
local   replication     all                                     trust
host    replication     all             127.0.0.1/32            trust
host    all             all             127.0.0.1/32            scram-sha-256
"""


def pg_bindir() -> Path:
    """Directory of the PostgreSQL 15 server binaries (env ``FAILOVER_HARNESS_PG_BINDIR``)."""
    candidates = [os.environ.get("FAILOVER_HARNESS_PG_BINDIR", ""), "/usr/lib/postgresql/15/bin"]
    for c in candidates:
        if c and (Path(c) / "postgres").exists():
            return Path(c)
    raise MissingDependencyError(
        "PostgreSQL 15 server binaries not found in /usr/lib/postgresql/15/bin; install them with "
        "'apt-get install -y postgresql' (or run 'failover-harness setup'), or set FAILOVER_HARNESS_PG_BINDIR")


def server_version() -> str:
    """The PostgreSQL server version string, e.g. ``15.18`` (asked once per binary directory)."""
    return _version_of(str(pg_bindir()))


@functools.cache
def _version_of(bindir: str) -> str:
    out = subprocess.run([str(Path(bindir) / "postgres"), "--version"], capture_output=True, text=True)
    parts = out.stdout.split()
    return parts[2] if out.returncode == 0 and len(parts) >= 3 else "unknown"


# ------------------------------------------------------------------------------------------------
# template
# ------------------------------------------------------------------------------------------------

TEMPLATE_LAYOUT_VERSION = "8"  # 8: the data directory's own settings keep DSM in it (mmap)
#: initdb options of every data directory the harness creates (after ``-D DIR``).
INITDB_ARGS = ("-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--wal-segsize=1")
#: Settings that must hold even when a tool starts the server on a data directory with no external
#: config (pg_rewind's single-user crash recovery records wal_log_hints in pg_control);
#: wal_keep_size: that crash recovery must not remove the WAL pg_rewind reads back to the last
#: common checkpoint (with 1 MB segments it otherwise can).
#: Appended to the data directory's own ``postgresql.conf``: what a server started without the node's
#: configuration file reads - ``pg_rewind``'s single-user crash recovery of a killed former principal
#: (which PANICs when that node's WAL is gone and so never removes its shared memory: with ``posix``
#: it left a segment in /dev/shm for good) and a compose container's first start.
DATADIR_SETTINGS = ("\n# failover-harness\nwal_log_hints = on\nwal_level = replica\nwal_keep_size = 64MB\n"
                    "dynamic_shared_memory_type = mmap\n")


def template_dir(run_as: RunAs) -> Path:
    """Return the cached data-directory template, creating it once per machine with ``initdb``.

    The template holds the roles and database the harness uses (``app`` with a random SCRAM password
    kept in :func:`credentials_file`, superuser ``postgres`` trusted on the Unix socket only, no
    password) and was shut down cleanly, so a plain copy of it is a valid base backup: a pair's
    mirror is a second copy started as a standby."""
    key = hashlib.sha256(f"{pg_bindir()}|{server_version()}|{TEMPLATE_LAYOUT_VERSION}|{run_as.name}"
                         .encode()).hexdigest()[:12]
    final = templates_dir() / f"pg{server_version()}-{key}"
    return cached_template(final, lambda t: (t / "PG_VERSION").exists(), _build_template, run_as)


def _build_template(final: Path, run_as: RunAs) -> None:
    work = build_folder(final, run_as)
    data = work / "data"
    res = run_tool([str(pg_bindir() / "initdb"), "-D", str(data), *INITDB_ARGS], run_as)
    if res.returncode != 0:
        raise TopologyError(f"initdb failed (exit {res.returncode}): {res.stderr.strip()[-800:]}")
    password = secrets.token_urlsafe(24)
    (data / "pg_hba.conf").write_text(PG_HBA)
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(DATADIR_SETTINGS)
    sock = work / "sock"
    sock.mkdir()
    run_as.chown(sock, data / "pg_hba.conf")
    port = _free_port()
    log = work / "template.log"
    pid = spawn_server([str(pg_bindir() / "postgres"), "-D", str(data), "-c", f"port={port}",
                        "-c", "listen_addresses=", "-c", f"unix_socket_directories={sock}",
                        "-c", "fsync=off", "-c", "dynamic_shared_memory_type=mmap"], log, run_as, work)
    try:
        wait_ready(data, pid, log, timeout=30)
        with psycopg.connect(host=str(sock), port=port, user=SUPERUSER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(APP_USER),
                                                                           sql.Literal(password)))
            conn.execute(f"CREATE DATABASE {APP_DATABASE} OWNER {APP_USER}")
    finally:
        signal_pid(pid, signal.SIGINT)  # fast shutdown: a clean checkpoint for the copies
        if not wait_gone(pid, 30, group=True):
            kill_group(pid)
    shutil.rmtree(sock, ignore_errors=True)
    (data / "postmaster.opts").unlink(missing_ok=True)
    _write_credentials(credentials_file(final), password, run_as)  # before the template counts as built
    data.rename(final)
    shutil.rmtree(work, ignore_errors=True)


def credentials_file(template: Path) -> Path:
    """The test login's password file beside a template: one libpq password-file line
    (``*:*:*:app:<password>``), mode 0600, owned by the database user. libpq and psql read it with
    ``passfile=<path>``; the harness passes the password to clients in memory only (no secret in any output: never
    on a command line, never in an output)."""
    return template.parent / f"{template.name}.pgpass"


def _write_credentials(path: Path, password: str, run_as: RunAs) -> None:
    run_as.chown(write_private_file(path, f"*:*:*:{APP_USER}:{_pgpass_escape(password)}\n"))


def _pgpass_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def read_credentials(template: Path) -> Credentials:
    """The test login of a template (user, password, database, password file), read from
    :func:`credentials_file`; the password is remembered for redaction (harness.redact)."""
    path = credentials_file(template)
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)  # libpq ignores a password file others can read
        line = path.read_text().splitlines()[0]
    except (OSError, IndexError):
        raise TopologyError(f"the test login's password file {path} of template {template} is missing or "
                            f"unreadable; remove the template ({template}) so that it is built again") from None
    fields, cur, escaped = [], "", False
    for ch in line:
        if escaped:
            cur, escaped = cur + ch, False
        elif ch == "\\":
            escaped = True
        elif ch == ":":
            fields.append(cur)
            cur = ""
        else:
            cur += ch
    fields.append(cur)
    if len(fields) != 5 or fields[3] != APP_USER or not fields[4]:
        raise TopologyError(f"{path} is not the harness's password file; remove the template ({template}) "
                            "so that it is built again")
    remember(fields[4])
    return Credentials(APP_USER, fields[4], APP_DATABASE, passfile=str(path))


def _free_port() -> int:
    from harness.ports import allocate_port, release_port

    port = allocate_port()
    release_port(port)
    return port


def copy_template(template: Path, *dests: Path, timeout: float = 60) -> None:
    """Copy the template data directory to each of ``dests`` (in parallel), keeping owner and
    modes, within ``timeout`` seconds (:func:`~harness.topology.template_cache.copy_tree`)."""
    copy_tree(template, dests, timeout, "the data-directory template")


# ------------------------------------------------------------------------------------------------
# one server
# ------------------------------------------------------------------------------------------------

@dataclass
class ServerConfig:
    """Settings of one node's ``postgresql.conf`` (kept outside the data directory)."""

    port: int
    socket_dir: Path
    standby_of: tuple[str, int] | None = None  # primary_conninfo host/port, None on a principal
    application_name: str = ""
    hot_standby: bool = True
    synchronous: bool = False
    partner: str = ""  # mirroring.partner: the principal's current mirror, client-facing host:port

    def render(self) -> str:
        """The configuration file text."""
        lines = [
            "# written by failover-harness; the data directory holds no configuration of its own",
            "listen_addresses = '127.0.0.1'",
            f"port = {self.port}",
            f"unix_socket_directories = '{self.socket_dir}'",
            "max_connections = 120",
            "shared_buffers = 32MB",
            "dynamic_shared_memory_type = mmap  # in the data directory: a killed server leaves no /dev/shm segment",
            "fsync = off                      # process kills, not power loss: the OS keeps the data",
            "synchronous_commit = on",
            "full_page_writes = on",
            "wal_level = replica",
            "wal_log_hints = on               # pg_rewind",
            "max_wal_senders = 10",
            "max_replication_slots = 10",
            "wal_keep_size = 64MB",
            "wal_retrieve_retry_interval = '200ms'",
            "wal_receiver_timeout = '5s'",
            "wal_sender_timeout = '5s'",
            "wal_receiver_status_interval = '1s'",
            "recovery_target_timeline = 'latest'",
            f"hot_standby = {'on' if self.hot_standby else 'off'}",
            f"synchronous_standby_names = '{'*' if self.synchronous else ''}'",
            "log_line_prefix = '%m [%p] '",
            "log_min_messages = warning",
            "log_connections = off",
            f"mirroring.partner = '{self.partner}'",
        ]
        if self.standby_of:
            host, port = self.standby_of
            lines.append(f"primary_conninfo = 'host={host} port={port} user={SUPERUSER} "
                         f"application_name={self.application_name} connect_timeout=2'")
        return "\n".join(lines) + "\n"


def _pidfile_lines(datadir: Path) -> list[str]:
    try:
        return (datadir / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        return []


def read_status(datadir: Path) -> str:
    """The postmaster's status line in ``postmaster.pid`` (``starting``/``ready``/``standby``/
    ``stopping``), or ``""`` when there is none."""
    lines = _pidfile_lines(datadir)
    return lines[7].strip() if len(lines) >= 8 else ""


def log_tail(log: Path, lines: int = 15) -> str:
    """The last lines of a server log, for error messages."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def wait_ready(datadir: Path, pid: int, log: Path, timeout: float = 30, standby: bool = False) -> None:
    """Wait until the postmaster reports ``ready`` (or ``standby``); NodeStartError with the log
    tail if it dies or does not get there in time - PortInUseError when it died because its TCP
    port was taken (the caller starts it on another port, harness.ports)."""
    deadline = time.monotonic() + timeout
    wanted = {"ready", "standby"}
    while True:
        if read_status(datadir) in wanted:
            return
        if not pid_alive(pid):
            tail = log_tail(log)
            if _bind_failed(tail):
                raise PortInUseError(f"PostgreSQL in {datadir} could not bind its port (Address already in use); "
                                     f"log:\n{tail}")
            raise NodeStartError(f"PostgreSQL in {datadir} exited during start-up; log:\n{tail}")
        if time.monotonic() >= deadline:
            raise NodeStartError(f"PostgreSQL in {datadir} not ready after {timeout:.0f} s; "
                                 f"log:\n{log_tail(log)}")
        time.sleep(0.003)


def _bind_failed(tail: str) -> bool:
    """The server's last FATAL says it could not listen: its port was taken ("could not bind IPv4
    address ... Address already in use", "could not create any TCP/IP sockets")."""
    fatal = [line for line in tail.splitlines() if "FATAL:" in line]
    return bool(fatal) and "could not create any TCP/IP sockets" in fatal[-1]


def clear_stale_locks(datadir: Path, socket_dir: Path | None = None) -> None:
    """Remove ``postmaster.pid`` and socket lock files left by a killed server whose PID is gone or
    a zombie (PostgreSQL takes a zombie for a live postmaster and refuses to start)."""
    candidates = [datadir / "postmaster.pid"]
    if socket_dir is not None:
        candidates += list(socket_dir.glob(".s.PGSQL.*.lock"))
    for lock in candidates:
        try:
            pid = int(lock.read_text().splitlines()[0])
        except (FileNotFoundError, IndexError, ValueError):
            continue
        if not pid_alive(pid):
            lock.unlink(missing_ok=True)
            if lock.name.endswith(".lock"):
                Path(str(lock)[: -len(".lock")]).unlink(missing_ok=True)


def start_server(datadir: Path, conf: Path, log: Path, run_as: RunAs, cwd: Path) -> int:
    """Start ``postgres`` on ``datadir`` with the external config file ``conf``; returns its PID
    (also its process-group ID). Does not wait."""
    clear_stale_locks(datadir, conf.parent)
    return spawn_server([str(pg_bindir() / "postgres"), "-D", str(datadir), "-c", f"config_file={conf}"],
                        log, run_as, cwd)


def stop_server(pid: int, mode: str, timeout: float = 60) -> None:
    """Stop a postmaster: ``smart`` (SIGTERM), ``fast`` (SIGINT) or ``immediate`` (SIGQUIT); waits
    until every process of the server is gone, killing it if it overstays ``timeout``."""
    sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
    signal_group(pid, signal.SIGCONT)  # a paused server cannot shut down
    signal_pid(pid, sig)
    if not wait_gone(pid, timeout, group=True):
        kill_group(pid)
        raise TopologyError(f"PostgreSQL (pid {pid}) did not stop ({mode}) within {timeout:.0f} s; killed it")


def admin_connect(socket_dir: Path, port: int, timeout: float = 5, dbname: str = "postgres") -> psycopg.Connection:
    """An autocommit superuser connection over the node's Unix socket (harness use only)."""
    return psycopg.connect(host=str(socket_dir), port=port, user=SUPERUSER, dbname=dbname,
                           autocommit=True, connect_timeout=max(2, int(timeout)))


def wait_writable(socket_dir: Path, port: int, pid: int, log: Path, timeout: float = 30,
                  datadir: Path | None = None, conn: psycopg.Connection | None = None,
                  hot_standby: bool | None = None) -> None:
    """Wait until the server accepts logins and is out of recovery (a principal). With ``datadir``
    whose ``postmaster.pid`` names ``pid`` and whose first status line seen is *not* ``ready`` (a
    standby that accepts no logins, ``hot_standby=off``: ``standby``; a starting server): until it says
    ``ready``, which the postmaster writes once the startup process has exited, recovery (or a
    promotion) over - a file read per poll instead of a login (the PER-1 stall: under load a login took
    30-70 ms, most of the promote wait). A *hot* standby's status is ``ready`` already while it is in
    recovery, so then, and without such a file (e.g. a container's), the wait is for a login that
    answers ``pg_is_in_recovery() = false`` - asked on ``conn`` when given (an admin session opened on
    the hot standby before the promotion, which stays open across it: no login per poll; a failed
    query drops it for logins). ``hot_standby=False`` (the caller knows the server was started with
    ``hot_standby=off``) trusts the file even when its first status seen is ``ready`` (a promotion
    that ended before the first poll), where a login would otherwise check it."""
    deadline = time.monotonic() + timeout
    last = ""
    # the file is watched only if its first status seen for ``pid`` is not "ready" (a hot standby
    # reports "ready" while still in recovery), or always when the server is known not to be one
    watch_file: bool | None = None if datadir is not None else False
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            raise NodeStartError(f"PostgreSQL (pid {pid}) died while becoming principal; log:\n{log_tail(log)}")
        lines = _pidfile_lines(datadir) if watch_file is not False and datadir is not None else []
        if lines and lines[0].strip() == str(pid) and watch_file is None:
            watch_file = hot_standby is False or not (len(lines) >= 8 and lines[7].strip() == "ready")
        if watch_file and lines and lines[0].strip() == str(pid):
            status = lines[7].strip() if len(lines) >= 8 else ""
            if status == "ready":
                return
            last = f"postmaster status {status or 'starting'!r}"
            time.sleep(0.002)
            continue
        if watch_file and len(lines) < 8:  # read while the postmaster rewrote it: read again, no login
            time.sleep(0.002)
            continue
        if conn is not None:
            try:
                if not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                    return
                last = "still in recovery"
                time.sleep(0.002)
                continue
            except psycopg.Error:
                conn = None
        try:
            with admin_connect(socket_dir, port) as c:
                if not c.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                    return
                last = "still in recovery"
        except psycopg.OperationalError as exc:
            last = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        time.sleep(0.003)
    raise TopologyError(f"PostgreSQL on port {port} did not become writable within {timeout:.0f} s "
                        f"({last}); log:\n{log_tail(log)}")


def wait_streaming(socket_dir: Path, port: int, standby: str, standby_alive: Callable[[], bool],
                   timeout: float = 30, conn: psycopg.Connection | None = None) -> str | None:
    """Wait until ``standby`` streams from the principal on its own timeline, caught up with the
    principal's WAL position when asked: right after a timeline switch a standby first streams the
    old timeline to its end, then reconnects; only WAL written on the new timeline (past the switch
    point) proves it follows the new principal. None when it does, else the last state seen. Asked
    on ``conn`` (an open admin session to the principal, left open) when given - a new login when
    that session fails (its server closed it) - else on a new login."""
    deadline = time.monotonic() + timeout
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            return _streaming_on(conn, standby, standby_alive, deadline)
    with admin_connect(socket_dir, port) as fresh:
        return _streaming_on(fresh, standby, standby_alive, deadline)


def _streaming_on(conn: psycopg.Connection, standby: str, standby_alive: Callable[[], bool],
                  deadline: float) -> str | None:
    state = None
    target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    while time.monotonic() < deadline:
        row = conn.execute("SELECT state, coalesce(flush_lsn >= %s::pg_lsn, false) FROM pg_stat_replication "
                           "WHERE application_name = %s", (target, standby)).fetchone()
        state = row[0] if row else None
        if state == "streaming" and row[1]:
            return None
        if not standby_alive():
            break
        time.sleep(0.003)
    return repr(state)


def wait_signal_ready(datadir: Path, pid: int, timeout: float = 10) -> None:
    """A postmaster that has not yet set up its signal handlers dies of SIGHUP (seen when a node
    had to move ports while another was still starting): it writes ``postmaster.pid`` only after
    that set-up, so wait until the file names it (bounded; a dead or slow server is left to the
    caller's own checks)."""
    pidfile = datadir / "postmaster.pid"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        try:
            if pidfile.read_text().split("\n", 1)[0].strip() == str(pid):
                return
        except (FileNotFoundError, PermissionError):
            pass
        time.sleep(0.005)


def promote(datadir: Path, pid: int, run_as: RunAs) -> None:
    """Ask a standby to promote itself (what ``pg_ctl promote`` does: signal file + SIGUSR1)."""
    signal_file = datadir / "promote"
    staged = datadir / "promote.failover-harness"  # owned by the server's user before it can be seen:
    staged.write_text("")                           # the server may consume the file at once (a
    run_as.chown(staged)                            # chown after that would find it gone)
    os.replace(staged, signal_file)
    signal_pid(pid, signal.SIGUSR1)


def make_standby(datadir: Path, run_as: RunAs) -> None:
    """Mark a stopped data directory as a standby and drop configuration left by tools."""
    auto = datadir / "postgresql.auto.conf"
    auto.write_text("# failover-harness keeps configuration outside the data directory\n")
    sig = datadir / "standby.signal"
    sig.write_text("")
    run_as.chown(auto, sig)
    for leftover in ("promote", "recovery.signal"):
        (datadir / leftover).unlink(missing_ok=True)


def make_primary(datadir: Path) -> None:
    """Remove standby markers from a stopped data directory."""
    for leftover in ("standby.signal", "recovery.signal", "promote"):
        (datadir / leftover).unlink(missing_ok=True)


def reclone(datadir: Path, source_socket: Path, source_port: int, run_as: RunAs) -> None:
    """Replace a stopped node's data directory with a fresh ``pg_basebackup`` of the principal (the
    fallback when ``pg_rewind`` cannot rewind it)."""
    clear_stale_locks(datadir)
    shutil.rmtree(datadir, ignore_errors=True)
    res = run_tool([str(pg_bindir() / "pg_basebackup"), "-D", str(datadir), "-h", str(source_socket),
                    "-p", str(source_port), "-U", SUPERUSER, "-X", "stream", "-c", "fast", "--no-sync"],
                   run_as, timeout=300)
    if res.returncode != 0:
        raise TopologyError(f"pg_basebackup into {datadir} failed (exit {res.returncode}): "
                            f"{(res.stderr or res.stdout).strip()[-1200:]}")


def rewind(datadir: Path, source_socket: Path, source_port: int, run_as: RunAs) -> str:
    """``pg_rewind`` a stopped former principal onto the current principal; returns its output."""
    clear_stale_locks(datadir)
    res = run_tool([str(pg_bindir() / "pg_rewind"), "-D", str(datadir), "--no-sync",
                    f"--source-server=host={source_socket} port={source_port} user={SUPERUSER} dbname=postgres"],
                   run_as, timeout=120)
    if res.returncode != 0:
        raise TopologyError(f"pg_rewind of {datadir} failed (exit {res.returncode}): "
                            f"{(res.stderr or res.stdout).strip()[-1200:]}")
    return res.stdout + res.stderr


@module_functions()
class PostgresEngine:
    """PostgreSQL 15 as an :class:`~harness.topology.engine.Engine` (the functions of this module)."""

    name = "postgres"
    label = "PostgreSQL"
    topology_prefix = "pg"
    #: ``checkpoint``, ``wait_replica`` and ``wait_writable`` take an open admin session (``conn``) to
    #: reuse: a switchover's checks need no login while its clients wait (harness.topology.switchover_sessions).
    reuses_admin_connections = True
    _read: dict[tuple[str, int], Credentials] = {}  # (password file, its mtime) -> what it holds

    @property
    def credentials(self) -> Credentials:
        """The test login every node accepts: user ``app``, database ``app`` and this machine's random
        password (built with the template on first use; see :func:`credentials_file`)."""
        template = template_dir(database_user())
        try:
            key = (str(template), credentials_file(template).stat().st_mtime_ns)
        except OSError:
            return read_credentials(template)  # names the missing file
        if key not in self._read:
            self._read[key] = read_credentials(template)
        return self._read[key]

    @staticmethod
    def wait_ready(datadir: Path, pid: int, log: Path, timeout: float = 30) -> None:
        """Wait until the server accepts connections (as :func:`wait_ready`)."""
        wait_ready(datadir, pid, log, timeout=timeout)

    @staticmethod
    def wait_writable(socket_dir: Path, port: int, pid: int, log: Path, timeout: float = 30,
                      datadir: Path | None = None, conn: Any = None, hot_standby: bool | None = None) -> None:
        """Wait until the server accepts writes (as :func:`wait_writable`)."""
        wait_writable(socket_dir, port, pid, log, timeout=timeout, datadir=datadir, conn=conn,
                      hot_standby=hot_standby)

    def bootstrap_files(self) -> dict[str, str]:
        """What a node's container entrypoint (``compose/fh-node.sh``) reads from the node's folder to
        create, clone or rewind its data directory the way this module does locally: initdb options,
        pg_hba.conf, the data directory's own settings, the roles/database SQL and the superuser's
        password file (pg_rewind connects through the fault proxy over TCP, where pg_hba asks for
        SCRAM). Both logins get this machine's random test password (:attr:`credentials`, remembered
        for redaction); the caller writes every file private (mode 0600, no secret readable by others)."""
        password = self.credentials.password
        literal = "'" + password.replace("'", "''") + "'"
        bootstrap = (f"CREATE ROLE {APP_USER} LOGIN PASSWORD {literal}\n"
                     f"ALTER ROLE {SUPERUSER} PASSWORD {literal}\n"
                     f"CREATE DATABASE {APP_DATABASE} OWNER {APP_USER}\n")
        return {"initdb.args": " ".join(INITDB_ARGS) + "\n", "pg_hba.conf": PG_HBA,
                "datadir.conf": DATADIR_SETTINGS, "bootstrap.sql": bootstrap,
                "pgpass": f"127.0.0.1:*:*:{SUPERUSER}:{_pgpass_escape(password)}\n"}

    @staticmethod
    def config_text(config: NodeConfig) -> str:
        """``postgresql.conf`` for one node (:class:`ServerConfig`)."""
        return ServerConfig(port=config.port, socket_dir=config.socket_dir, standby_of=config.standby_of,
                            application_name=config.application_name, hot_standby=config.hot_standby,
                            synchronous=config.synchronous or config.synchronous_on_promotion,
                            partner=config.partner).render()

    @staticmethod
    def wait_replica(principal_socket: Path, principal_port: int, standby: str, standby_socket: Path,
                     standby_port: int, standby_alive: Callable[[], bool], timeout: float = 30,
                     conn: Any = None) -> str | None:
        """Wait until ``standby`` streams from the principal and has flushed the principal's current
        WAL position (as :func:`wait_streaming`; ``conn``: an open admin session to the principal)."""
        return wait_streaming(principal_socket, principal_port, standby, standby_alive, timeout, conn=conn)

    @staticmethod
    def reload(datadir: Path, conf: Path, pid: int | None) -> None:
        """SIGHUP the postmaster (once it can take signals, :func:`wait_signal_ready`)."""
        if pid:
            wait_signal_ready(datadir, pid)
            signal_pid(pid, signal.SIGHUP)

    @staticmethod
    def checkpoint(socket_dir: Path, port: int, conn: Any = None) -> None:
        """CHECKPOINT: pg_rewind reads the new timeline from the control file (on ``conn``, an open
        admin session left open, when given)."""
        if conn is not None:
            with contextlib.suppress(psycopg.Error):  # a held session its server closed: log in
                conn.execute("CHECKPOINT")
                return
        with admin_connect(socket_dir, port) as c:
            c.execute("CHECKPOINT")

    @staticmethod
    def published_partner(socket_dir: Path, port: int) -> str | None:
        """``SHOW mirroring.partner`` (MIR-9)."""
        with admin_connect(socket_dir, port) as conn:
            return conn.execute("SHOW mirroring.partner").fetchone()[0]
