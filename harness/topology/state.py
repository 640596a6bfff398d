"""The typed state of one run (``<run dir>/state.json``): the topology's nodes with their roles,
states, PIDs and ports, the fault-proxy wiring, and every extra process the run owns.

Only :mod:`harness.topology` reads or writes it; every other layer asks the topology (``Node``,
``Topology.describe()``, ``Links``) instead. The JSON form is stable: a run started by one version of
the CLI can be driven (``fault --run``) and torn down (``down``) by another process."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from harness.errors import ConfigError, UnknownNodeError

PRINCIPAL, MIRROR, STANDBY = "principal", "mirror", "standby"
RUNNING, STOPPED, KILLED, PAUSED = "running", "stopped", "killed", "paused"


@dataclass
class NodeState:
    """One database node: its name, role (principal / mirror / standby), process state and addresses."""

    name: str
    role: str
    state: str = STOPPED
    pid: int | None = None
    port: int = 0
    client_host: str = "127.0.0.1"
    client_port: int = 0
    datadir: str = ""
    needs_rewind: bool = False
    exposed: bool = False  # a sync principal running without a mirror (commits go on, DUR-1 exposed)
    exposed_since: float | None = None  # time.monotonic() the exposed window began (exposure.start)
    paused_scope: str | None = None


@dataclass
class ProxyNames:
    """The two fault proxies of a node: clients -> the node, and the node (as a standby) -> the principal."""

    client: str
    client_listen: str
    replication: str
    replication_listen: str


@dataclass
class LinksState:
    """How clients and standbys reach the nodes: ``direct`` or through a Toxiproxy(-compatible) server."""

    kind: str = "direct"
    url: str | None = None
    proxy_kind: str | None = None
    version: str | None = None
    description: str = ""
    proxies: dict[str, ProxyNames] = field(default_factory=dict)


@dataclass
class ProcessRecord:
    """A process the run owns besides its database servers (fault-proxy server, pooler, proxy)."""

    name: str
    pid: int
    pgid: int | None = None
    #: the process's start time (harness.topology.process.start_ticks) when recorded: ``down`` signals
    #: the PID only while it still names that process (a PID is reused once its process is gone)
    started: int | None = None


@dataclass
class EndpointRecord:
    """A long-running client attached to the run (``persistent-proxy --run``, ``pgbouncer --run``):
    where applications connect (``listen``, ``dsn`` without a password), its control address
    (``admin``: the proxy's HTTP admin API or pgbouncer's console) and what the run's faults need to
    coordinate it (``token_file``, ``dir``, ``mode``). ``pid`` is also in ``processes`` (``down``)."""

    name: str
    kind: str
    listen: str
    dsn: str
    pid: int
    admin: str | None = None
    token_file: str | None = None
    dir: str | None = None
    mode: str | None = None
    backend: str = "server"
    workers: int = 1  # worker processes of a reference proxy (``--workers``; pid is the supervisor's)

    def public(self) -> dict[str, Any]:
        """The form ``status --json`` prints (no token, no password: no secret in any output)."""
        return {"name": self.name, "kind": self.kind, "listen": self.listen, "admin": self.admin,
                "dsn": self.dsn, "backend": self.backend, "pid": self.pid, "workers": self.workers}


@dataclass
class RunState:
    """Everything ``down`` and another process need to know about a run."""

    run: str
    topology: str
    engine: str
    version: str
    mode: str
    mirror_readable: bool
    created: float
    owner_pid: int
    detached: bool = False
    #: True from the run directory's creation until ``up`` has finished: a run whose ``up`` died
    #: half-way is torn down by its reaper even when it was to be detached (docs/topology.md)
    starting: bool = False
    backend: str = "local"  # where the nodes run: local processes or compose containers
    links: LinksState = field(default_factory=LinksState)
    ports: list[int] = field(default_factory=list)
    processes: list[ProcessRecord] = field(default_factory=list)
    nodes: list[NodeState] = field(default_factory=list)
    endpoints: list[EndpointRecord] = field(default_factory=list)
    removed_nodes: list[str] = field(default_factory=list)  # names of removed nodes (never reused)

    # ------------------------------------------------------------------------------ lookups
    def node(self, name: str) -> NodeState:
        """The node called ``name`` (UnknownNodeError naming the known nodes otherwise)."""
        for n in self.nodes:
            if n.name == name:
                return n
        known = ", ".join(n.name for n in self.nodes)
        raise UnknownNodeError(f"unknown node {name!r} in run {self.run} (nodes: {known})")

    def principal(self) -> NodeState:
        """The node whose role is principal."""
        return next(n for n in self.nodes if n.role == PRINCIPAL)

    def others(self) -> list[NodeState]:
        """Every node that is not the principal."""
        return [n for n in self.nodes if n.role != PRINCIPAL]

    # ------------------------------------------------------------------------------ JSON form
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form written to ``state.json``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        """Read the form :meth:`to_dict` wrote (ConfigError naming the field when it is not one)."""
        try:
            links = dict(data.get("links") or {})
            links["proxies"] = {k: ProxyNames(**v) for k, v in (links.get("proxies") or {}).items()}
            return cls(**{**data,
                          "links": LinksState(**links),
                          "processes": [ProcessRecord(**p) for p in data.get("processes", [])],
                          "nodes": [NodeState(**n) for n in data.get("nodes", [])],
                          "endpoints": [EndpointRecord(**e) for e in data.get("endpoints", [])]})
        except (TypeError, AttributeError) as exc:
            raise ConfigError(f"run state is not one this harness wrote ({exc}); remove the run with "
                              f"'failover-harness down --all'") from None
