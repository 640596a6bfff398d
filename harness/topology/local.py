"""Local backend: real PostgreSQL server processes on this machine, as a pair (principal + mirror)
or a group (one principal, N-1 standbys), with role operations that return when done and report how
long they took. Knows nothing about rules; it records topology events into an optional history.

Every operation takes the run's lock and re-reads the run's state file, so the foreground process,
``failover-harness fault --run ID`` and a test can all drive the same run."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from harness.errors import ConfigError, InvalidOperation, TopologyError, UnknownNodeError
from harness.paths import runs_dir
from harness.ports import allocate_port
from harness.topology import postgres as pg
from harness.topology.links import Address, DirectLinks, Links
from harness.topology.process import RunAs, database_user, kill_group, pid_alive, signal_group, signal_pid
from harness.topology.run import down_run, load_state, locked, new_run_id, run_path, save_state, start_reaper

PRINCIPAL, MIRROR, STANDBY = "principal", "mirror", "standby"
RUNNING, STOPPED, KILLED, PAUSED = "running", "stopped", "killed", "paused"
TOPOLOGIES = {"pg-pair": 2, "pg-group3": 3}

Recorder = Callable[..., Any]


@dataclass(frozen=True)
class OperationResult:
    """What a role operation or node action did and how long it took (CLI ``fault --json``)."""

    fault: str
    node: str | None
    started_at: float  # Unix wall-clock seconds
    ended_at: float
    seconds: float
    principal: str | None

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape: fault, node, started_at, ended_at, seconds, principal."""
        return asdict(self)


class Node:
    """A view of one node of a topology: name, role, state and addresses (always current)."""

    def __init__(self, topology: LocalTopology, name: str) -> None:
        self._topology = topology
        self.name = name

    @property
    def _s(self) -> dict[str, Any]:
        return self._topology._node_state(self.name)

    @property
    def role(self) -> str:
        """``principal``, ``mirror`` (the principal's partner in a pair) or ``standby`` (group)."""
        return self._s["role"]

    @property
    def state(self) -> str:
        """``running``, ``stopped``, ``killed`` or ``paused``."""
        return self._s["state"]

    @property
    def pid(self) -> int | None:
        """PID of the postmaster (also its process-group ID) while it runs."""
        return self._s.get("pid")

    @property
    def server_address(self) -> Address:
        """Where the server itself listens."""
        return ("127.0.0.1", self._s["port"])

    @property
    def client_address(self) -> Address:
        """Where clients connect to reach this node (a fault proxy when one is wired in)."""
        return (self._s["client_host"], self._s["client_port"])

    @property
    def datadir(self) -> Path:
        """The node's data directory."""
        return Path(self._s["datadir"])

    @property
    def log_path(self) -> Path:
        """The node's server log."""
        return self._topology.path / self.name / "postgres.log"

    def dsn(self, dbname: str = pg.APP_DATABASE, user: str = pg.APP_USER,
            password: str = pg.APP_PASSWORD, direct: bool = False, **params: Any) -> str:
        """A libpq connection string for this node's client-facing address (``direct=True``: the
        server's own address, bypassing any proxy)."""
        host, port = self.server_address if direct else self.client_address
        extra = "".join(f" {k}={v}" for k, v in params.items())
        return f"host={host} port={port} dbname={dbname} user={user} password={password}{extra}"

    def admin(self) -> psycopg.Connection:
        """A superuser autocommit connection over the Unix socket (harness use; bypasses proxies)."""
        return pg.admin_connect(self._topology.socket_dir(self.name), self._s["port"])

    def to_dict(self) -> dict[str, Any]:
        """The CLI JSON shape of a node."""
        ch, cp = self.client_address
        sh, sp = self.server_address
        return {"name": self.name, "role": self.role, "state": self.state,
                "client_address": f"{ch}:{cp}", "server_address": f"{sh}:{sp}", "dsn": self.dsn()}

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.role} {self.state} {self.server_address[1]}>"


class LocalTopology:
    """A pair or group of local PostgreSQL 15 servers with streaming replication.

    Use as a context manager (``with Pair() as pair: ...``) or call :meth:`up` / :meth:`down`.
    ``mode="sync"`` makes every commit wait for a standby (no acknowledged commit lost, DUR-1);
    ``mirror_readable=False`` runs standbys with ``hot_standby=off`` so they reject logins at once
    like an SQL Server mirror (the inactive partner of MIR-7)."""

    def __init__(self, nodes: int = 2, mode: str = "sync", mirror_readable: bool = False,
                 history: Any = None, links: Links | str = "proxy", topology: str | None = None,
                 detached: bool = False, progress: Callable[[str], None] | None = None) -> None:
        if mode not in ("sync", "async"):
            raise ConfigError(f"mode must be 'sync' or 'async', not {mode!r}")
        if not isinstance(nodes, int) or nodes < 2:
            raise ConfigError(f"a topology needs at least 2 nodes, not {nodes!r}")
        self.n_nodes = nodes
        self.mode = mode
        self.mirror_readable = bool(mirror_readable)
        self.topology = topology or ("pg-pair" if nodes == 2 else f"pg-group{nodes}")
        self.history = history
        self._links_spec = links
        self.links: Links = DirectLinks() if links in (None, "direct", "proxy") else _make_links(links, detached)
        self.detached = detached
        self.progress = progress or (lambda msg: None)
        self.run_as: RunAs = database_user()
        self.run_id: str | None = None
        self.path: Path = Path()
        self._state: dict[str, Any] = {}
        self._local = threading.RLock()

    # -------------------------------------------------------------------------------- lifecycle

    @classmethod
    def attach(cls, run_id: str, history: Any = None, links: Links | None = None) -> LocalTopology:
        """Drive an existing run (started by ``up --detach`` or another process)."""
        path = run_path(run_id)
        state = load_state(path)
        topo = cls(nodes=len(state["nodes"]), mode=state["mode"], mirror_readable=state["mirror_readable"],
                   history=history, links=links or "direct", topology=state["topology"],
                   detached=state.get("detached", False))
        topo.run_id, topo.path, topo._state = run_id, path, state
        if links is None:
            topo.links = _links_from_state(state)
        topo.links.setup(topo)
        return topo

    def up(self) -> LocalTopology:
        """Create the run directory, start every server, wait until the mirror(s) stream."""
        t0 = time.monotonic()
        if self._links_spec == "proxy":
            self.progress("starting the fault proxy")
            self.links = _make_links("proxy", self.detached)
        self.run_id = new_run_id()
        self.path = runs_dir() / self.run_id
        self.path.mkdir(mode=0o755)
        self.run_as.chown(self.path)
        names = [f"n{i + 1}" for i in range(self.n_nodes)]
        ports = [allocate_port() for _ in names]
        self._state = {
            "run": self.run_id, "topology": self.topology, "engine": "postgres",
            "version": pg.server_version(), "mode": self.mode, "mirror_readable": self.mirror_readable,
            "created": time.time(), "owner_pid": os.getpid(), "detached": self.detached,
            "links": {"kind": self.links.kind}, "ports": list(ports), "processes": [],
            "nodes": [{"name": n, "role": PRINCIPAL if i == 0 else (MIRROR if self.n_nodes == 2 else STANDBY),
                       "state": STOPPED, "pid": None, "port": p, "client_host": "127.0.0.1", "client_port": p,
                       "datadir": str(self.path / n / "data"), "needs_rewind": False, "exposed": False}
                      for i, (n, p) in enumerate(zip(names, ports, strict=True))],
        }
        save_state(self.path, self._state)
        if not self.detached:
            start_reaper(self.path, os.getpid())
        try:
            self.progress("preparing data-directory template")
            template = pg.template_dir(self.run_as)
            with locked(self.path):
                for n in names:
                    d = self.path / n
                    d.mkdir()
                    self.run_as.chown(d)
                pg.copy_template(template, *(self.path / n / "data" for n in names))
                self.links.setup(self)
                self._forward_proxy_events()
                for node in self._state["nodes"]:
                    host, port = self.links.client_address(node["name"])
                    node["client_host"], node["client_port"] = host, port
                save_state(self.path, self._state)
                self.progress(f"starting {self.topology} ({self.mode}) in {self.path}")
                principal = names[0]
                self._start_locked(principal, wait=False)
                for n in names[1:]:
                    pg.make_standby(Path(self._node_state(n)["datadir"]), self.run_as)
                    self._start_locked(n, wait=False)
                self._wait_started(principal)
                for n in names[1:]:
                    self._wait_streaming(n, principal)
                save_state(self.path, self._state)
        except BaseException:
            self.down()
            raise
        self._emit("mirroring.partner", node=self.principal.name, partner=self._partner_of_principal())
        self._emit("topology.up", topology=self.topology, seconds=time.monotonic() - t0,
                   nodes=[{k: v for k, v in n.to_dict().items() if k != "dsn"} for n in self.nodes])
        return self

    def _forward_proxy_events(self) -> None:
        """Record the fault proxy's connection events into the history (when both exist)."""
        subscribe = getattr(self.links, "subscribe", None)
        if self.history is None or subscribe is None:
            return
        history = self.history
        self._unsubscribe = subscribe(lambda ev: history.record(ev.type, t=ev.t, **ev.fields))

    def down(self) -> None:
        """Stop every process of the run and delete its directory (safe to call twice)."""
        if not self.run_id:
            return
        unsubscribe = getattr(self, "_unsubscribe", None)
        if unsubscribe is not None:
            unsubscribe()
            self._unsubscribe = None
        try:
            self.links.teardown()
        finally:
            down_run(self.path)
        self._emit("topology.down", topology=self.topology)
        self.run_id = None

    def __enter__(self) -> LocalTopology:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ------------------------------------------------------------------------------- accessors

    def _node_state(self, name: str) -> dict[str, Any]:
        for n in self._state.get("nodes", []):
            if n["name"] == name:
                return n
        known = ", ".join(n["name"] for n in self._state.get("nodes", []))
        raise UnknownNodeError(f"unknown node {name!r} in run {self.run_id} (nodes: {known})")

    def node(self, name: str | Node) -> Node:
        """The node called ``name`` (UnknownNodeError naming the known nodes otherwise)."""
        name = name.name if isinstance(name, Node) else name
        self._node_state(name)
        return Node(self, name)

    @property
    def nodes(self) -> list[Node]:
        """Every node, in creation order."""
        return [Node(self, n["name"]) for n in self._state.get("nodes", [])]

    @property
    def principal(self) -> Node:
        """The current principal."""
        return next(n for n in self.nodes if n.role == PRINCIPAL)

    @property
    def mirror(self) -> Node:
        """The principal's partner: the mirror of a pair, or the first standby of a group."""
        others = [n for n in self.nodes if n.role != PRINCIPAL]
        return next((n for n in others if n.state == RUNNING), others[0])

    @property
    def standbys(self) -> list[Node]:
        """Every node that is not the principal."""
        return [n for n in self.nodes if n.role != PRINCIPAL]

    def dsn(self, target_session_attrs: str = "read-write", dbname: str = pg.APP_DATABASE,
            user: str = pg.APP_USER, password: str = pg.APP_PASSWORD, **params: Any) -> str:
        """A libpq multi-host connection string listing every node's client-facing address, so a
        libpq client finds the principal itself (``target_session_attrs=read-write``)."""
        hosts = ",".join(n.client_address[0] for n in self.nodes)
        ports = ",".join(str(n.client_address[1]) for n in self.nodes)
        extra = "".join(f" {k}={v}" for k, v in params.items())
        return (f"host={hosts} port={ports} dbname={dbname} user={user} password={password} "
                f"target_session_attrs={target_session_attrs}{extra}")

    def socket_dir(self, name: str) -> Path:
        """The Unix-socket directory of a node (outside its data directory: pg_rewind trap)."""
        return self.path / name

    def refresh(self) -> None:
        """Re-read the state file (another process may have changed roles)."""
        if self.run_id:
            self._state = load_state(self.path)

    def describe(self) -> dict[str, Any]:
        """The CLI JSON shape: run, topology, mode, nodes."""
        return {"run": self.run_id, "topology": self.topology, "mode": self.mode,
                "mirror_readable": self.mirror_readable, "engine": "postgres",
                "version": self._state.get("version"), "fault_proxy": self._state.get("links", {}),
                "nodes": [n.to_dict() for n in self.nodes]}

    # ------------------------------------------------------------------------------ operations

    def _operation(self, fault: str, node: str | None, body: Callable[[], str | None]) -> OperationResult:
        with self._local, locked(self.path):
            self.refresh()
            wall0, t0 = time.time(), time.monotonic()
            touched = body()
            save_state(self.path, self._state)
            seconds = time.monotonic() - t0
        principal = next((n["name"] for n in self._state["nodes"] if n["role"] == PRINCIPAL), None)
        return OperationResult(fault, touched if touched is not None else node, wall0, wall0 + seconds,
                               seconds, principal)

    def switchover(self, target: str | None = None) -> OperationResult:
        """Planned role swap: the principal stops (fast), ``target`` (default: the mirror) is promoted,
        the old principal is rewound and rejoins as its mirror; other standbys follow."""
        return self._operation("switchover", None, lambda: self._switchover(target))

    def failover(self, target: str | None = None) -> OperationResult:
        """Unplanned: kill -9 the principal (every server process at once) and promote ``target``
        (default: the mirror). The old principal stays down until :meth:`rejoin`."""
        return self._operation("failover", None, lambda: self._failover(target))

    def rejoin(self, node: str | None = None) -> OperationResult:
        """Bring a down former principal (or any down standby) back as a mirror of the principal."""
        return self._operation("rejoin", node, lambda: self._rejoin(node))

    def stop(self, node: str, mode: str = "fast") -> OperationResult:
        """Stop one server: ``fast`` (SIGINT), ``immediate`` (SIGQUIT) or ``smart`` (SIGTERM)."""
        if mode not in ("fast", "immediate", "smart"):
            raise ConfigError(f"stop mode must be fast, immediate or smart, not {mode!r}")
        return self._operation("stop", node, lambda: self._stop(node, mode))

    def start(self, node: str) -> OperationResult:
        """Start a stopped or killed server in its current role (a former principal replaced by
        a failover is rewound first, as :meth:`rejoin` does)."""
        return self._operation("start", node, lambda: self._start_op(node))

    def kill(self, node: str) -> OperationResult:
        """kill -9 every process of one server (no failover; the roles stay as they are)."""
        return self._operation("kill", node, lambda: self._kill(node))

    def pause(self, node: str, scope: str = "postmaster") -> OperationResult:
        """SIGSTOP the postmaster (new connections hang) or ``scope="all"`` server processes
        (in-flight queries hang too)."""
        if scope not in ("postmaster", "all"):
            raise ConfigError(f"pause scope must be 'postmaster' or 'all', not {scope!r}")
        return self._operation("pause", node, lambda: self._pause(node, scope))

    def resume(self, node: str) -> OperationResult:
        """SIGCONT a paused server."""
        return self._operation("resume", node, lambda: self._resume(node))

    # ------------------------------------------------------------------------ implementation

    def _emit(self, type_: str, t: float | None = None, **fields: Any) -> None:
        """Record a topology event; ``t`` (monotonic) backdates it to when the action began."""
        if self.history is not None:
            self.history.record(type_, t=t, run=self.run_id, **fields)

    def _set_role(self, name: str, role: str) -> None:
        s = self._node_state(name)
        if s["role"] != role:
            self._emit("role.change", node=name, old_role=s["role"], new_role=role)
            s["role"] = role

    def _require(self, name: str, *states: str) -> dict[str, Any]:
        s = self._node_state(name)
        if s["state"] not in states:
            raise InvalidOperation(f"node {name} is {s['state']} (role {s['role']}); this needs it "
                                   f"{' or '.join(states)}")
        return s

    def _partner_of_principal(self) -> str:
        others = [n for n in self._state["nodes"] if n["role"] != PRINCIPAL]
        live = [n for n in others if n["state"] in (RUNNING, PAUSED)]
        chosen = (live or others)[0]
        return f"{chosen['client_host']}:{chosen['client_port']}"

    def _principal_name(self) -> str:
        return next(n["name"] for n in self._state["nodes"] if n["role"] == PRINCIPAL)

    def _write_conf(self, name: str) -> Path:
        s = self._node_state(name)
        principal = self._principal_name()
        is_principal = s["role"] == PRINCIPAL
        cfg = pg.ServerConfig(
            port=s["port"], socket_dir=self.socket_dir(name), application_name=name,
            standby_of=None if is_principal else self.links.replication_address(name, principal),
            hot_standby=self.mirror_readable,
            synchronous=self.mode == "sync" and is_principal and not s.get("exposed"),
            partner=self._partner_of_principal() if is_principal else "",
        )
        conf = self.path / name / "postgresql.conf"
        conf.write_text(cfg.render())
        return conf

    def _reload(self, name: str) -> None:
        s = self._node_state(name)
        self._write_conf(name)
        if s["state"] == RUNNING and s["pid"]:
            signal_pid(s["pid"], signal.SIGHUP)

    def _start_locked(self, name: str, wait: bool = True) -> None:
        s = self._node_state(name)
        if s["role"] == PRINCIPAL:
            pg.make_primary(Path(s["datadir"]))
        conf = self._write_conf(name)
        t0 = time.monotonic()
        s["pid"] = pg.start_server(Path(s["datadir"]), conf, self.path / name / "postgres.log", self.run_as,
                                   self.path / name)
        s["state"] = RUNNING
        save_state(self.path, self._state)
        if wait:
            self._wait_started(name)
            if s["role"] != PRINCIPAL:
                principal = self._node_state(self._principal_name())
                if principal["state"] == RUNNING:
                    self._wait_streaming(name, principal["name"])
        self._emit("node.start", t=t0, node=name, role=s["role"], seconds=time.monotonic() - t0)

    def _wait_started(self, name: str) -> None:
        s = self._node_state(name)
        log = self.path / name / "postgres.log"
        pg.wait_ready(Path(s["datadir"]), s["pid"], log, timeout=60)
        if s["role"] == PRINCIPAL:
            pg.wait_writable(self.socket_dir(name), s["port"], s["pid"], log, timeout=60)

    def _wait_streaming(self, standby: str, principal: str, timeout: float = 30) -> None:
        p = self._node_state(principal)
        deadline = time.monotonic() + timeout
        state = None
        with pg.admin_connect(self.socket_dir(principal), p["port"]) as conn:
            # Caught up on the principal's own timeline: right after a timeline switch a standby
            # first streams the old timeline to its end, then reconnects; only WAL written on the
            # new timeline (past the switch point) proves it follows the new principal.
            target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            while time.monotonic() < deadline:
                row = conn.execute("SELECT state, coalesce(flush_lsn >= %s::pg_lsn, false) FROM pg_stat_replication "
                                   "WHERE application_name = %s", (target, standby)).fetchone()
                state = row[0] if row else None
                if state == "streaming" and row[1]:
                    return
                if not pid_alive(self._node_state(standby)["pid"]):
                    break
                time.sleep(0.003)
        log = self.path / standby / "postgres.log"
        raise TopologyError(f"standby {standby} is not streaming from {principal} after {timeout:.0f} s "
                            f"(replication state {state!r}); its log:\n{pg.log_tail(log)}")

    def _stop_server(self, name: str, mode: str) -> None:
        s = self._node_state(name)
        t0 = time.monotonic()
        if s["pid"] and pid_alive(s["pid"]):
            pg.stop_server(s["pid"], mode)
        s["state"], s["pid"] = STOPPED, None
        self._emit("node.stop", t=t0, node=name, mode=mode, seconds=time.monotonic() - t0)

    def _kill_server(self, name: str) -> None:
        s = self._node_state(name)
        t0 = time.monotonic()
        if s["pid"]:
            if not kill_group(s["pid"], timeout=10):
                raise TopologyError(f"processes of node {name} (pgid {s['pid']}) survived SIGKILL")
        s["state"], s["pid"] = KILLED, None
        self._emit("node.kill", t=t0, node=name, seconds=time.monotonic() - t0)

    def _promote(self, name: str) -> None:
        s = self._node_state(name)
        pg.promote(Path(s["datadir"]), s["pid"], self.run_as)
        pg.wait_writable(self.socket_dir(name), s["port"], s["pid"], self.path / name / "postgres.log", 60)

    def _pick_target(self, target: str | None, op: str) -> str:
        principal = self._principal_name()
        if target is None:
            candidates = [n for n in self._state["nodes"] if n["role"] != PRINCIPAL and n["state"] == RUNNING
                          and not n.get("needs_rewind")]
            if not candidates:
                states = ", ".join(f"{n['name']} {n['state']}" for n in self._state["nodes"] if n["role"] != PRINCIPAL)
                raise InvalidOperation(f"{op} needs a running mirror, but the mirror is not running ({states}); "
                                       f"start() or rejoin() it first")
            return candidates[0]["name"]
        if target == principal:
            raise InvalidOperation(f"{op} target {target} is already the principal")
        s = self._require(target, RUNNING)
        if s.get("needs_rewind"):
            raise InvalidOperation(f"{op} target {target} has diverged and must rejoin() first")
        return target

    def _switchover(self, target: str | None) -> str:
        old = self._principal_name()
        self._require(old, RUNNING)
        new = self._pick_target(target, "switchover")
        self._wait_streaming(new, old, timeout=10)
        self._stop_server(old, "fast")
        self._set_role(old, MIRROR if self.n_nodes == 2 else STANDBY)
        self._set_role(new, PRINCIPAL)
        self._write_conf(new)
        self._promote(new)
        signal_pid(self._node_state(new)["pid"], signal.SIGHUP)  # synchronous_standby_names, partner
        self.links.roles_changed(self)
        newp = self._node_state(new)
        with pg.admin_connect(self.socket_dir(new), newp["port"]) as conn:
            conn.execute("CHECKPOINT")  # pg_rewind reads the new timeline from the control file
        olds = self._node_state(old)
        self._rewind(old, new)
        pg.make_standby(Path(olds["datadir"]), self.run_as)
        self._start_locked(old, wait=False)
        for other in self._state["nodes"]:
            if other["name"] not in (old, new) and other["state"] == RUNNING:
                self._reload(other["name"])
        self._wait_started(old)
        self._wait_streaming(old, new)
        for other in self._state["nodes"]:  # done only when every standby follows the new principal
            if other["name"] not in (old, new) and other["state"] == RUNNING:
                self._follow_or_rewind(other["name"], new)
        self._reload(new)  # the partner is now known to be live
        self._wait_partner_published(new)
        return old

    def _failover(self, target: str | None) -> str:
        old = self._principal_name()
        new = self._pick_target(target, "failover")
        if self._node_state(old)["state"] in (RUNNING, PAUSED):
            self._kill_server(old)
        olds = self._node_state(old)
        olds["needs_rewind"] = True
        self._set_role(old, MIRROR if self.n_nodes == 2 else STANDBY)
        self._set_role(new, PRINCIPAL)
        newp = self._node_state(new)
        live_standbys = [n for n in self._state["nodes"] if n["role"] != PRINCIPAL and n["state"] == RUNNING]
        newp["exposed"] = not live_standbys  # sync pair without a mirror runs exposed (commits go on)
        self._write_conf(new)
        signal_pid(newp["pid"], signal.SIGHUP)
        self._promote(new)
        self._emit("mirroring.partner", node=new, partner=self._partner_of_principal())
        self.links.roles_changed(self)
        for other in live_standbys:
            self._reload(other["name"])
        for other in live_standbys:
            self._follow_or_rewind(other["name"], new)
        return old

    def _follow_or_rewind(self, standby: str, principal: str) -> None:
        """Make a surviving standby follow a new principal; if it cannot (an asynchronous standby
        that had received more WAL than the promoted one), rewind it and start it again."""
        try:
            self._wait_streaming(standby, principal, timeout=5)
        except TopologyError:
            self._stop_server(standby, "fast")
            self._rewind_and_start(standby, principal)

    def _rejoin(self, name: str | None) -> str:
        principal = self._principal_name()
        self._require(principal, RUNNING)
        if name is None:
            down = [n for n in self._state["nodes"] if n["role"] != PRINCIPAL and n["state"] in (STOPPED, KILLED)]
            if not down:
                raise InvalidOperation("rejoin() needs a stopped or killed former principal or standby; "
                                       "every node is running")
            name = down[0]["name"]
        s = self._node_state(name)
        if s["role"] == PRINCIPAL:
            raise InvalidOperation(f"node {name} is the principal; rejoin() is for a node that lost that role")
        self._require(name, STOPPED, KILLED)
        self._rewind_and_start(name, principal)
        return name

    def _rewind_and_start(self, name: str, principal: str) -> None:
        s, p = self._node_state(name), self._node_state(principal)
        with pg.admin_connect(self.socket_dir(principal), p["port"]) as conn:
            conn.execute("CHECKPOINT")
        self._rewind(name, principal)
        pg.make_standby(Path(s["datadir"]), self.run_as)
        s["needs_rewind"] = False
        self._start_locked(name, wait=True)
        if p.get("exposed"):
            p["exposed"] = False
        self._reload(principal)
        self._wait_partner_published(principal)

    def _rewind(self, name: str, principal: str) -> None:
        """Make a stopped former principal/standby a copy of ``principal``'s timeline: pg_rewind, or a
        fresh pg_basebackup when pg_rewind cannot (e.g. the WAL it needs is gone)."""
        s, p = self._node_state(name), self._node_state(principal)
        try:
            pg.rewind(Path(s["datadir"]), self.socket_dir(principal), p["port"], self.run_as)
        except TopologyError as exc:
            reason = str(exc).strip().splitlines()[-1][:300]
            self._emit("node.reclone", node=name, source=principal, reason=reason)
            pg.reclone(Path(s["datadir"]), self.socket_dir(principal), p["port"], self.run_as)

    def _stop(self, name: str, mode: str) -> str:
        self._require(name, RUNNING, PAUSED)
        self._stop_server(name, mode)
        return name

    def _start_op(self, name: str) -> str:
        s = self._require(name, STOPPED, KILLED)
        if s["role"] != PRINCIPAL and s.get("needs_rewind"):
            self._rewind_and_start(name, self._principal_name())
        else:
            if s["role"] != PRINCIPAL:
                pg.make_standby(Path(s["datadir"]), self.run_as)
            self._start_locked(name, wait=True)
        return name

    def _kill(self, name: str) -> str:
        self._require(name, RUNNING, PAUSED)
        self._kill_server(name)
        return name

    def _pause(self, name: str, scope: str) -> str:
        s = self._require(name, RUNNING)
        if scope == "all":
            signal_group(s["pid"], signal.SIGSTOP)
        else:
            signal_pid(s["pid"], signal.SIGSTOP)
        s["state"], s["paused_scope"] = PAUSED, scope
        self._emit("node.pause", node=name, scope=scope)
        return name

    def _resume(self, name: str) -> str:
        s = self._node_state(name)
        if s["state"] != PAUSED:
            raise InvalidOperation(f"resume({name}): node {name} is {s['state']}, not paused")
        signal_group(s["pid"], signal.SIGCONT)
        s["state"] = RUNNING
        self._emit("node.resume", node=name, scope=s.pop("paused_scope", "postmaster"))
        return name

    def _wait_partner_published(self, principal: str, timeout: float = 5) -> None:
        """Wait until ``SHOW mirroring.partner`` on the principal answers its current mirror (MIR-9)."""
        s = self._node_state(principal)
        wanted = self._partner_of_principal()
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            with pg.admin_connect(self.socket_dir(principal), s["port"]) as conn:
                seen = conn.execute("SHOW mirroring.partner").fetchone()[0]
            if seen == wanted:
                self._emit("mirroring.partner", node=principal, partner=seen)
                return
            time.sleep(0.005)
        raise TopologyError(f"principal {principal} still publishes mirroring.partner={seen!r}, not {wanted!r}")

    def partner_setting(self) -> str:
        """What the principal currently answers to ``SHOW mirroring.partner``."""
        with self.principal.admin() as conn:
            return conn.execute("SHOW mirroring.partner").fetchone()[0]


def _make_links(links: Links | str | None, detached: bool) -> Links:
    """``"proxy"`` (default): every address behind the fault proxy; ``"direct"``: none; or a
    ready-made :class:`~harness.topology.links.Links`."""
    if links is None or links == "direct":
        return DirectLinks()
    if links == "proxy":
        from harness.faults.wiring import start_proxied_links

        return start_proxied_links(detached=detached)
    if isinstance(links, str):
        raise ConfigError(f"links must be 'proxy', 'direct' or a Links object, not {links!r}")
    return links


def _links_from_state(state: dict[str, Any]) -> Links:
    kind = state.get("links", {}).get("kind", "direct")
    if kind == "direct":
        return DirectLinks()
    from harness.faults.wiring import links_from_state  # proxied runs

    return links_from_state(state)


def Pair(mode: str = "sync", mirror_readable: bool = False, **kwargs: Any) -> LocalTopology:  # noqa: N802
    """A principal + mirror pair (not yet started: use ``with Pair() as pair``)."""
    return LocalTopology(nodes=2, mode=mode, mirror_readable=mirror_readable, topology="pg-pair", **kwargs)


def Group(nodes: int = 3, mode: str = "sync", mirror_readable: bool = False, **kwargs: Any) -> LocalTopology:  # noqa: N802
    """One principal and ``nodes - 1`` standbys (N >= 3)."""
    if not isinstance(nodes, int) or nodes < 3:
        raise ConfigError(f"a group needs at least 3 nodes, not {nodes!r}; use Pair() for two")
    return LocalTopology(nodes=nodes, mode=mode, mirror_readable=mirror_readable,
                         topology=f"pg-group{nodes}", **kwargs)
