"""The Patroni topologies as the ordinary suites' ``pair`` / ``group`` (``--topology patroni-pair``
/ ``patroni-group3``; docs/ha-managers.md "Client suites under the manager"): a
:class:`~harness.topology.api.Pair` or :class:`~harness.topology.api.Group` whose role swaps are
Patroni's own (:class:`~harness.topology.patroni.PatroniCluster`), so a suite's client is judged
(LPQ, DUR-1) while the manager, not the harness, moves the leader.

n1 initialises the cluster and leads when ``up`` returns (suites name n1 as the first principal).
``switchover`` is Patroni's; ``failover`` is the leader's machine loss answered by Patroni;
``rejoin`` starts the lost node's Patroni again. The operations only the harness choreography can do
(stop, kill or pause a server, membership) are refused with the reason of
:mod:`harness.topology.managed` - a ConfigError in one line, never a silent success. Replicas are hot
standbys (Patroni queries them): ``mirror_readable`` is True whatever a test asks, and the history's
meta says what was asked (``managed.mirror_readable_asked``)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, InvalidOperation, TopologyError
from harness.topology import managed
from harness.topology.api import Group, OperationResult, Pair, Topology
from harness.topology.engine import Credentials
from harness.topology.local import Node as LocalNode
from harness.topology.patroni import PatroniCluster
from harness.topology.patroni_settings import DEFAULT_TIMING
from harness.topology.postgres import APP_DATABASE, APP_USER, PostgresEngine
from harness.topology.process import start_ticks
from harness.topology.state import KILLED, PRINCIPAL, NodeState, ProcessRecord

#: How long ``rejoin`` waits for the node to stream the leader's timeline again (HAM-6's bound).
REJOIN_TIMEOUT_S = 120.0


class ManagedPostgres(PostgresEngine):
    """PostgreSQL (LPQ / DUR-1 clients' login) whose test login is the Patroni run's own (random password in the
    run's 0600
    password file) instead of the template's."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    @property
    def credentials(self) -> Credentials:  # type: ignore[override]
        """The run's test login (LPQ / DUR-1 clients)."""
        return self._credentials


def run_credentials(path: Path) -> Credentials:
    """The test login (LPQ-5, DUR-1 writers) of the Patroni run in ``path`` (its ``pgpass`` line
    ``*:*:*:user:password``)."""
    try:
        line = (path / "pgpass").read_text().splitlines()[0]
    except (OSError, IndexError):
        raise TopologyError(f"the Patroni run's password file {path / 'pgpass'} is missing") from None
    fields = line.split(":", 4)
    if len(fields) != 5:
        raise TopologyError(f"the Patroni run's password file {path / 'pgpass'} has no login line")
    return Credentials(fields[3] or APP_USER, fields[4], APP_DATABASE, passfile=str(path / "pgpass"))


class PatroniNode(LocalNode):
    """One node of a manager topology (LPQ evidence: the local node view; its role named as a pair's or a group's)."""

    @property
    def role(self) -> str:
        """``principal``; the other node of a pair is its ``mirror``, of a group a ``standby`` (LPQ-4 evidence)."""
        role = self._s.role
        if role == PRINCIPAL:
            return role
        return "mirror" if isinstance(self._topology, Pair) else "standby"


class ManagedTopology(Topology):
    """The Topology API over a :class:`PatroniCluster` (DUR-1 / LPQ under HAM; see the module docstring)."""

    manager = "patroni"

    def __init__(self, nodes: int, *, mode: str = "sync", mirror_readable: bool = True, history: Any = None,
                 links: Any = "proxy", detached: bool = False, progress: Callable[[str], None] | None = None,
                 engine: Any = None) -> None:
        if mode not in ("sync", "async"):
            raise ConfigError(f"mode must be sync or async, not {mode!r}")
        if links != "proxy":
            raise ConfigError("a Patroni topology brings its own fault proxy for every link: pass links='proxy'")
        timing = dataclasses.replace(DEFAULT_TIMING, synchronous_mode=mode == "sync")
        self.cluster = PatroniCluster(nodes=nodes, timing=timing, history=history, detached=detached,
                                      progress=progress, leader_first=True)
        self.topology = self.cluster.topology
        self.mode = mode
        self.mirror_readable = True  # Patroni's replicas are hot standbys (it queries them)
        self.mirror_readable_asked = mirror_readable
        self.history = history
        self.run_id = None
        self.path = Path()
        self._unsubscribe: Callable[[], None] | None = None
        self._engine: PostgresEngine | None = None

    # ------------------------------------------------------------------------------ lifecycle
    def up(self) -> ManagedTopology:
        """Start Patroni's cluster (HAM; n1 leading), wire the fault proxy's events into the history."""
        self.cluster.up()
        self.run_id, self.path = self.cluster.run_id, self.cluster.path
        self._engine = ManagedPostgres(run_credentials(self.path))
        links = self.cluster._links
        assert links is not None
        links.setup(self.cluster.state())  # the proxies exist: names and capture targets only
        self.links = links
        if self.history is not None:
            history = self.history
            history.meta.setdefault("managed", {"manager": self.manager, "topology": self.topology,
                                                "mirror_readable_asked": self.mirror_readable_asked})
            unsubscribe = links.subscribe(lambda ev: history.record(ev.type, t=ev.t, **ev.fields))
            unsettle = history.add_settler(self.settle_observations)

            def stop() -> None:
                unsettle()
                unsubscribe()
            self._unsubscribe = stop
        return self

    def down(self) -> None:
        """Stop everything (OBS-1; Patroni first, then the servers, etcd and the fault proxy)."""
        if self._unsubscribe is not None:
            with contextlib.suppress(Exception):
                self.settle_observations()
            self._unsubscribe()
            self._unsubscribe = None
        self.cluster.down()
        self.run_id = None

    def keep(self) -> None:
        """Leave the servers and Patroni up (``--keep-on-failure``, OBS-1 evidence): the run is marked detached so its
        reaper leaves it; ``failover-harness down --run ID`` cleans it. The fault proxy runs in this
        process and ends with it, and every Patroni link goes through it: a kept run's nodes lose
        etcd and their replication, so they are left for their logs and data directories, not as
        a working cluster."""
        self.cluster._update_state(lambda s: setattr(s, "detached", True))
        self.cluster.run_id = None  # this process's down() leaves it alone

    # ---------------------------------------------------------------------------------- views
    @property
    def engine(self) -> PostgresEngine:  # type: ignore[override]
        """PostgreSQL with the run's test login (LPQ / DUR-1 clients)."""
        if self._engine is None:
            raise InvalidOperation(f"{self.topology} is not started: call up()")
        return self._engine

    def _node_state(self, name: str) -> NodeState:
        return self.cluster.node_state(name)

    def socket_dir(self, name: str) -> Path:
        """Where node ``name``'s server has its Unix socket (LPQ-4's server view; Patroni's
        ``unix_socket_directories``)."""
        return self.path / name

    @property
    def nodes(self) -> list[PatroniNode]:  # type: ignore[override]
        """Every node in creation order (LPQ host lists)."""
        return [PatroniNode(self, n) for n in self.cluster.names]  # type: ignore[arg-type]

    def node(self, name: Any) -> PatroniNode:  # type: ignore[override]
        """The node called ``name`` (UnknownNodeError naming the nodes; LPQ host lists)."""
        name = getattr(name, "name", name)
        self.cluster.node_state(name)  # UnknownNodeError naming the nodes
        return PatroniNode(self, name)  # type: ignore[arg-type]

    @property
    def principal(self) -> PatroniNode:  # type: ignore[override]
        """HAM-1: the one node that accepts a write now (the servers' own answer)."""
        self.refresh()
        for n in self.nodes:
            if n.role == PRINCIPAL:
                return n
        raise TopologyError(f"no node of {self.topology} accepts writes now")

    @property
    def standbys(self) -> list[PatroniNode]:  # type: ignore[override]
        """Every node but the leader (LPQ-4's standbys)."""
        leader = self.principal.name
        return [n for n in self.nodes if n.name != leader]

    @property
    def mirror(self) -> PatroniNode:  # type: ignore[override]
        """HAM-4: the synchronous standby Patroni names (synchronous mode), else the first running standby."""
        sync = self.cluster.sync_standby()
        if sync is not None:
            return self.node(sync)
        running = [n for n in self.standbys if n.state != KILLED]
        if not running:
            raise TopologyError(f"{self.topology} has no running standby")
        return running[0]

    def dsn(self, target_session_attrs: str = "read-write", **params: Any) -> str:
        """LPQ-1 / DUR-1: a libpq multi-host string over every node's client proxy, in node order, with the test
        login."""
        creds = self.engine.credentials
        nodes = self.nodes
        hosts = ",".join(str(n.client_address[0]) for n in nodes)
        ports = ",".join(str(n.client_address[1]) for n in nodes)
        extra = "".join(f" {k}={v}" for k, v in params.items())
        return (f"host={hosts} port={ports} dbname={creds.database} user={creds.user} password={creds.password} "
                f"target_session_attrs={target_session_attrs} connect_timeout=2{extra}")

    def describe(self) -> dict[str, Any]:
        """The Patroni run's description (HAM settings, manager, nodes), with the fault proxy's."""
        desc = self.cluster.describe()
        links = self.cluster._links
        if links is not None:
            desc["fault_proxy"] = {"url": links.client.url, "kind": "toxiproxy", "proxy_kind": links.proxy_kind,
                                   "version": links.version, "description": links.description}
        desc["mirror_readable_asked"] = self.mirror_readable_asked
        return desc

    def refresh(self) -> None:
        """HAM-1: re-read the roles from the servers themselves (the leader is whoever accepts a write)."""
        self.cluster.refresh_roles()

    def register_process(self, name: str, pid: int, remove: bool = False) -> None:
        """OBS-1: make a process started in front of the topology part of the run (teardown stops it)."""
        if remove:
            self.cluster._update_state(lambda s: setattr(s, "processes", [p for p in s.processes if p.pid != pid]))
            return
        self.cluster._register(ProcessRecord(name, pid, None, start_ticks(pid)))

    def partner_setting(self) -> str:
        """MIR-9's published partner: refused under the manager (ConfigError with the reason)."""
        raise ConfigError(f"partner_setting on {self.topology}: {managed.operation_refusal('partner_setting')}")

    # ------------------------------------------------------------------------- operations
    @staticmethod
    def _result(r: dict[str, Any]) -> OperationResult:
        started = float(r.get("started") or time.time())
        seconds = float(r.get("seconds") or 0.0)
        return OperationResult(str(r.get("fault")), r.get("node"), started, started + seconds, seconds,
                               r.get("principal"))

    def switchover(self, target: str | None = None,
                   on_writable: Callable[[], None] | None = None) -> OperationResult:
        """DUR-1 / HAM-6: Patroni's switchover to ``target`` (default: the node Patroni accepts); ``on_writable`` is
        called once the new leader accepts writes (after the former leader's rejoin was waited for)."""
        if self.mode == "sync":
            self.cluster.wait_sync_standby(timeout=60)
        result = self._result(self.cluster.switchover(target))
        if on_writable is not None:
            on_writable()
        return result

    def prepare_switchover(self, target: str | None = None) -> None:
        """Nothing to prepare (PER-1's hook): Patroni runs the switchover."""

    def failover(self, target: str | None = None) -> OperationResult:
        """HAM-3 / DUR-1: the leader's machine lost; Patroni promotes a replica (in synchronous mode only its
        synchronous standby: a ``target`` that is not it is refused before anything happens)."""
        leader = self.cluster.wait_one_leader(timeout=60)
        if self.mode == "sync":
            sync = self.cluster.wait_sync_standby(timeout=60)
            if target is not None and target != sync:
                raise InvalidOperation(f"failover to {target}: in synchronous mode Patroni promotes only its "
                                       f"synchronous standby ({sync})")
        r = self.cluster.kill(leader)
        return self._result({**r, "fault": "failover", "node": target})

    def rejoin(self, node: str | None = None) -> OperationResult:
        """HAM-6: start the lost node's Patroni again and wait until it streams the leader's timeline."""
        if node is None:
            lost = [n.name for n in self.nodes if n.state == KILLED]
            if not lost:
                raise InvalidOperation("rejoin: no node is down")
            node = lost[0]
        r = self.cluster.start(node)
        leader = self.cluster.wait_one_leader(timeout=60)
        timeline = self.cluster.probe(leader).timeline or 0
        deadline = time.monotonic() + REJOIN_TIMEOUT_S
        while True:
            p = self.cluster.probe(node)
            if p.streaming and (p.timeline or 0) >= timeline:
                break
            if time.monotonic() > deadline:
                raise TopologyError(f"rejoin: {node} does not stream timeline {timeline} after "
                                    f"{REJOIN_TIMEOUT_S:.0f} s ({p.summary()})")
            time.sleep(0.3)
        if self.mode == "sync":
            self.cluster.wait_sync_standby(timeout=60)
        return self._result({**r, "fault": "rejoin", "node": node})

    def _refuse(self, op: str) -> OperationResult:
        raise ConfigError(f"{op} on {self.topology}: {managed.operation_refusal(op)}")

    def stop(self, node: str, mode: str = "fast") -> OperationResult:
        """Refused under the manager (OBS-1: a one-line ConfigError with the reason)."""
        return self._refuse("stop")

    def start(self, node: str) -> OperationResult:
        """Refused under the manager (OBS-1: a one-line ConfigError with the reason)."""
        return self._refuse("start")

    def kill(self, node: str) -> OperationResult:
        """Refused under the manager (OBS-1: a one-line ConfigError with the reason)."""
        return self._refuse("kill")

    def pause(self, node: str, scope: str = "postmaster") -> OperationResult:
        """Refused under the manager (OBS-1: a one-line ConfigError with the reason)."""
        return self._refuse("pause")

    def resume(self, node: str) -> OperationResult:
        """Refused under the manager (OBS-1: a one-line ConfigError with the reason)."""
        return self._refuse("resume")

    def add_node(self) -> OperationResult:
        """Refused under the manager (PER-1: a one-line ConfigError with the reason)."""
        return self._refuse("add_node")

    def remove_node(self, node: str) -> OperationResult:
        """Refused under the manager (PER-1: a one-line ConfigError with the reason)."""
        return self._refuse("remove_node")

    def membership_problem(self, op: str) -> str | None:
        """Why ``op`` (PER-1's node add / remove) cannot run under the manager."""
        return managed.operation_refusal(op.replace("-", "_"))


class PatroniPair(ManagedTopology, Pair):
    """``patroni-pair`` as a suite's ``pair`` (DUR-1, LPQ-1 ... LPQ-5)."""


class PatroniGroup(ManagedTopology, Group):
    """``patroni-group3`` as a suite's ``group`` (DUR-1, LPQ-6)."""


def build(nodes: int, **kwargs: Any) -> ManagedTopology:
    """A not-yet-started manager topology (DUR-1 / LPQ under HAM) of ``nodes`` nodes (a Pair for two, a Group for more);
    ``kwargs`` are the ``@pytest.mark.topology`` keywords (mode, mirror_readable, links)."""
    if nodes == 2:
        return PatroniPair(nodes, **kwargs)
    return PatroniGroup(nodes, **kwargs)
