"""Local backend: real PostgreSQL server processes on this machine, as a pair (principal + mirror)
or a group (one principal, N-1 standbys), with role operations that return when done and report how
long they took. Knows nothing about rules; it records topology events into an optional history.

Every operation takes the run's lock and re-reads the run's state file, so the foreground process,
``failover-harness fault --run ID`` and a test can all drive the same run. The role choreography
(switchover, failover, rejoin) is :mod:`harness.topology.local_choreography`; this module keeps the
run's lifecycle, its state and the server primitives. Over 600 lines: one class owns a run's
lifecycle, lock and state, and its server primitives share that state."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.errors import ConfigError, InvalidOperation, TopologyError
from harness.paths import runs_dir
from harness.ports import allocate_port, hand_over, holder, release_port, retry_on_port_in_use
from harness.topology import api, preflight
from harness.topology.api import Group, OperationResult, Pair, Topology
from harness.topology.engine import Engine, NodeConfig
from harness.topology.links import Address, DirectLinks, Links
from harness.topology.local_choreography import LocalChoreography
from harness.topology.mariadb import MariaDBEngine
from harness.topology.postgres import PostgresEngine
from harness.topology.process import RunAs, database_user, kill_group, pid_alive
from harness.topology.proxied import links_of_run, make_links
from harness.topology.run import (
    down_run,
    find_reaper,
    load_state,
    locked,
    new_run_id,
    record_process,
    run_path,
    save_state,
    start_reaper,
)
from harness.topology.state import (
    KILLED,
    MIRROR,
    PAUSED,
    PRINCIPAL,
    RUNNING,
    STANDBY,
    STOPPED,
    LinksState,
    NodeState,
    ProcessRecord,
    RunState,
)
from harness.topology.switchover_sessions import HeldAdmin

TOPOLOGIES = {"pg-pair": 2, "pg-group3": 3, "mariadb-pair": 2, "mariadb-group3": 3}
#: The engine class of a saved run's ``engine`` name (:meth:`LocalTopology.attach`).
RUN_ENGINES: dict[str, Callable[[], Engine]] = {"postgres": PostgresEngine, "mariadb": MariaDBEngine}
#: The engine a topology name implies (``up --topology mariadb-pair``).
TOPOLOGY_ENGINES = {"pg-pair": "postgres", "pg-group3": "postgres", "mariadb-pair": "mariadb",
                    "mariadb-group3": "mariadb"}


class Node(api.Node):
    """A view of one node of a topology: name, role, state and addresses (always current)."""

    def __init__(self, topology: LocalTopology, name: str) -> None:
        self._topology = topology
        self.name = name

    @property
    def _s(self) -> NodeState:
        return self._topology._node_state(self.name)

    @property
    def role(self) -> str:
        """``principal``, ``mirror`` (the principal's partner in a pair) or ``standby`` (group)."""
        return self._s.role

    @property
    def state(self) -> str:
        """``running``, ``stopped``, ``killed`` or ``paused``."""
        return self._s.state

    @property
    def pid(self) -> int | None:
        """PID of the postmaster (also its process-group ID) while it runs."""
        return self._s.pid

    @property
    def server_address(self) -> Address:
        """Where the server itself listens."""
        return ("127.0.0.1", self._s.port)

    @property
    def client_address(self) -> Address:
        """Where clients connect to reach this node (a fault proxy when one is wired in)."""
        return (self._s.client_host, self._s.client_port)

    @property
    def datadir(self) -> Path:
        """The node's data directory."""
        return Path(self._s.datadir)

    @property
    def log_path(self) -> Path:
        """The node's server log."""
        return self._topology.path / self.name / "postgres.log"

    def dsn(self, dbname: str | None = None, user: str | None = None, password: str | None = None,
            direct: bool = False, **params: Any) -> str:
        """A libpq connection string for this node's client-facing address (``direct=True``: the
        server's own address, bypassing any proxy); the engine's test login unless told otherwise.
        It holds the password: hand it to a client, never print it (see :meth:`public_dsn`)."""
        creds = self._topology.engine.credentials
        dbname, user, password = dbname or creds.database, user or creds.user, password or creds.password
        host, port = self.server_address if direct else self.client_address
        extra = "".join(f" {k}={v}" for k, v in params.items())
        return f"host={host} port={port} dbname={dbname} user={user} password={password}{extra}"

    def public_dsn(self, direct: bool = False) -> str:
        """The test login's connection string as it may be printed or saved (no password in any
        output): the password file (``passfile=``, mode 0600) instead of the password; libpq and psql
        accept it as it is."""
        creds = self._topology.engine.credentials
        host, port = self.server_address if direct else self.client_address
        secret = f"passfile={creds.passfile}" if creds.passfile else "password=***"
        return f"host={host} port={port} dbname={creds.database} user={creds.user} {secret}"

    def admin(self) -> Any:
        """A superuser autocommit connection over the Unix socket (harness use; bypasses proxies)."""
        return self._topology.engine.admin_connect(self._topology.socket_dir(self.name), self._s.port)

    def to_dict(self) -> dict[str, Any]:
        """The CLI JSON shape of a node."""
        ch, cp = self.client_address
        sh, sp = self.server_address
        return {"name": self.name, "role": self.role, "state": self.state,
                "client_address": f"{ch}:{cp}", "server_address": f"{sh}:{sp}", "dsn": self.public_dsn()}

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.role} {self.state} {self.server_address[1]}>"


class LocalTopology(LocalChoreography, Topology):
    """A pair or group of local database servers (PostgreSQL 15 by default) with streaming
    replication, every address behind ``links`` (the fault proxy by default).

    Build it as :class:`LocalPair` / :class:`LocalGroup` (what ``Pair()`` / ``Group()`` and the local
    backend make); use it as a context manager or call :meth:`up` / :meth:`down`.
    ``mode="sync"`` makes every commit wait for a standby (no acknowledged commit lost, DUR-1);
    ``mirror_readable=False`` runs standbys with ``hot_standby=off`` so they reject logins at once
    like an SQL Server mirror (the inactive partner of MIR-7)."""

    def __init__(self, nodes: int = 2, mode: str = "sync", mirror_readable: bool = False,
                 history: Any = None, links: Links | str = "proxy", topology: str | None = None,
                 detached: bool = False, progress: Callable[[str], None] | None = None,
                 engine: Engine | None = None) -> None:
        if mode not in ("sync", "async"):
            raise ConfigError(f"mode must be 'sync' or 'async', not {mode!r}")
        if not isinstance(nodes, int) or nodes < 2:
            raise ConfigError(f"a topology needs at least 2 nodes, not {nodes!r}")
        self.n_nodes = nodes
        self.mode = mode
        self.mirror_readable = bool(mirror_readable)
        self.engine: Engine = engine or PostgresEngine()
        prefix = getattr(self.engine, "topology_prefix", "pg")
        self.topology = topology or (f"{prefix}-pair" if nodes == 2 else f"{prefix}-group{nodes}")
        self.history = history
        if not (links is None or links in ("direct", "proxy") or isinstance(links, Links)):
            raise ConfigError(f"links must be 'proxy', 'direct' or a Links object, not {links!r}")
        self._links_spec = links
        self.links: Links = links if isinstance(links, Links) else DirectLinks()
        self.detached = detached
        self.progress = progress or (lambda msg: None)
        self.run_as: RunAs = self._server_user()
        self.run_id: str | None = None
        self.path: Path = Path()
        self._run_state: RunState | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._local = threading.RLock()
        self._held = HeldAdmin()  # admin sessions prepare_switchover opens for the switchover's checks

    @staticmethod
    def _server_user() -> RunAs:
        """The OS user the servers run as (PostgreSQL refuses root)."""
        return database_user()

    # -------------------------------------------------------------------------------- lifecycle

    @staticmethod
    def attach(run_id: str, history: Any = None, links: Links | None = None) -> LocalTopology:
        """Drive an existing run (started by ``up --detach`` or another process) from this one:
        role operations and faults act on it; :meth:`down` tears it down."""
        path = run_path(run_id)
        state = load_state(path)
        cls: type[LocalTopology] = LocalPair if len(state.nodes) == 2 else LocalGroup
        kwargs = {} if cls is LocalPair else {"nodes": len(state.nodes)}
        topo = cls(mode=state.mode, mirror_readable=state.mirror_readable, history=history,  # type: ignore[call-arg]
                   links=links or "direct", topology=state.topology, detached=state.detached,
                   engine=RUN_ENGINES.get(state.engine or "postgres", PostgresEngine)(), **kwargs)
        topo.run_id, topo.path, topo._state = run_id, path, state
        topo.links = links or links_of_run(state)
        topo.links.setup(state)
        return topo

    def up(self) -> LocalTopology:
        """Check the harness home, create the run directory, start the fault proxy and every server,
        wait until the mirror(s) stream (docs/topology.md, "Bringing a topology up").

        Nothing starts before the checks pass (:func:`preflight.check_up`: one ConfigError line); the
        run directory and its state exist before the first process does, and every process is
        recorded in it as it starts, so a failure at any step stops all of it (:meth:`down`) and a
        crash leaves it to the reaper or ``down --all``. Each long step has a deadline and a progress
        line; a full disk at any step is one ConfigError line (:func:`preflight.space_error`)."""
        t0 = time.monotonic()
        preflight.check_up(self.engine.name, self.n_nodes)
        version = self.engine.server_version()
        self.run_id = new_run_id()
        self.path = runs_dir() / self.run_id
        self.path.mkdir(mode=0o755)
        self.run_as.chown(self.path)
        names = [f"n{i + 1}" for i in range(self.n_nodes)]
        ports = [allocate_port() for _ in names]
        self._state = RunState(
            run=self.run_id, topology=self.topology, engine=self.engine.name,
            version=version, mode=self.mode, mirror_readable=self.mirror_readable,
            created=time.time(), owner_pid=os.getpid(), detached=self.detached, starting=True,
            links=LinksState(kind=self.links.kind), ports=list(ports),
            nodes=[NodeState(name=n, role=PRINCIPAL if i == 0 else (MIRROR if self.n_nodes == 2 else STANDBY),
                             port=p, client_port=p, datadir=str(self.path / n / "data"))
                   for i, (n, p) in enumerate(zip(names, ports, strict=True))])
        save_state(self.path, self._state)
        try:
            reaper = start_reaper(self.path, os.getpid())  # a detached run's one holds its port reservations
            self._start_all(names)
            if self.detached:  # this process exits now; the run keeps its ports until 'down'
                self._hold_reservations(reaper, claim_fault_proxy=True)
            self._mark_started()
        except BaseException as exc:
            self.down()
            if preflight.is_no_space(exc):
                raise preflight.space_error(self.path.parent.parent,
                                            preflight.needed_mb(self.engine.name, self.n_nodes, True)) from None
            raise
        self._announce_up(t0)
        return self

    def _register_process(self, record: ProcessRecord) -> None:
        """Record a process of the run the moment it exists (the fault proxy's background server),
        so that :meth:`down`, the reaper and ``down --all`` stop it whatever happens next."""
        self._state.processes = [p for p in self._state.processes if p.pid != record.pid] + [record]
        save_state(self.path, self._state)

    def _start_all(self, names: list[str]) -> None:
        """The steps of :meth:`up` after the run directory exists, each under a deadline with a
        progress line: the fault proxy, the template, the copies, the servers, the catch-up."""
        if self._links_spec == "proxy":
            self.progress("starting the fault proxy")
            self.links = make_links("proxy", self.detached, run_dir=self.path, register=self._register_process)
            self._state.links = LinksState(kind=self.links.kind)
            save_state(self.path, self._state)
        self.progress("preparing the data-directory template")
        template = self.engine.template_dir(self.run_as)
        with locked(self.path):
            for n in names:
                d = self.path / n
                d.mkdir()
                self.run_as.chown(d)
            self.progress(f"copying the template to {len(names)} data directories")
            self.engine.copy_template(template, *(self.path / n / "data" for n in names))
            self.links.setup(self._state)
            self._forward_proxy_events()
            for node in self._state.nodes:
                host, port = self.links.client_address(self._state, node.name)
                node.client_host, node.client_port = host, port
            save_state(self.path, self._state)
            self.progress(f"starting {self.topology} ({self.mode}) in {self.path}")
            principal = names[0]
            self._start_locked(principal, wait=False)
            for n in names[1:]:
                self.engine.make_standby(Path(self._node_state(n).datadir), self.run_as)
                self._start_locked(n, wait=False)
            self._wait_started(principal)
            for n in names[1:]:
                self._wait_started(n)
                self.progress(f"waiting for {n} to stream from {principal}")
                self._wait_streaming(n, principal)
            save_state(self.path, self._state)

    def _mark_started(self) -> None:
        """The run is complete: from now on a detached run outlives its ``up`` (the reaper leaves it)."""
        with locked(self.path):
            self.refresh()
            self._state.starting = False
            save_state(self.path, self._state)

    def _announce_up(self, t0: float) -> None:
        """Record that the topology is up: the partner the principal publishes, then ``topology.up``."""
        self._emit("mirroring.partner", node=self.principal.name, partner=self._partner_of_principal())
        self._emit("topology.up", topology=self.topology, seconds=time.monotonic() - t0,
                   nodes=[{k: v for k, v in n.to_dict().items() if k != "dsn"} for n in self.nodes])

    def _forward_proxy_events(self) -> None:
        """Record the links' connection events into the history (when both exist): the fault proxy's
        ``conn.*``, the refused-connect capture's ``conn.refused`` and its ``harness.capture``
        status (docs/events.md)."""
        if self.history is None:
            return
        history = self.history
        unsubscribe = self.links.subscribe(lambda ev: history.record(ev.type, t=ev.t, **ev.fields))
        unsettle = history.add_settler(self.settle_observations)

        def stop() -> None:
            unsettle()
            unsubscribe()

        self._unsubscribe = stop

    def down(self) -> None:
        """Stop every process of the run and delete its directory (safe to call twice)."""
        self._held.close_all()
        if not self.run_id:
            return
        if self._unsubscribe is not None:
            with contextlib.suppress(Exception):  # a late observation must not stop the teardown
                self.settle_observations()
            self._unsubscribe()
            self._unsubscribe = None
        try:
            self.links.teardown()
        finally:
            down_run(self.path)
        self._emit("topology.down", topology=self.topology)
        self.run_id = None

    # ------------------------------------------------------------------------------- accessors

    @property
    def _state(self) -> RunState:
        if self._run_state is None:
            raise InvalidOperation(f"{self.topology} is not started: call up() (or use it as a context manager)")
        return self._run_state

    @_state.setter
    def _state(self, state: RunState) -> None:
        self._run_state = state

    def _node_state(self, name: str) -> NodeState:
        return self._state.node(name)

    def node(self, name: str | Node) -> Node:
        """The node called ``name`` (UnknownNodeError naming the known nodes otherwise)."""
        name = name.name if isinstance(name, Node) else name
        self._node_state(name)
        return Node(self, name)

    @property
    def nodes(self) -> list[Node]:
        """Every node, in creation order."""
        if self._run_state is None:
            return []
        return [Node(self, n.name) for n in self._run_state.nodes]

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

    def dsn(self, target_session_attrs: str = "read-write", dbname: str | None = None,
            user: str | None = None, password: str | None = None, **params: Any) -> str:
        """A libpq multi-host connection string listing every node's client-facing address, so a
        libpq client finds the principal itself (``target_session_attrs=read-write``)."""
        creds = self.engine.credentials
        dbname, user, password = dbname or creds.database, user or creds.user, password or creds.password
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
        links = self._state.links
        fault_proxy = {k: v for k, v in dataclasses.asdict(links).items() if k != "proxies"}
        fault_proxy["proxies"] = {n: dataclasses.asdict(names) for n, names in links.proxies.items()}
        return {"run": self.run_id, "backend": self._state.backend, "topology": self.topology, "mode": self.mode,
                "mirror_readable": self.mirror_readable, "engine": self.engine.name,
                "version": self._state.version, "fault_proxy": fault_proxy,
                "nodes": [n.to_dict() for n in self.nodes]}

    def check_processes(self, desc: dict[str, Any]) -> dict[str, Any]:
        """Complete a :meth:`describe` with every process checked on the machine (nodes, fault proxy,
        reaper): a node whose postmaster is gone says ``dead``, ``fault_proxy.state`` says whether
        its API answers, and ``processes`` lists each one's state (status tells the truth)."""
        from harness.topology.health import run_processes

        processes = run_processes(self.path, self._state)
        found = {p.name: p.state for p in processes if p.kind == "node"}
        for node in desc["nodes"]:
            node["state"] = found.get(node["name"], node["state"])
        proxy = next((p for p in processes if p.kind == "fault-proxy"), None)
        if proxy is not None:
            desc["fault_proxy"]["state"] = proxy.state
        desc["processes"] = [p.to_dict() for p in processes]
        return desc

    def register_process(self, name: str, pid: int, remove: bool = False) -> None:
        """Make ``pid`` part of the run (stopped by :meth:`down`, ``down --run`` and the reaper)."""
        record_process(self.path, name, pid, pid, remove=remove)
        self.refresh()

    def _hold_reservations(self, holder: int | None, claim_fault_proxy: bool = False) -> None:
        """Hand the run's port reservations to ``holder`` (its reaper), for a run that outlives the
        process which reserved them (``up --detach``, :meth:`keep`): a reservation naming a dead
        process is free for the taking while a node is stopped. With ``claim_fault_proxy`` the
        fault-proxy API port joins the run's ports when this process reserved it (a detached run's
        background proxy server), so that ``down`` releases it too."""
        from harness import ports

        with locked(self.path):
            self.refresh()
            api = urlsplit(self._state.links.url or "").port if claim_fault_proxy else None
            if api and api not in self._state.ports and ports.holder(api) == os.getpid():
                self._state.ports.append(api)
                save_state(self.path, self._state)
            if holder:
                ports.hand_over(self._state.ports, holder)

    def keep(self) -> None:
        """Leave the servers up after this process ends (``--keep-on-failure``): mark the run
        detached, so its reaper leaves it alone, and stop an in-process fault proxy cleanly."""
        with locked(self.path):
            self.refresh()
            self._state.detached = True
            save_state(self.path, self._state)
        self._hold_reservations(find_reaper(self.path))
        self.links.teardown()

    # ------------------------------------------------------------------------------ operations

    def _operation(self, fault: str, node: str | None, body: Callable[[], str | None]) -> OperationResult:
        with self._local, locked(self.path):
            self.refresh()
            wall0, t0 = time.time(), time.monotonic()
            touched = body()
            save_state(self.path, self._state)
            seconds = time.monotonic() - t0
        principal = next((n.name for n in self._state.nodes if n.role == PRINCIPAL), None)
        return OperationResult(fault, touched if touched is not None else node, wall0, wall0 + seconds,
                               seconds, principal)

    def switchover(self, target: str | None = None,
                   on_writable: Callable[[], None] | None = None) -> OperationResult:
        """Planned role swap: the principal stops (fast), ``target`` (default: the mirror) is promoted,
        the old principal is rewound and rejoins as its mirror; other standbys follow. Returns when all
        of that is done. ``on_writable`` is called as soon as the new principal accepts writes with its
        principal configuration (``switchover.writable``), while the rest goes on - where coordinated
        clients are resumed (PER-1/PER-4, the switchover stall); if it raises, the switchover still completes and
        the error is raised afterwards."""
        return self._operation("switchover", None, lambda: self._switchover(target, on_writable))

    def prepare_switchover(self, target: str | None = None) -> None:
        """CHECKPOINT on the running principal (not an operation: no state change, no event), so that
        the fast stop of the switchover to ``target`` (default: the mirror) writes a short shutdown
        checkpoint while its clients wait (the switchover stall, docs/persistent-proxy.md). Engines that can reuse
        admin sessions keep that one open for the switchover's streaming pre-check, and, with hot-standby mirrors, one
        to the node about to be promoted for its out-of-recovery wait (:mod:`harness.topology.switchover_sessions`): no
        login while the clients are drained. A principal that is not running or refuses is left to the
        switchover."""
        with self._local, locked(self.path):
            self.refresh()
            s = self._node_state(self._principal_name())
            try:
                nxt: NodeState | None = self._node_state(self._pick_target(target, "switchover"))
            except Exception:  # noqa: BLE001 - the switchover itself reports a bad target
                nxt = None
        if s.state != RUNNING:
            return
        reuse = getattr(self.engine, "reuses_admin_connections", False)
        with contextlib.suppress(Exception):  # noqa: BLE001 - only an optimisation
            if not reuse:
                self.engine.checkpoint(self.socket_dir(s.name), s.port)
                return
            conn = self.engine.admin_connect(self.socket_dir(s.name), s.port)
            self._held.put(s.name, s.pid or 0, conn)
            self.engine.checkpoint(self.socket_dir(s.name), s.port, conn=conn)
        if reuse and self.mirror_readable and nxt is not None and nxt.state == RUNNING:
            with contextlib.suppress(Exception):  # noqa: BLE001 - the wait logs in instead
                self._held.put(nxt.name, nxt.pid or 0, self.engine.admin_connect(self.socket_dir(nxt.name), nxt.port))

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

    def add_node(self) -> OperationResult:
        """Add a standby (``n<k>``) cloned from the principal, started and streaming (node add,
        :mod:`harness.topology.membership`)."""
        from harness.topology import membership

        return self._operation("add_node", None, lambda: membership.add_node(self))

    def remove_node(self, node: str) -> OperationResult:
        """Stop a standby and drop it from the run (node remove; refused for the principal, the last
        standby, or the only running standby of a synchronous principal)."""
        from harness.topology import membership

        return self._operation("remove_node", node, lambda: membership.remove_node(self, node))

    def removal_problem(self, node: str) -> str | None:
        """Why :meth:`remove_node` would refuse ``node`` as the run is now (with the fix), or None."""
        from harness.topology import membership

        self.refresh()
        return membership.removal_problem(self._state, node)

    def membership_problem(self, op: str) -> str | None:
        """Why this run cannot ``op`` (``add-node`` / ``remove-node``) at all, with what to do
        instead (the capability table of its backend); None when it can."""
        from harness.topology import membership

        return membership.unsupported(self._state, op)

    # ------------------------------------------------------------------------ implementation

    def _emit(self, type_: str, t: float | None = None, **fields: Any) -> None:
        """Record a topology event; ``t`` (monotonic) backdates it to when the action began."""
        if self.history is not None:
            self.history.record(type_, t=t, run=self.run_id, **fields)

    def _set_role(self, name: str, role: str) -> None:
        s = self._node_state(name)
        if s.role != role:
            self._emit("role.change", node=name, old_role=s.role, new_role=role)
            s.role = role

    def _require(self, name: str, *states: str) -> NodeState:
        s = self._node_state(name)
        if s.state not in states:
            raise InvalidOperation(f"node {name} is {s.state} (role {s.role}); this needs it "
                                   f"{' or '.join(states)}")
        return s

    def _partner_of_principal(self) -> str:
        others = [n for n in self._state.nodes if n.role != PRINCIPAL]
        live = [n for n in others if n.state in (RUNNING, PAUSED)]
        chosen = (live or others)[0]
        return f"{chosen.client_host}:{chosen.client_port}"

    def _principal_name(self) -> str:
        return next(n.name for n in self._state.nodes if n.role == PRINCIPAL)

    def _write_conf(self, name: str) -> Path:
        s = self._node_state(name)
        principal = self._principal_name()
        is_principal = s.role == PRINCIPAL
        cfg = NodeConfig(
            port=s.port, socket_dir=self.socket_dir(name), application_name=name,
            standby_of=None if is_principal else self.links.replication_address(self._state, name, principal),
            hot_standby=self.mirror_readable,
            synchronous=self.mode == "sync" and is_principal and not s.exposed,
            synchronous_on_promotion=self.mode == "sync" and not is_principal,
            partner=self._partner_of_principal() if is_principal else "",
        )
        conf = self.path / name / "postgresql.conf"
        conf.write_text(self.engine.config_text(cfg))
        return conf

    def _reload(self, name: str) -> None:
        s = self._node_state(name)
        self._write_conf(name)
        if s.state == RUNNING and s.pid:
            self._apply_conf(name)

    def _apply_conf(self, name: str) -> None:
        """Make the running server apply its configuration file (PostgreSQL: SIGHUP)."""
        s = self._node_state(name)
        self.engine.reload(Path(s.datadir), self.path / name / "postgresql.conf", s.pid)

    def _start_locked(self, name: str, wait: bool = True) -> None:
        s = self._node_state(name)
        if s.role == PRINCIPAL:
            self.engine.make_primary(Path(s.datadir))
        t0 = time.monotonic()
        self._spawn(name)
        if wait:
            self._wait_started(name)
            if s.role != PRINCIPAL:
                principal = self._node_state(self._principal_name())
                if principal.state == RUNNING:
                    self._wait_streaming(name, principal.name)
        self._emit("node.start", t=t0, node=name, role=s.role, seconds=time.monotonic() - t0)

    def _spawn(self, name: str) -> None:
        """Write the node's configuration and start its server (a per-server primitive, see below):
        records its PID and ``running`` in the run state."""
        s = self._node_state(name)
        conf = self._write_conf(name)
        s.pid = self.engine.start_server(Path(s.datadir), conf, self.path / name / "postgres.log", self.run_as,
                                         self.path / name)
        s.state = RUNNING
        save_state(self.path, self._state)

    def _wait_started(self, name: str) -> None:
        s = self._node_state(name)
        log = self.path / name / "postgres.log"
        retry_on_port_in_use(lambda: self.engine.wait_ready(Path(s.datadir), s.pid, log, timeout=60),
                             lambda exc: self._move_port(name, exc))
        if s.role == PRINCIPAL:
            self.engine.wait_writable(self.socket_dir(name), s.port, s.pid, log, timeout=60, datadir=Path(s.datadir))

    def _move_port(self, name: str, exc: BaseException) -> None:
        """The node's server could not bind its port (taken meanwhile by another program): give it a
        new port, re-point what leads to it, record ``node.port_retry`` and start it again (a port taken meanwhile is
        not a test failure)."""
        s = self._node_state(name)
        keeper = holder(s.port)  # a detached run's reaper holds its reservations: it gets the new one too
        old, new = s.port, allocate_port()
        if keeper is not None and keeper != os.getpid():
            hand_over([new], keeper)
        s.port, s.state, s.pid = new, STOPPED, None
        self._state.ports = [p for p in self._state.ports if p != old] + [new]
        release_port(old)
        s.client_host, s.client_port = self.links.client_address(self._state, name)
        self.links.roles_changed(self._state)  # proxies' upstreams follow the server's new port
        save_state(self.path, self._state)
        self._emit("node.port_retry", node=name, old_port=old, new_port=new,
                   reason=str(exc).strip().splitlines()[0][:200])
        for other in self._state.nodes:  # standbys' primary_conninfo, the principal's partner
            if other.name != name and other.state == RUNNING:
                self._reload(other.name)
        self._spawn(name)

    def _wait_streaming(self, standby: str, principal: str, timeout: float = 30, conn: Any = None) -> None:
        p, sb = self._node_state(principal), self._node_state(standby)
        extra = {"conn": conn} if conn is not None else {}
        state = self.engine.wait_replica(self.socket_dir(principal), p.port, standby, self.socket_dir(standby),
                                         sb.port, lambda: pid_alive(self._node_state(standby).pid), timeout, **extra)
        if state is None:
            return
        log = self.path / standby / "postgres.log"
        raise TopologyError(f"standby {standby} is not streaming from {principal} after {timeout:.0f} s "
                            f"(replication state {state}); its log:\n{self.engine.log_tail(log)}")

    # Per-server primitives: the role choreography above and below calls only these (and _spawn)
    # for process work, so another backend (harness.topology.compose) overrides them and keeps the events.
    def _make_standby(self, name: str) -> None:
        """Mark a stopped node's data directory as a standby's."""
        self.engine.make_standby(Path(self._node_state(name).datadir), self.run_as)

    def _provision_standby(self, name: str, principal: str) -> None:
        """The data directory of a node being added (node add): a clone of the running ``principal``
        (``pg_basebackup``, the engine's ``reclone``), marked a standby's."""
        p = self._node_state(principal)
        self.engine.reclone(Path(self._node_state(name).datadir), self.socket_dir(principal), p.port, self.run_as)
        self._make_standby(name)

    def _discard(self, name: str) -> None:
        """Whatever holds the server of a node leaving the run, besides its folder (node remove):
        nothing locally; a backend with containers removes its container."""

    def _halt(self, name: str, mode: str) -> None:
        """Stop the running server of ``name`` (``fast``, ``immediate``, ``smart``) and wait until it is gone."""
        self.engine.stop_server(self._node_state(name).pid, mode)

    def _hard_kill(self, name: str) -> None:
        """SIGKILL every process of the server of ``name`` and wait until they are gone."""
        pid = self._node_state(name).pid
        if not kill_group(pid, timeout=10):
            raise TopologyError(f"processes of node {name} (pgid {pid}) survived SIGKILL")

    def _stop_server(self, name: str, mode: str) -> None:
        s = self._node_state(name)
        t0 = time.monotonic()
        if s.pid and pid_alive(s.pid):
            self._halt(name, mode)
        s.state, s.pid = STOPPED, None
        self._emit("node.stop", t=t0, node=name, mode=mode, seconds=time.monotonic() - t0)

    def _kill_server(self, name: str) -> None:
        s = self._node_state(name)
        t0 = time.monotonic()
        if s.pid:
            self._hard_kill(name)
        s.state, s.pid = KILLED, None
        self._emit("node.kill", t=t0, node=name, seconds=time.monotonic() - t0)

    def partner_setting(self) -> str:
        """What the principal currently answers to ``SHOW mirroring.partner``."""
        with self.principal.admin() as conn:
            return conn.execute("SHOW mirroring.partner").fetchone()[0]


class LocalPair(LocalTopology, Pair):
    """A principal + mirror pair of local servers (not yet started: ``with LocalPair() as pair``)."""

    def __init__(self, mode: str = "sync", mirror_readable: bool = False, **kwargs: Any) -> None:
        super().__init__(nodes=2, mode=mode, mirror_readable=mirror_readable, **kwargs)


class LocalGroup(LocalTopology, Group):
    """One principal and ``nodes - 1`` standbys (N >= 3) of local servers."""

    def __init__(self, nodes: int = 3, mode: str = "sync", mirror_readable: bool = False, **kwargs: Any) -> None:
        if not isinstance(nodes, int) or nodes < 3:
            raise ConfigError(f"a group needs at least 3 nodes, not {nodes!r}; use Pair() for two")
        super().__init__(nodes=nodes, mode=mode, mirror_readable=mirror_readable, **kwargs)


api.set_default_class("pair", lambda: LocalPair)
api.set_default_class("group", lambda: LocalGroup)
