"""MariaDB 10.11 engine for the local backend (docs/mariadb.md): ``mariadbd`` processes the harness starts
itself on 127.0.0.1 with their own data directories (never the packaged service), GTID replication
(``gtid_strict_mode``, ``log_slave_updates``), semi-synchronous replication as the ``mode="sync"``
analogue (DUR-1), and the role operations of :class:`~harness.topology.local.LocalTopology` through
the :class:`~harness.topology.engine.Engine` seam.

How the PostgreSQL choreography maps (see shared FACTS.md, MariaDB):

* configuration file -> a ``my.cnf`` (``--defaults-file``) plus one ``# failover-harness-role:``
  JSON line saying whom the node follows; :meth:`MariaDBEngine.reload` applies it over SQL
  (``CHANGE MASTER TO ... MASTER_USE_GTID=current_pos``, ``read_only``, semi-sync) - the SIGHUP
  analogue;
* promote -> ``STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only=0``;
* a fast stop makes the node read-only and waits (bounded) until every binlog dump thread has sent
  everything, so a planned switchover loses nothing even in async mode, then records the node's final
  GTID position;
* "streaming" -> the standby's IO and SQL threads run from the principal (its server id) and
  ``MASTER_GTID_WAIT`` reaches the principal's ``gtid_binlog_pos``;
* rewind -> a GTID comparison: a node whose history is a prefix of the source's rejoins as it is;
  a diverged one raises TopologyError and the backend re-clones it (``mariadb-backup``).

The test login ``app`` has privileges on its own database only: no ``SUPER``, no ``READ_ONLY ADMIN``
(``read_only`` does not stop admins). Its password is random per machine and never printed.
One job, over 600 lines: every per-server operation the Engine seam asks of MariaDB."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import MissingDependencyError, NodeStartError, PortInUseError, TopologyError
from harness.paths import templates_dir
from harness.redact import remember, write_private_file
from harness.topology.engine import Credentials, NodeConfig, module_functions
from harness.topology.process import RunAs, database_user, kill_group, pid_alive, run_tool, spawn_server, wait_gone
from harness.topology.template_cache import build_folder, cached_template, copy_tree

APP_USER = "app"
APP_DATABASE = "app"
REPL_USER = "repl"
TEMPLATE_LAYOUT_VERSION = "3"
ROLE_MARK = "# failover-harness-role: "
SEMI_SYNC_TIMEOUT_MS = 30_000  # a sync commit waits this long for a replica, then MariaDB goes async
GTID_FILE = "fh-gtid-pos"  # a cleanly stopped node's last GTIDs (last_gtids)
START_FILE = "fh-gtid-start"  # a re-cloned node's starting gtid_slave_pos

_INSTALL_HINT = "install it with 'apt-get install -y mariadb-server mariadb-backup' (or run 'failover-harness setup')"


def _pymysql() -> Any:
    try:
        import pymysql
    except ImportError:  # pragma: no cover - a dependency of the project
        raise MissingDependencyError("the Python package PyMySQL is missing; pip install pymysql") from None
    return pymysql


def mariadbd() -> Path:
    """The MariaDB server binary (env ``FAILOVER_HARNESS_MARIADBD``)."""
    for c in (os.environ.get("FAILOVER_HARNESS_MARIADBD", ""), "/usr/sbin/mariadbd"):
        if c and Path(c).exists():
            return Path(c)
    raise MissingDependencyError(f"the MariaDB server (/usr/sbin/mariadbd) is not installed; {_INSTALL_HINT}")


def _tool(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if not path:
        raise MissingDependencyError(f"the MariaDB tool {name} is not installed; {_INSTALL_HINT}")
    return path


def server_version() -> str:
    """The server version, e.g. ``10.11.19`` (asked once per binary)."""
    return _version_of(str(mariadbd()))


@functools.cache
def _version_of(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True)
    m = re.search(r"Ver (\d+\.\d+\.\d+)", out.stdout)
    return m.group(1) if m else "unknown"


def server_id(name: str) -> int:
    """A node's ``server_id`` from its name (``n3`` -> 3; any other name: a stable hash)."""
    m = re.fullmatch(r"n(\d+)", name)
    return int(m.group(1)) if m else int(hashlib.sha256(name.encode()).hexdigest()[:6], 16) + 1000


# ------------------------------------------------------------------------------------------------
# GTID positions
# ------------------------------------------------------------------------------------------------

def parse_gtid_pos(text: str) -> dict[int, tuple[int, int]]:
    """``"0-1-104,1-2-7"`` -> ``{0: (1, 104), 1: (2, 7)}`` (domain -> (server id, sequence))."""
    pos: dict[int, tuple[int, int]] = {}
    for part in (text or "").replace("\n", "").split(","):
        part = part.strip()
        if part:
            d, s, n = (int(x) for x in part.split("-"))
            pos[d] = (s, n)
    return pos


def parse_gtid_state(text: str) -> dict[tuple[int, int], int]:
    """``@@gtid_binlog_state`` (and slave positions) -> ``{(domain, server id): last sequence}``."""
    state: dict[tuple[int, int], int] = {}
    for part in (text or "").replace("\n", "").split(","):
        part = part.strip()
        if part:
            d, s, n = (int(x) for x in part.split("-"))
            state[(d, s)] = max(n, state.get((d, s), -1))
    return state


def last_gtids(state_text: str) -> str:
    """A node's last transaction of every domain, ``"D-S-N,..."``, from its binlog state plus slave
    position (:func:`_history_of`'s text): with ``gtid_strict_mode`` sequence numbers grow along the
    whole history, so the highest one is the last. Unlike ``@@gtid_current_pos`` this does not depend
    on the asking server's own ``server_id`` (a probe started without the node's configuration would
    otherwise report a former principal's slave position and hide its own unreplicated commits)."""
    last: dict[int, tuple[int, int]] = {}
    for (domain, srv), seq in parse_gtid_state(state_text).items():
        if seq > last.get(domain, (0, -1))[1]:
            last[domain] = (srv, seq)
    return ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(last.items()))


def is_contained(node: str, source_state: str) -> bool:
    """True when the source's history holds the node's last transaction of every domain: with
    ``gtid_strict_mode`` a (server id, sequence) pair is written once in the whole cluster and each
    server's sequence numbers only grow, so the node's ``D-S-N`` is in the source's history when the
    source's binlog state (plus its slave position) has server ``S`` in domain ``D`` at ``N`` or later.
    A diverged node (a killed principal's unreplicated commit) is not contained."""
    state = parse_gtid_state(source_state)
    for domain, (srv, seq) in parse_gtid_pos(node).items():
        if state.get((domain, srv), -1) < seq:
            return False
    return True


# ------------------------------------------------------------------------------------------------
# template and credentials
# ------------------------------------------------------------------------------------------------

def template_dir(run_as: RunAs) -> Path:
    """The cached data-directory template (``mariadb-install-db`` once per machine), holding the
    test login ``app`` (database ``app`` only), the replication login ``repl`` and ``root`` on the
    Unix socket only; its passwords are in :func:`credentials_file`."""
    key = hashlib.sha256(f"{mariadbd()}|{server_version()}|{TEMPLATE_LAYOUT_VERSION}|{run_as.name}"
                         .encode()).hexdigest()[:12]
    final = templates_dir() / f"mariadb{server_version()}-{key}"
    return cached_template(final, lambda t: (t / "mysql").is_dir() and credentials_file(t).exists(),
                           _build_template, run_as)


def _build_template(final: Path, run_as: RunAs) -> None:
    work = build_folder(final, run_as)
    data = work / "data"
    res = run_tool([_tool("mariadb-install-db"), "--no-defaults", f"--datadir={data}",
                    "--auth-root-authentication-method=normal", "--skip-test-db"], run_as, cwd=work)
    if res.returncode != 0:
        raise TopologyError(f"mariadb-install-db failed (exit {res.returncode}): {res.stderr.strip()[-800:]}")
    sock = work / "mysqld.sock"
    log = work / "template.log"
    pid = spawn_server([str(mariadbd()), "--no-defaults", f"--datadir={data}", "--skip-networking",
                        f"--socket={sock}", "--skip-log-bin", f"--pid-file={work / 'mysqld.pid'}"], log, run_as, work)
    app_pw, repl_pw = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    try:
        _wait_socket(sock, pid, log, 60)
        with _connect(sock) as conn, conn.cursor() as cur:
            cur.execute("SELECT host FROM mysql.user WHERE user='root' AND host NOT IN ('localhost')")
            for (host,) in cur.fetchall():
                cur.execute("DROP USER 'root'@%s", (host,))
            cur.execute(f"CREATE DATABASE {APP_DATABASE}")
            for host in ("127.0.0.1", "localhost"):
                cur.execute(f"CREATE USER '{APP_USER}'@'{host}' IDENTIFIED BY %s", (app_pw,))
                cur.execute(f"GRANT ALL PRIVILEGES ON {APP_DATABASE}.* TO '{APP_USER}'@'{host}'")
                # sysbench and the reference proxy read replication state, nothing more
                cur.execute(f"GRANT PROCESS, REPLICATION CLIENT ON *.* TO '{APP_USER}'@'{host}'")
            cur.execute(f"CREATE USER '{REPL_USER}'@'127.0.0.1' IDENTIFIED BY %s", (repl_pw,))
            cur.execute(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{REPL_USER}'@'127.0.0.1'")
            cur.execute("FLUSH PRIVILEGES")
            cur.execute("SHUTDOWN")
    finally:
        if not wait_gone(pid, 60, group=True):
            kill_group(pid)
    for leftover in ("mysqld.pid", "mysqld.sock"):
        (work / leftover).unlink(missing_ok=True)
    run_as.chown(write_private_file(credentials_file(final),
                                    f"[client]\nuser={APP_USER}\npassword={app_pw}\n# repl={repl_pw}\n"))
    if final.exists():
        shutil.rmtree(final)
    data.rename(final)
    shutil.rmtree(work, ignore_errors=True)


def credentials_file(template: Path) -> Path:
    """The test login's option file beside a template (``[client] user= password=``, mode 0600):
    ``mariadb --defaults-extra-file=PATH`` reads it; the harness passes the password in memory only."""
    return template.parent / f"{template.name}.cnf"


@functools.cache
def _read_credentials(path: str, mtime: int) -> tuple[str, str]:
    text = Path(path).read_text()
    app = re.search(r"^password=(.+)$", text, re.M)
    repl = re.search(r"^# repl=(.+)$", text, re.M)
    if not app or not repl:
        raise TopologyError(f"{path} is not the harness's credentials file; remove it and its template "
                            "so that they are built again")
    remember(app.group(1))
    remember(repl.group(1))
    return app.group(1), repl.group(1)


def _passwords() -> tuple[str, str]:
    path = credentials_file(template_dir(database_user()))
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return _read_credentials(str(path), path.stat().st_mtime_ns)


def copy_template(template: Path, *dests: Path, timeout: float = 60) -> None:
    """Copy the template data directory to each of ``dests`` (``cp -a``, in parallel) within
    ``timeout`` seconds (:func:`~harness.topology.template_cache.copy_tree`)."""
    copy_tree(template, dests, timeout, "the MariaDB template")


# ------------------------------------------------------------------------------------------------
# connections
# ------------------------------------------------------------------------------------------------

def _connect(sock: Path, timeout: float = 5) -> Any:
    pymysql = _pymysql()
    return pymysql.connect(unix_socket=str(sock), user="root", autocommit=True,
                           connect_timeout=max(1, int(timeout)), read_timeout=60, write_timeout=60,
                           ssl_disabled=True)


def _sock_of(socket_dir: Path) -> Path:
    return socket_dir / "mysqld.sock"


class _Admin:
    """An autocommit root connection over the Unix socket with a psycopg-like ``execute`` (harness use)."""

    def __init__(self, sock: Path, timeout: float = 5) -> None:
        self._conn = _connect(sock, timeout)

    def execute(self, query: str, args: Any = None) -> Any:
        """Run one statement; returns a cursor (``fetchone`` / ``fetchall``)."""
        cur = self._conn.cursor()
        cur.execute(query, args)
        return cur

    def row(self, query: str) -> dict[str, Any] | None:
        """The first row of ``query`` as a dict (``SHOW SLAVE STATUS``)."""
        cur = self._conn.cursor()
        cur.execute(query)
        r = cur.fetchone()
        return dict(zip([d[0] for d in cur.description], r, strict=True)) if r else None

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(Exception):
            self._conn.close()

    def __enter__(self) -> _Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def admin_connect(socket_dir: Path, port: int, timeout: float = 5) -> _Admin:
    """A root autocommit connection over the node's Unix socket (harness use; bypasses every proxy)."""
    return _Admin(_sock_of(socket_dir), timeout)


def _wait_socket(sock: Path, pid: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            tail = log_tail(log)
            if "Address already in use" in tail or "Do you already have another server running" in tail:
                raise PortInUseError(f"MariaDB could not bind its port (Address already in use); log:\n{tail}")
            raise NodeStartError(f"MariaDB (pid {pid}) exited during start-up; log:\n{tail}")
        if sock.exists():
            try:
                _connect(sock, 2).close()
                return
            except Exception as exc:  # noqa: BLE001 - not up yet
                last = str(exc)
        time.sleep(0.01)
    raise NodeStartError(f"MariaDB (pid {pid}) not accepting connections after {timeout:.0f} s ({last}); "
                         f"log:\n{log_tail(log)}")


# ------------------------------------------------------------------------------------------------
# one server
# ------------------------------------------------------------------------------------------------

def config_text(config: NodeConfig) -> str:
    """The node's ``my.cnf``: loopback only, binary log with GTIDs in strict mode, semi-sync plugin
    settings, and the role line :func:`reload` applies."""
    sid = server_id(config.application_name)
    sync = "ON" if config.synchronous else "OFF"
    role = {"standby_of": list(config.standby_of) if config.standby_of else None,
            "synchronous": config.synchronous, "name": config.application_name}
    lines = [
        "# written by failover-harness; the data directory holds no configuration of its own",
        ROLE_MARK + json.dumps(role),
        "[mysqld]",
        "bind-address = 127.0.0.1",
        f"port = {config.port}",
        f"socket = {_sock_of(config.socket_dir)}",
        f"pid-file = {config.socket_dir / 'mysqld.pid'}",
        f"server-id = {sid}",
        "skip-name-resolve",
        "log-basename = node",
        "log-bin = node-bin",
        "relay-log = node-relay-bin",
        "log-slave-updates = ON",
        "binlog-format = ROW",
        "gtid-strict-mode = ON",
        "skip-slave-start",
        "sync-binlog = 0                   # process kills, not power loss: the OS keeps the data",
        "innodb-flush-log-at-trx-commit = 2",
        "innodb-buffer-pool-size = 32M",
        "innodb-log-file-size = 48M",
        "performance-schema = OFF",
        "max-connections = 200",
        f"read-only = {'OFF' if config.standby_of is None else 'ON'}",
        "rpl-semi-sync-slave-enabled = ON",
        f"rpl-semi-sync-master-enabled = {sync}",
        "rpl-semi-sync-master-wait-point = AFTER_SYNC",
        f"rpl-semi-sync-master-timeout = {SEMI_SYNC_TIMEOUT_MS}",
        "slave-net-timeout = 5",
        "session-track-system-variables = *",
        "session-track-state-change = ON",
        "session-track-schema = ON",
        "session-track-transaction-info = CHARACTERISTICS",
        "character-set-server = utf8mb4",
        "collation-server = utf8mb4_general_ci",
        "log-warnings = 1",
    ]
    return "\n".join(lines) + "\n"


def _role_of(conf: Path) -> dict[str, Any]:
    for line in conf.read_text().splitlines():
        if line.startswith(ROLE_MARK):
            return json.loads(line[len(ROLE_MARK):])
    raise TopologyError(f"{conf} has no '{ROLE_MARK.strip()}' line: not written by this harness")


def _conf_of(pid: int) -> Path:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        raise TopologyError(f"MariaDB (pid {pid}) is gone") from None
    for a in argv:
        if a.startswith(b"--defaults-file="):
            return Path(a.split(b"=", 1)[1].decode())
    raise TopologyError(f"process {pid} is not a mariadbd started by this harness")


def log_tail(log: Path, lines: int = 15) -> str:
    """The last lines of a server log, for error messages."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def start_server(datadir: Path, conf: Path, log: Path, run_as: RunAs, cwd: Path) -> int:
    """Start ``mariadbd`` on ``datadir`` with ``conf``; returns its PID (also its process group)."""
    (conf.parent / "mysqld.pid").unlink(missing_ok=True)
    sock = conf.parent / "mysqld.sock"
    sock.unlink(missing_ok=True)
    return spawn_server([str(mariadbd()), f"--defaults-file={conf}", f"--datadir={datadir}"], log, run_as, cwd)


def wait_ready(datadir: Path, pid: int, log: Path, timeout: float = 30) -> None:
    """Wait until the server accepts connections, then apply its role (whom it follows)."""
    conf = _conf_of(pid)
    _wait_socket(conf.parent / "mysqld.sock", pid, log, timeout)
    _apply_role(conf, datadir)


def _apply_role(conf: Path, datadir: Path | None = None) -> None:
    role = _role_of(conf)
    with _Admin(conf.parent / "mysqld.sock") as conn:
        if role["standby_of"] is None:
            conn.execute("SET GLOBAL read_only = 0")
        else:
            conn.execute("SET GLOBAL read_only = 1")
        conn.execute(f"SET GLOBAL rpl_semi_sync_master_enabled = {1 if role['synchronous'] else 0}")
        if role["standby_of"] is None:
            return
        host, port = role["standby_of"]
        status = conn.row("SHOW SLAVE STATUS")
        if (status and status.get("Master_Host") == host and int(status.get("Master_Port") or 0) == int(port)
                and status.get("Slave_IO_Running") in ("Yes", "Connecting")
                and status.get("Slave_SQL_Running") == "Yes"):
            return
        conn.execute("STOP SLAVE")
        datadir = datadir or Path(conn.execute("SELECT @@datadir").fetchone()[0])
        start = datadir / START_FILE
        if start.exists():  # a re-cloned copy starts where its backup was taken
            conn.execute("RESET MASTER")
            conn.execute("SET GLOBAL gtid_slave_pos = %s", (start.read_text().strip(),))
            start.unlink()
        _, repl_pw = _passwords()
        conn.execute("CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
                     "MASTER_USE_GTID=current_pos, MASTER_CONNECT_RETRY=1",
                     (host, int(port), REPL_USER, repl_pw))
        conn.execute("START SLAVE")


def reload(datadir: Path, conf: Path, pid: int | None) -> None:
    """Apply a changed configuration to a running server (the SIGHUP analogue): role, source,
    semi-sync."""
    if pid and pid_alive(pid):
        _apply_role(conf, datadir)


def wait_writable(socket_dir: Path, port: int, pid: int, log: Path, timeout: float = 30,
                  datadir: Path | None = None) -> None:
    """Wait until the server is a writable principal (``read_only=0``, no replication running);
    ``datadir`` is not needed here."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            raise NodeStartError(f"MariaDB (pid {pid}) died while becoming principal; log:\n{log_tail(log)}")
        try:
            with admin_connect(socket_dir, port) as conn:
                if conn.execute("SELECT @@global.read_only").fetchone()[0] == 0:
                    return
                last = "read_only is still on"
        except Exception as exc:  # noqa: BLE001 - not up yet
            last = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        time.sleep(0.01)
    raise TopologyError(f"MariaDB on port {port} did not become writable within {timeout:.0f} s ({last}); "
                        f"log:\n{log_tail(log)}")


def promote(datadir: Path, pid: int, run_as: RunAs) -> None:
    """Make a running replica the principal: ``STOP SLAVE; RESET SLAVE ALL; read_only=0``."""
    with _Admin(_conf_of(pid).parent / "mysqld.sock") as conn:
        conn.execute("STOP SLAVE")
        conn.execute("RESET SLAVE ALL")
        conn.execute("SET GLOBAL read_only = 0")


def _write_as(path: Path, text: str, run_as: RunAs) -> None:
    path.write_text(text)
    run_as.chown(path)


def stop_server(pid: int, mode: str, timeout: float = 60) -> None:
    """Stop a server. ``fast`` and ``smart``: read-only first, wait (≤ 2 s) until every binlog dump
    thread has sent all it has, record the final GTID position, shut down cleanly (SIGTERM);
    ``immediate``: SIGKILL (crash recovery at the next start, like PostgreSQL's immediate mode)."""
    from harness.topology.process import signal_group, signal_pid

    signal_group(pid, signal.SIGCONT)  # a paused server cannot shut down
    if mode == "immediate":
        kill_group(pid, timeout)
        return
    prepare_clean_stop(pid)
    signal_pid(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout, group=True):
        kill_group(pid)
        raise TopologyError(f"MariaDB (pid {pid}) did not stop ({mode}) within {timeout:.0f} s; killed it")


def prepare_clean_stop(pid: int) -> None:
    """Before a clean stop (fast, smart) of the running server ``pid``: read-only, wait (≤ 2 s) until
    every binlog dump thread has sent all it has (a planned switchover loses nothing, DUR-1), and
    record the node's final GTID position in its data directory (:func:`rewind` reads it). Best
    effort: a server that does not answer is stopped all the same."""
    with contextlib.suppress(Exception):
        conf = _conf_of(pid)
        with _Admin(conf.parent / "mysqld.sock", 2) as conn:
            conn.execute("SET GLOBAL read_only = 1")
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                states = [r[0] or "" for r in conn.execute(
                    "SELECT state FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'").fetchall()]
                if all(s.startswith("Master has sent all binlog") for s in states):
                    break
                time.sleep(0.005)
            pos = last_gtids(_history_of(conn))
            datadir = Path(conn.execute("SELECT @@datadir").fetchone()[0])
            _write_as(datadir / GTID_FILE, pos, database_user())


def make_primary(datadir: Path) -> None:
    """Nothing to do on disk: the role line of the configuration makes a node the principal."""


def make_standby(datadir: Path, run_as: RunAs) -> None:
    """Nothing to do on disk: the role line of the configuration names whom the node follows."""


def _node_gtid_pos(datadir: Path, run_as: RunAs) -> str:
    """The final GTID position of a stopped node: recorded at a clean stop, or read by starting the
    server alone (no networking, no replication) - crash recovery included."""
    recorded = datadir / GTID_FILE
    if recorded.exists():
        return recorded.read_text().strip()
    work = datadir.parent
    sock = work / "probe.sock"
    log = work / "probe.log"
    pid = spawn_server([str(mariadbd()), "--no-defaults", f"--datadir={datadir}", "--skip-networking",
                        f"--socket={sock}", "--log-basename=node", "--log-bin=node-bin",
                        "--relay-log=node-relay-bin", "--skip-slave-start", "--gtid-strict-mode=ON",
                        f"--pid-file={work / 'probe.pid'}", "--innodb-buffer-pool-size=16M"], log, run_as, work)
    try:
        _wait_socket(sock, pid, log, 60)
        with _Admin(sock) as conn:
            pos = last_gtids(_history_of(conn))
            conn.execute("SHUTDOWN")
    finally:
        if not wait_gone(pid, 60, group=True):
            kill_group(pid)
        sock.unlink(missing_ok=True)
    return pos


def rewind(datadir: Path, source_socket: Path, source_port: int, run_as: RunAs) -> str:
    """Make a stopped former principal / standby ready to follow ``source``: nothing to do when the
    source's history holds the node's last transactions (:func:`is_contained`); TopologyError when the
    node may hold a transaction the source lacks (the backend then re-clones it)."""
    pos = _node_gtid_pos(datadir, run_as)
    with _Admin(_sock_of(source_socket)) as conn:
        history = _history_of(conn)
    (datadir / GTID_FILE).unlink(missing_ok=True)
    if is_contained(pos, history):
        return f"node at {pos!r} is within the source's history; nothing to rewind"
    raise TopologyError(f"node at GTID {pos!r} holds transactions the source ({history!r}) lacks: it must be "
                        "re-cloned")


def reclone(datadir: Path, source_socket: Path, source_port: int, run_as: RunAs) -> None:
    """Replace a stopped node's data directory by a ``mariadb-backup`` copy of the running source; the
    copy starts replicating from the backup's GTID position."""
    target = datadir.parent / "reclone"
    shutil.rmtree(target, ignore_errors=True)
    base = [_tool("mariadb-backup"), "--no-defaults"]
    res = subprocess.run([*base, "--backup", f"--socket={_sock_of(source_socket)}", "--user=root",
                          f"--target-dir={target}", "--parallel=2"], capture_output=True, text=True, timeout=300)
    if res.returncode == 0:
        res = subprocess.run([*base, "--prepare", f"--target-dir={target}"], capture_output=True, text=True,
                             timeout=300)
    if res.returncode != 0:
        raise TopologyError(f"mariadb-backup into {target} failed (exit {res.returncode}): "
                            f"{res.stderr.strip()[-1200:]}")
    gtid = _backup_start(target, source_socket)
    shutil.rmtree(datadir, ignore_errors=True)
    target.rename(datadir)
    (datadir / START_FILE).write_text(gtid)
    for p in [datadir, *datadir.rglob("*")]:
        run_as.chown(p)


def _backup_start(backup: Path, source_socket: Path) -> str:
    """The GTID position a re-cloned copy starts replicating from: the source's binlog file and offset
    at the backup (``xtrabackup_binlog_info`` - mariadb-backup 10.11's name; ``mariadb_backup_binlog_info``
    in later versions) as the source's binlog names them, ``BINLOG_GTID_POS(file, offset)``. The
    file's own third field (``gtid_current_pos``) is no substitute: it is empty on a principal whose
    last binlogged transaction is another server's and whose slave position is empty. The harness
    used to look for the later name only, so every copy started at ``''``; in one ``make chaos`` run
    (DUR-1, ``rejoin``) the source then sent its first transactions again, onto data that already held
    them (duplicate key, not streaming after 30 s)."""
    for name in ("xtrabackup_binlog_info", "mariadb_backup_binlog_info"):
        info = backup / name
        if info.exists():
            fields = info.read_text().split()
            break
    else:
        return ""
    recorded = fields[2] if len(fields) >= 3 else ""
    if len(fields) < 2 or not fields[1].isdigit():
        return recorded
    with contextlib.suppress(Exception):  # noqa: BLE001 - the recorded position is the fallback
        with _Admin(_sock_of(source_socket)) as conn:
            row = conn.execute("SELECT BINLOG_GTID_POS(%s, %s)", (fields[0], int(fields[1]))).fetchone()
        if row and row[0]:
            return str(row[0])
    return recorded


# ------------------------------------------------------------------------------------------------
# replication progress
# ------------------------------------------------------------------------------------------------

def _history_of(conn: _Admin) -> str:
    """What a server's history holds: its binlog state plus its slave position (a re-cloned copy's
    start), as one GTID list."""
    row = conn.execute("SELECT @@gtid_binlog_state, @@gtid_slave_pos").fetchone()
    return ",".join(x for x in row if x)


def wait_replica(principal_socket: Path, principal_port: int, standby: str, standby_socket: Path,
                 standby_port: int, standby_alive: Callable[[], bool], timeout: float = 30) -> str | None:
    """Wait until ``standby`` replicates from the principal and has applied everything the principal
    had when asked (``MASTER_GTID_WAIT``); None when it has, else the last replication state seen."""
    deadline = time.monotonic() + timeout
    state: str | None = None
    with _Admin(_sock_of(principal_socket)) as p:
        target = p.execute("SELECT @@gtid_binlog_pos").fetchone()[0]
        pid_ = p.execute("SELECT @@server_id").fetchone()[0]
    with _Admin(_sock_of(standby_socket)) as s:
        while time.monotonic() < deadline:
            st = s.row("SHOW SLAVE STATUS")
            if st is None:
                state = "not a replica"
            elif str(st.get("Master_Server_Id")) != str(pid_) or st.get("Slave_IO_Running") != "Yes":
                err = st.get("Last_IO_Error") or st.get("Last_SQL_Error") or ""
                state = f"io={st.get('Slave_IO_Running')} sql={st.get('Slave_SQL_Running')} {err}".strip()
                if st.get("Slave_SQL_Running") != "Yes" and st.get("Last_SQL_Error"):
                    break
                if "1236" in str(st.get("Last_IO_Errno")) or st.get("Last_IO_Errno") == 1236:
                    break  # the source lacks this node's GTIDs: diverged
            elif is_contained(target, _history_of(s)):
                return None
            else:  # wait for it (a former principal's own GTIDs are in its binlog, not its slave position)
                state = f"behind {target}"
                s.execute("SELECT MASTER_GTID_WAIT(%s, 0.05)", (target,))
                continue
            if not standby_alive():
                break
            time.sleep(0.005)
    return state


@module_functions("config_text", "wait_replica", "wait_ready", "wait_writable", "reload")
class MariaDBEngine:
    """MariaDB 10.11 as an :class:`~harness.topology.engine.Engine` (the functions of this module)."""

    name = "mariadb"
    label = "MariaDB"
    topology_prefix = "mariadb"

    @property
    def credentials(self) -> Credentials:
        """The test login: user ``app``, database ``app``, this machine's random password, and the
        0600 option file holding it (``mariadb --defaults-extra-file=``)."""
        app_pw, _ = _passwords()
        return Credentials(APP_USER, app_pw, APP_DATABASE,
                           passfile=str(credentials_file(template_dir(database_user()))))

    @staticmethod
    def checkpoint(socket_dir: Path, port: int) -> None:
        """Nothing to do: GTID positions, not a control file, say where a node is."""

    @staticmethod
    def published_partner(socket_dir: Path, port: int) -> str | None:
        """MariaDB publishes no mirroring partner (the MIR profile is PostgreSQL's): None."""
        return None
