"""What every HA-manager topology (Patroni, pg_auto_failover; RULEBOOK HAM, docs/ha-managers.md)
does the same way, whatever the manager: the run directory and its state file (every process
recorded the moment it exists, so ``down``, ``down --all`` and the reaper stop it also after a
crash), ``up``'s guarded start, ``attach`` to a detached run, the ``down`` tail, the ``ham.*``
event recording (``ham.op`` start/end around each operation; docs/events.md), the link cuts, the
leader polls (HAM-1: exactly one node accepts writes) and the test login.

A manager module subclasses :class:`ManagerCluster` and keeps only what is its own: its
configuration, how it asks its manager (REST API or ``pg_autoctl``), how it stops its processes in
order, and its faults. One job: the manager topologies' shared lifecycle and bookkeeping."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from harness.errors import ConfigError, InvalidOperation, TopologyError
from harness.paths import runs_dir
from harness.ports import allocate_port, hand_over
from harness.redact import remember, write_private_file
from harness.topology import preflight
from harness.topology.patroni_history import RunHistory, keep_run_history
from harness.topology.postgres import APP_DATABASE, APP_USER, admin_connect, server_version
from harness.topology.process import RunAs, database_user, pid_alive
from harness.topology.proxied import ProxiedLinks
from harness.topology.run import down_run, load_state, locked, new_run_id, run_path, save_state, start_reaper
from harness.topology.state import (
    KILLED,
    PRINCIPAL,
    RUNNING,
    STANDBY,
    LinksState,
    NodeState,
    ProcessRecord,
    ProxyNames,
    RunState,
)
from harness.toxiproxy.client import ToxiproxyClient

C = TypeVar("C", bound="ManagerCluster")
N = TypeVar("N", bound="NamedNode")


class NamedNode(Protocol):
    """A node's entry in a run's extra file (its ports and proxies)."""

    name: str


def log_tail(log: Path, lines: int = 6, chars: int = 1200) -> str:
    """The last ``lines`` lines of a manager's log joined on one line (at most ``chars``), or ``no log``: a
    harness error names them since ``down`` removes the run folder that holds the log."""
    try:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "no log"
    return tail[-chars:]


def refuse_backend(backend: str, capability: str) -> None:
    """A manager topology runs where its capability row says (local only): on another backend a
    ConfigError with the capability table's one-line reason."""
    from harness.topology.capabilities import refusal

    why = refusal(backend, capability)
    if why:
        raise ConfigError(why)


def has_run_file(run_id: str, name: str) -> bool:
    """True when run ``run_id`` has the manager's extra file ``name`` (ConfigError when there is no such run)."""
    return (run_path(run_id) / name).exists()


def node_named(nodes: Sequence[N], name: str) -> N:
    """The entry of node ``name`` (a one-line ConfigError naming the known nodes otherwise)."""
    for n in nodes:
        if n.name == name:
            return n
    raise ConfigError(f"unknown node {name!r} (nodes: {', '.join(n.name for n in nodes)})")


class NodeProbe(Protocol):
    """What the shared polls read of one observation of a node (HAM-1 evidence)."""

    node: str
    write: str | None

    def summary(self) -> str: ...


class ManagerCluster:
    """The shared core of a manager-driven group of local PostgreSQL servers (see the module
    docstring). Subclasses set the class attributes and implement the hooks marked below."""

    #: The run's own file beside the state file (``patroni.json``, ``pgaf.json``).
    EXTRA_FILE = ""
    #: The node's link kinds, each a fault-proxy proxy, in the order they are listed.
    LINKS: tuple[str, ...] = ()
    #: The recorded process name of a node's manager is this prefix plus the node's name.
    PROCESS_PREFIX = ""
    #: How error messages call the node that accepts writes ("leader", "primary").
    LEADER_WORD = "leader"

    def __init__(self, nodes: int, history: Any, detached: bool, progress: Callable[[str], None] | None,
                 topology: str) -> None:
        self.n_nodes = nodes
        self.history = history
        self.detached = detached
        self.progress = progress or (lambda msg: None)
        self.topology = topology
        self.run_as: RunAs = database_user()
        self.run_id: str | None = None
        self.path = Path()
        self.extra: Any = None
        self._links: ProxiedLinks | None = None
        self._client: ToxiproxyClient | None = None

    # ------------------------------------------------------------------ hooks of a manager
    def _check_installed(self) -> dict[str, str]:
        """The manager's versions (MissingDependencyError when absent)."""
        raise NotImplementedError

    def _allocate_ports(self, names: list[str]) -> list[int]:
        """The run's ports besides each node's server port, in the order the manager's start wants."""
        raise NotImplementedError

    def _replication_mode(self) -> str:
        """The state file's ``mode`` (``sync`` or ``async``)."""
        return "sync"

    def _start_all(self, names: list[str], pg_ports: list[int], ports: list[int], versions: dict[str, str]) -> None:
        """Start every process of the run; return once one leader accepts writes."""
        raise NotImplementedError

    def _settings_fields(self) -> dict[str, Any]:
        """The ``ham.settings`` event's fields before ``nodes`` and ``topology`` (HAM bounds)."""
        raise NotImplementedError

    def _stop_processes(self, state: RunState) -> None:
        """Stop the manager's processes and the servers in the order the manager needs (``down``)."""
        raise NotImplementedError

    @classmethod
    def _from_extra(cls: type[C], data: dict[str, Any], nodes: int, history: Any, detached: bool) -> C:
        """A cluster object for an attached run, from its extra file's ``data``."""
        raise NotImplementedError

    def _datadir(self, name: str) -> Path:
        """Node ``name``'s data directory."""
        return self.path / name / "data"

    def _admin_socket_dir(self, name: str) -> Path:
        """Where node ``name``'s server has its Unix socket."""
        raise NotImplementedError

    def probe(self, name: str) -> NodeProbe:
        """One observation of ``name``."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------- lifecycle
    def __enter__(self: C) -> C:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    @classmethod
    def attach(cls: type[C], run_id: str, history: Any = None) -> C:
        """Drive the run ``run_id`` (``up --detach`` in another process) from this process; its own
        history unless ``history`` is given."""
        path = run_path(run_id)
        data = json.loads((path / cls.EXTRA_FILE).read_text())
        state = load_state(path)
        cluster = cls._from_extra(data, len(state.nodes), history if history is not None else RunHistory(path),
                                  state.detached)
        cluster.topology = state.topology
        cluster.run_id, cluster.path = run_id, path
        if state.links.url:
            cluster._client = ToxiproxyClient(state.links.url, timeout=5)
        return cluster

    def up(self: C) -> C:
        """Create the run (state file first, so every process is recorded the moment it exists), start
        it (:meth:`_start_all`) and record ``ham.settings`` and ``topology.up``; a failure at any step
        tears all of it down."""
        t0 = time.monotonic()
        versions = self._check_installed()
        preflight.check_up("postgres", self.n_nodes)
        version = server_version()
        self.run_id = new_run_id()
        self.path = runs_dir() / self.run_id
        self.path.mkdir(mode=0o755)
        self.run_as.chown(self.path)
        names = [f"n{i + 1}" for i in range(self.n_nodes)]
        pg_ports = [allocate_port() for _ in names]
        ports = self._allocate_ports(names)
        state = RunState(run=self.run_id, topology=self.topology, engine="postgres", version=version,
                         mode=self._replication_mode(), mirror_readable=True, created=time.time(),
                         owner_pid=os.getpid(), detached=self.detached, starting=True, ports=[*pg_ports, *ports],
                         nodes=[NodeState(name=n, role=STANDBY, port=p, client_port=p,
                                          datadir=str(self.path / n / "data"))
                                for n, p in zip(names, pg_ports, strict=True)])
        save_state(self.path, state)
        if self.history is None and self.detached:  # driven from the command line: the run's own history
            self.history = RunHistory(self.path, {"run": self.run_id, "topology": self.topology})
        try:
            reaper = start_reaper(self.path, os.getpid())
            self._start_all(names, pg_ports, ports, versions)
            if self.detached:
                self._claim_proxy_port()
                hand_over(load_state(self.path).ports, reaper)
            self._update_state(lambda s: setattr(s, "starting", False))
        except BaseException:
            self.down()
            raise
        self._emit("ham.settings", **self._settings_fields(), nodes=names, topology=self.topology)
        self._emit("topology.up", topology=self.topology, seconds=round(time.monotonic() - t0, 3),
                   leader=self.leader())
        return self

    def _claim_proxy_port(self) -> None:
        """A detached run's background fault-proxy API port joins the run's ports (``down`` frees it)."""
        from urllib.parse import urlsplit

        from harness.ports import holder

        def add(s: RunState) -> None:
            port = urlsplit(s.links.url or "").port
            if port and port not in s.ports and holder(port) == os.getpid():
                s.ports.append(port)
        self._update_state(add)

    def _register(self, record: ProcessRecord) -> None:
        """Record a process in the run state the moment it exists (``down`` and the reaper stop it)."""
        def add(s: RunState) -> None:
            s.processes = [p for p in s.processes if p.pid != record.pid] + [record]
        self._update_state(add)

    def _create_login(self, leader: str) -> None:
        """The unprivileged test login (random password, 0600 password file in the run) and the
        harness's probe table (HAM-1's writes)."""
        password = secrets.token_urlsafe(18)
        remember(password)
        with admin_connect(self._admin_socket_dir(leader), self.node_state(leader).port) as conn:
            conn.execute(f"CREATE ROLE {APP_USER} LOGIN PASSWORD '{password}'")
            conn.execute(f"CREATE DATABASE {APP_DATABASE} OWNER {APP_USER}")
            conn.execute("CREATE TABLE ham_probe (id bigserial PRIMARY KEY, node text NOT NULL, t float8 NOT NULL)")
        write_private_file(self.path / "pgpass", f"*:*:*:{APP_USER}:{password}\n")

    def down(self) -> None:
        """Stop every process of the run (:meth:`_stop_processes`, then the fault proxy), keep its
        history and delete the run directory. Safe to call twice."""
        if not self.run_id:
            return
        with contextlib.suppress(Exception):
            self._stop_processes(load_state(self.path))
        self._emit("topology.down", topology=self.topology)
        keep_run_history(self.path)
        if self._links is not None:
            with contextlib.suppress(Exception):
                self._links.teardown()
            self._links = None
        down_run(self.path)
        self.run_id = None

    # ----------------------------------------------------------------------------- state
    def _update_state(self, change: Callable[[RunState], None]) -> RunState:
        with locked(self.path):
            state = load_state(self.path)
            change(state)
            save_state(self.path, state)
        return state

    def state(self) -> RunState:
        """The run's current state file."""
        return load_state(self.path)

    def node_state(self, name: str) -> NodeState:
        """One node's state (UnknownNodeError naming the known nodes otherwise)."""
        return self.state().node(name)

    @property
    def names(self) -> list[str]:
        """The nodes' names, in creation order."""
        return [n.name for n in self.state().nodes]

    def _x(self) -> Any:
        if self.extra is None:
            raise InvalidOperation(f"{self.topology} is not started: call up()")
        return self.extra

    def proxy_name(self, name: str, kind: str) -> str:
        """The fault-proxy proxy of ``name``'s ``kind`` link (one of :attr:`LINKS`)."""
        if kind not in self.LINKS:
            raise ConfigError(f"unknown link {kind!r}; one of {', '.join(self.LINKS)}")
        return self._x().node(name).proxies[kind]

    def _postmaster_pid(self, name: str) -> int | None:
        try:
            pid = int((self._datadir(name) / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if pid_alive(pid) else None

    def _manager_pid(self, name: str) -> int | None:
        """The live manager process of node ``name`` (Patroni, the node's pg_autoctl), or None."""
        for p in self.state().processes:
            if p.name == f"{self.PROCESS_PREFIX}{name}" and pid_alive(p.pid):
                return p.pid
        return None

    def _set_node(self, name: str, state: str) -> None:
        def apply(s: RunState) -> None:
            s.node(name).state = state
            if state == KILLED:
                s.node(name).pid = None
        self._update_state(apply)

    def leader(self) -> str | None:
        """The one node that accepts a write now, or None (none, or more than one; HAM-1)."""
        writable = [n for n in self.names if self.probe(n).write == "ok"]
        return writable[0] if len(writable) == 1 else None

    def _leader_quick(self) -> str | None:
        with contextlib.suppress(Exception):
            return self.leader()
        return None

    def refresh_roles(self) -> None:
        """Write what the servers say into the run state: the leader as principal, postmaster PIDs."""
        leader = self.leader()
        pids = {n: self._postmaster_pid(n) for n in self.names}

        def apply(s: RunState) -> None:
            for node in s.nodes:
                node.pid = pids.get(node.name)
                if node.state != KILLED:
                    node.state = RUNNING if node.pid else node.state
                if leader is not None:
                    node.role = PRINCIPAL if node.name == leader else STANDBY
        self._update_state(apply)

    # --------------------------------------------------------------------------- waiting
    def wait_one_leader(self, timeout: float, exclude: str | None = None) -> str:
        """Wait until exactly one node accepts writes (not ``exclude``) and return it (HAM-1/HAM-3)."""
        deadline = time.monotonic() + timeout
        while True:
            probes = [self.probe(n) for n in self.names]
            writable = [p.node for p in probes if p.write == "ok"]
            if len(writable) == 1 and writable[0] != exclude:
                return writable[0]
            if time.monotonic() > deadline:
                seen = "; ".join(p.summary() for p in probes)
                raise TopologyError(f"no single {self.LEADER_WORD} accepting writes within {timeout:.0f} s ({seen})")
            time.sleep(0.2)

    # -------------------------------------------------------------------------- events
    def _emit(self, type_: str, **fields: Any) -> None:
        if self.history is not None:
            self.history.record(type_, **{"run": self.run_id, **fields})

    def _op(self, op: str, node: str | None, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run one operation between ``ham.op`` start and end events (docs/events.md); the fault
        command's result (HAM rules read the leader before and after)."""
        leader = self._leader_quick()
        wall0, t0 = time.time(), time.monotonic()
        self._emit("ham.op", op=op, node=node, phase="start", leader=leader)
        result = body()
        seconds = time.monotonic() - t0
        self.refresh_roles()
        new_leader = self._leader_quick()
        self._emit("ham.op", op=op, node=node, phase="end", leader=new_leader, seconds=round(seconds, 3),
                   **{k: v for k, v in result.items() if k not in ("leader", "seconds")})
        return {"fault": op, "node": node, "started": wall0, "seconds": seconds, "principal": new_leader,
                "previous_principal": leader, **result}

    # ---------------------------------------------------------------------- link faults
    def cut(self, name: str, kind: str) -> None:
        """Cut ``name``'s ``kind`` link (one of :attr:`LINKS`): its proxy is disabled (open
        connections drop, new ones are refused)."""
        assert self._client is not None
        self._client.disable_proxy(self.proxy_name(name, kind))
        self._emit(f"ham.{kind}.cut", node=name, was_leader=self._leader_quick() == name)

    def heal(self, name: str, kind: str) -> None:
        """Restore ``name``'s ``kind`` link."""
        assert self._client is not None
        self._client.enable_proxy(self.proxy_name(name, kind))
        self._emit(f"ham.{kind}.heal", node=name)

    def dsn(self, target_session_attrs: str = "read-write") -> str:
        """A libpq multi-host connection string over every node's client proxy for the test login
        (its password in the run's 0600 password file), so a client finds the leader itself."""
        state = self.state()
        hosts = ",".join(n.client_host for n in state.nodes)
        ports = ",".join(str(n.client_port) for n in state.nodes)
        return (f"host={hosts} port={ports} dbname={APP_DATABASE} user={APP_USER} passfile={self.path / 'pgpass'} "
                f"target_session_attrs={target_session_attrs} connect_timeout=2")

    def _proxy_node_links(self, name: str, upstreams: dict[str, str], proxies: dict[str, str],
                          listens: dict[str, str]) -> None:
        """Create node ``name``'s fault-proxy proxy of every kind in :attr:`LINKS` (to ``upstreams``),
        filling ``proxies`` and ``listens`` (kind -> proxy name / listen address)."""
        assert self._client is not None
        for kind in self.LINKS:
            proxy_name = f"fh-{self.run_id}-{name}" if kind == "client" else f"fh-{self.run_id}-{kind}-{name}"
            proxy = self._client.create_proxy(proxy_name, upstream=upstreams[kind], listen="127.0.0.1:0",
                                              node=name if kind == "client" else f"{name}:{kind}")
            proxies[kind], listens[kind] = proxy.name, proxy.listen

    def _wire_links(self, second: str) -> None:
        """Write the fault proxy and every node's proxies into the run state: the client proxy and the
        node's ``second`` link as the state's second proxy; each node's client address is its proxy."""
        links = self._links
        assert links is not None
        nodes = self._x().nodes

        def wire(s: RunState) -> None:
            s.links = LinksState(kind="toxiproxy", url=links.client.url, proxy_kind=links.proxy_kind,
                                 version=links.version, description=links.description,
                                 proxies={n.name: ProxyNames(n.proxies["client"], n.listens["client"],
                                                             n.proxies[second], n.listens[second]) for n in nodes})
            for node in s.nodes:
                host, _, port = self._x().node(node.name).listens["client"].rpartition(":")
                node.client_host, node.client_port = host, int(port)
        self._update_state(wire)
