"""Patroni topologies on the local backend (``patroni-pair``, ``patroni-group3``; RULEBOOK HAM):
one etcd member, and per node a Patroni process that runs that node's PostgreSQL 15 server. Every
role change is Patroni's own; the harness only asks (REST API) or breaks things (faults).

Every address one party uses to reach another is a fault-proxy proxy, so each link can be cut or
slowed on its own (:mod:`harness.topology.patroni_conf`):

* ``fh-<run>-<node>`` clients -> the node's server;
* ``fh-<run>-repl-<node>`` the other nodes (streaming replication, pg_rewind) -> the node's server;
* ``fh-<run>-api-<node>`` the other members -> the node's REST API;
* ``fh-<run>-dcs-<node>`` the node's Patroni -> etcd.

The run is an ordinary run directory (:mod:`harness.topology.run`): every process (etcd, each
Patroni, the fault proxy) is recorded with its process group the moment it exists, each node's
postmaster as the node's PID, so ``down``, ``down --all`` and the reaper stop all of it, also after
a crash. What only a Patroni run has (timings, proxies, ports) is in ``patroni.json`` beside the
state file. Operations record ``ham.*`` events into an optional history (docs/events.md).
One job: the Patroni topology's lifecycle and its manager-driven role operations (the lifecycle
and bookkeeping shared with pg_auto_failover are :mod:`harness.topology.manager_cluster`'s)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, InvalidOperation, MissingDependencyError, TopologyError
from harness.ports import allocate_port
from harness.redact import remember
from harness.topology import patroni_rest as rest
from harness.topology.manager_cluster import ManagerCluster, has_run_file, log_tail, node_named, refuse_backend
from harness.topology.patroni_conf import Logins, NodeAddresses, etcd_argv, node_config, write_node_config
from harness.topology.patroni_probe import Observer, Probe, observer, probe_node
from harness.topology.patroni_settings import DEFAULT_TIMING, PatroniTiming
from harness.topology.postgres import APP_DATABASE, APP_USER, pg_bindir
from harness.topology.process import (
    kill_group,
    pid_alive,
    signal_pid,
    start_ticks,
    wait_gone,
)
from harness.topology.proxied import start_proxied_links
from harness.topology.state import (
    KILLED,
    RUNNING,
    ProcessRecord,
    RunState,
)

#: The Patroni topologies ``up --topology`` knows, and their node counts.
PATRONI_TOPOLOGIES = {"patroni-pair": 2, "patroni-group3": 3}
EXTRA_FILE = "patroni.json"
PATRONI_BIN = "/usr/bin/patroni"
ETCD_BIN = "/usr/bin/etcd"
#: Proxy kinds of a node besides its client proxy, in the order they are listed.
LINKS = ("client", "repl", "api", "dcs")


#: The capability row of the Patroni topologies (harness/topology/capabilities.py).
CAPABILITY = "patroni-pair / patroni-group3"


def check_backend(backend: str) -> None:
    """The Patroni topologies run on the local backend only: on another one a ConfigError with the
    capability table's one-line reason."""
    refuse_backend(backend, CAPABILITY)


def is_patroni_run(run_id: str) -> bool:
    """True when run ``run_id`` is a Patroni topology (ConfigError when there is no such run)."""
    return has_run_file(run_id, EXTRA_FILE)


def check_installed() -> dict[str, str]:
    """The versions of Patroni and etcd (MissingDependencyError naming the package when absent)."""
    found = {}
    for name, binary, package in (("patroni", PATRONI_BIN, "patroni"), ("etcd", ETCD_BIN, "etcd-server")):
        if not Path(binary).exists():
            raise MissingDependencyError(f"{name} is not installed ({binary}); "
                                         f"apt-get install -y --no-install-recommends {package}")
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        found[name] = (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"
    return found


@dataclass
class PatroniNodeExtra:
    """What a Patroni run knows of one node besides its NodeState: its ports and proxies."""

    name: str
    pg_port: int
    api_port: int
    proxies: dict[str, str] = field(default_factory=dict)  # kind -> proxy name
    listens: dict[str, str] = field(default_factory=dict)  # kind -> proxy listen address


@dataclass
class PatroniExtra:
    """The ``patroni.json`` of a run: timings, scope, etcd ports, nodes' ports and proxies."""

    scope: str
    timing: dict[str, Any]
    etcd_client_port: int
    etcd_peer_port: int
    nodes: list[PatroniNodeExtra]
    versions: dict[str, str] = field(default_factory=dict)

    def node(self, name: str) -> PatroniNodeExtra:
        return node_named(self.nodes, name)

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "timing": self.timing, "etcd_client_port": self.etcd_client_port,
                "etcd_peer_port": self.etcd_peer_port, "versions": self.versions,
                "nodes": [vars(n) for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PatroniExtra:
        return cls(scope=data["scope"], timing=data["timing"], etcd_client_port=data["etcd_client_port"],
                   etcd_peer_port=data["etcd_peer_port"], versions=data.get("versions", {}),
                   nodes=[PatroniNodeExtra(**n) for n in data["nodes"]])


class PatroniCluster(ManagerCluster):
    """A Patroni-managed group of ``nodes`` local PostgreSQL servers over one etcd (see the module
    docstring). Use as a context manager or call :meth:`up` / :meth:`down`; :meth:`attach` drives a
    run another process started (``up --detach``)."""

    EXTRA_FILE = EXTRA_FILE
    LINKS = LINKS
    PROCESS_PREFIX = "patroni-"
    LEADER_WORD = "leader"

    def __init__(self, nodes: int = 3, timing: PatroniTiming = DEFAULT_TIMING, history: Any = None,
                 detached: bool = False, progress: Callable[[str], None] | None = None,
                 leader_first: bool = False) -> None:
        if not isinstance(nodes, int) or nodes < 2:
            raise ConfigError(f"a Patroni topology needs at least 2 nodes, not {nodes!r}")
        super().__init__(nodes, history, detached, progress,
                         "patroni-pair" if nodes == 2 else f"patroni-group{nodes}")
        self.timing = timing
        #: n1 starts alone and initialises the cluster, so it leads when ``up`` returns (suites written
        #: for a pair whose principal is n1 run unchanged under the manager)
        self.leader_first = leader_first
        self.extra: PatroniExtra | None = None

    # ---------------------------------------------------------------------------- lifecycle
    @classmethod
    def _from_extra(cls, data: dict[str, Any], nodes: int, history: Any, detached: bool) -> PatroniCluster:
        extra = PatroniExtra.from_dict(data)
        cluster = cls(nodes=nodes, timing=PatroniTiming.from_dict(extra.timing), history=history, detached=detached)
        cluster.extra = extra
        return cluster

    def _check_installed(self) -> dict[str, str]:
        return check_installed()

    def _allocate_ports(self, names: list[str]) -> list[int]:
        """Each node's REST API port, then etcd's client and peer ports."""
        return [*(allocate_port() for _ in names), allocate_port(), allocate_port()]

    def _replication_mode(self) -> str:
        return "sync" if self.timing.synchronous_mode else "async"

    def _settings_fields(self) -> dict[str, Any]:
        return self.timing.to_dict()

    def _start_all(self, names: list[str], pg_ports: list[int], ports: list[int], versions: dict[str, str]) -> None:
        """The fault proxy, etcd and every Patroni (which initialise and clone the servers); returns once
        one leader accepts writes and every replica streams."""
        api_ports, etcd_ports = ports[:len(names)], ports[len(names):]
        self.progress("starting the fault proxy")
        self._links = start_proxied_links(detached=self.detached, run_dir=self.path, register=self._register)
        self._client = self._links.client
        etcd_client, etcd_peer = etcd_ports
        nodes: list[PatroniNodeExtra] = []
        for name, pg, api in zip(names, pg_ports, api_ports, strict=True):
            upstreams = {"client": f"127.0.0.1:{pg}", "repl": f"127.0.0.1:{pg}", "api": f"127.0.0.1:{api}",
                         "dcs": f"127.0.0.1:{etcd_client}"}
            extra = PatroniNodeExtra(name, pg, api)
            self._proxy_node_links(name, upstreams, extra.proxies, extra.listens)
            nodes.append(extra)
        self.extra = PatroniExtra(scope=f"fh-{self.run_id}", timing=self.timing.to_dict(),
                                  etcd_client_port=etcd_client, etcd_peer_port=etcd_peer, nodes=nodes,
                                  versions=versions)
        (self.path / EXTRA_FILE).write_text(json.dumps(self.extra.to_dict(), indent=1))
        self._wire_links("repl")
        self.progress("starting etcd")
        self._start_etcd()
        logins = Logins(secrets.token_urlsafe(18), secrets.token_urlsafe(18))
        for secret in (logins.superuser_password, logins.replication_password):
            remember(secret)
        for n in nodes:
            node_dir = self.path / n.name
            node_dir.mkdir(mode=0o700)
            self.run_as.chown(node_dir)
            conf = node_config(self.extra.scope, NodeAddresses(n.name, n.pg_port, n.api_port, n.listens["repl"],
                                                               n.listens["api"], n.listens["dcs"]),
                               node_dir, pg_bindir(), self.timing, logins)
            path = write_node_config(node_dir / "patroni.yml", conf)
            self.run_as.chown(path)
        self.progress(f"starting Patroni on {len(nodes)} nodes ({self.topology})")
        if self.leader_first:
            self._start_patroni(nodes[0].name)
            self._wait_bootstrapped(timeout=120)
        for n in nodes[1 if self.leader_first else 0:]:
            self._start_patroni(n.name)
        leader = self._wait_bootstrapped(timeout=120)
        self.progress(f"{leader} leads; creating the test login")
        self._create_login(leader)
        self.wait_one_leader(timeout=30)
        for n in names:
            if n != leader:
                self.progress(f"waiting for {n} to stream from {leader}")
                self._wait_replica(n, timeout=120)
        if self.timing.synchronous_mode:
            self._wait_sync_standby(timeout=60)
        self.refresh_roles()

    def _spawn(self, name: str, argv: list[str], log: Path, cwd: Path) -> int:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "HOME": str(cwd)}
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                    env=env, start_new_session=True, close_fds=True, **self.run_as.popen_kwargs())
        self._register(ProcessRecord(name, proc.pid, proc.pid, start_ticks(proc.pid)))
        return proc.pid

    def _start_etcd(self) -> None:
        assert self.extra is not None
        etcd_dir = self.path / "etcd"
        etcd_dir.mkdir(mode=0o700)
        self.run_as.chown(etcd_dir)
        argv = etcd_argv(ETCD_BIN, etcd_dir / "data", self.extra.etcd_client_port, self.extra.etcd_peer_port,
                         self.extra.nodes[0].listens["dcs"])
        pid = self._spawn("etcd", argv, self.path / "etcd.log", etcd_dir)
        deadline = time.monotonic() + 30
        while rest.status(f"127.0.0.1:{self.extra.etcd_client_port}", "/health") != 200:
            if not pid_alive(pid) or time.monotonic() > deadline:
                raise TopologyError(f"etcd did not become healthy within 30 s; see {self.path / 'etcd.log'}")
            time.sleep(0.1)

    def _start_patroni(self, name: str) -> None:
        node_dir = self.path / name
        self._spawn(f"patroni-{name}", [PATRONI_BIN, str(node_dir / "patroni.yml")], node_dir / "patroni.out",
                    node_dir)

    def _admin_socket_dir(self, name: str) -> Path:
        return self.path / name

    def _stop_processes(self, state: RunState) -> None:
        """Patroni first, so that it restarts nothing; then the servers (fast shutdown). etcd and the
        fault proxy go with the run (``down_run``)."""
        for p in state.processes:
            if p.name.startswith("patroni-") and pid_alive(p.pid):
                kill_group(p.pgid or p.pid, timeout=5)
        for n in state.nodes:  # fast shutdown: the server removes its shared memory itself
            pid = self._postmaster_pid(n.name)
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + 10
        while any(self._postmaster_pid(n.name) for n in state.nodes) and time.monotonic() < deadline:
            time.sleep(0.05)

    # ----------------------------------------------------------------------------- state
    def _x(self) -> PatroniExtra:
        return super()._x()

    def api_address(self, name: str) -> str:
        """Where node ``name``'s REST API listens (the harness's own view, not through a proxy)."""
        return f"127.0.0.1:{self._x().node(name).api_port}"

    def probe(self, name: str) -> Probe:
        """One observation of ``name`` (:func:`harness.topology.patroni_probe.probe_node`)."""
        s = self.node_state(name)
        return probe_node(name, self.path / name, s.port, self.api_address(name))

    # --------------------------------------------------------------------------- waiting
    def _wait_bootstrapped(self, timeout: float) -> str:
        """The node that initialised the cluster: its server is out of recovery and ``/primary`` is 200."""
        deadline = time.monotonic() + timeout
        while True:
            for n in self.names:
                p = self.probe(n)
                if p.recovery is False and p.api_primary == 200:
                    return n
            if time.monotonic() > deadline:
                raise TopologyError(f"Patroni did not bootstrap a leader within {timeout:.0f} s "
                                    f"(see {self.path}/n*/patroni.log)")
            time.sleep(0.2)

    def _wait_replica(self, name: str, timeout: float) -> None:
        """Wait until Patroni's ``/replica`` answers 200 on ``name``; the error carries the tail of the
        node's Patroni log, since ``down`` removes the run folder that holds it."""
        deadline = time.monotonic() + timeout
        while rest.status(self.api_address(name), "/replica") != 200:
            if time.monotonic() > deadline:
                log = self.path / name / "patroni.log"
                raise TopologyError(f"{name} is not a streaming replica after {timeout:.0f} s "
                                    f"(see {log}; its last lines: {log_tail(log)})")
            time.sleep(0.2)

    def sync_standby(self) -> str | None:
        """The node Patroni names synchronous standby now (``GET /sync`` 200), or None - in
        synchronous_mode the only node Patroni may promote (HAM-3 / HAM-4)."""
        for n in self.names:
            if rest.status(self.api_address(n), "/sync") == 200:
                return n
        return None

    def wait_sync_standby(self, timeout: float = 60) -> str:
        """Wait until Patroni names a synchronous standby (synchronous_mode) and return it."""
        return self._wait_sync_standby(timeout)

    def _wait_sync_standby(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            for n in self.names:
                if rest.status(self.api_address(n), "/sync") == 200:
                    return n
            if time.monotonic() > deadline:
                raise TopologyError(f"no synchronous standby after {timeout:.0f} s")
            time.sleep(0.2)

    def failover_budget(self) -> float:
        """How long a fault command waits for a new leader: HAM-3's documented bound (ttl +
        loop_wait) plus 30 s for the promotion on a loaded machine."""
        return self.timing.ttl + self.timing.loop_wait + 30

    # ---------------------------------------------------------------------- operations
    def switchover(self, target: str | None = None, wait: bool = True) -> dict[str, Any]:
        """Planned switchover through Patroni (``POST /switchover`` on the leader); with ``wait``,
        returns once the target accepts writes (the switchover is then done) and, for up to 60 s
        more, the former leader streams from it. A former leader that has not rejoined by then is
        reported in the result (``former_leader``), not raised: whether it rejoins is HAM-6's to
        judge, and Patroni was seen leaving one "demote in progress" for minutes on a loaded machine."""
        def body() -> dict[str, Any]:
            old = self.wait_one_leader(timeout=30)
            candidate = target or self._healthy_replica(exclude=old)
            code, text = rest.send(self.api_address(old), "POST", "/switchover",
                                   {"leader": old, "candidate": candidate})
            for _ in range(3):  # etcd slow on a loaded machine: Patroni could not write the key, nothing began
                if code != 503 or "failed to write" not in text:
                    break
                time.sleep(1.0)
                code, text = rest.send(self.api_address(old), "POST", "/switchover",
                                       {"leader": old, "candidate": candidate})
            if code != 200:
                raise InvalidOperation(f"Patroni refused the switchover {old} -> {candidate}: {code} "
                                       f"{text.strip()[:300]}")
            if wait:
                self.wait_one_leader(timeout=self.failover_budget(), exclude=old)
                try:
                    self._wait_replica(old, timeout=60)
                    rejoined = "streaming"
                except TopologyError as exc:
                    rejoined = f"not streaming yet: {exc}"
                return {"from": old, "to": candidate, "patroni": text.strip()[:200], "former_leader": rejoined}
            return {"from": old, "to": candidate, "patroni": text.strip()[:200]}
        return self._op("switchover", target, body)

    def failover(self, target: str | None = None) -> dict[str, Any]:
        """Manual failover through Patroni (``POST /failover`` with a candidate, sent to the candidate)."""
        def body() -> dict[str, Any]:
            old = self._leader_quick()
            candidate = target or self._healthy_replica(exclude=old)
            code, text = rest.send(self.api_address(candidate), "POST", "/failover", {"candidate": candidate})
            if code != 200:
                raise InvalidOperation(f"Patroni refused the failover to {candidate}: {code} {text.strip()[:300]}")
            self.wait_one_leader(timeout=self.failover_budget(), exclude=old)
            return {"from": old, "to": candidate}
        return self._op("failover", target, body)

    def _healthy_replica(self, exclude: str | None) -> str:
        """A replica Patroni accepts as candidate: in synchronous_mode the synchronous standby
        (``/sync`` 200; Patroni refuses any other), else the first healthy one (``/replica`` 200)."""
        if self.timing.synchronous_mode:
            for n in self.names:
                if n != exclude and rest.status(self.api_address(n), "/sync") == 200:
                    return n
        for n in self.names:
            if n != exclude and rest.status(self.api_address(n), "/replica") == 200:
                return n
        raise InvalidOperation("no healthy replica to hand the leader role to (every /replica answers non-200)")

    def kill(self, name: str, wait: bool = True) -> dict[str, Any]:
        """Machine loss of ``name``: its Patroni and its PostgreSQL server die (SIGKILL, both process
        groups at once). With ``wait``, returns once one other node accepts writes (HAM-3)."""
        def body() -> dict[str, Any]:
            was_leader = self._leader_quick() == name
            sync = self.sync_standby()
            self._kill_patroni(name)
            self._kill_postmaster(name)
            self._set_node(name, KILLED)
            self._emit("ham.kill", node=name, was_leader=was_leader, what="patroni+postgres", sync_standby=sync)
            out: dict[str, Any] = {"was_leader": was_leader, "sync_standby": sync}
            if wait and was_leader and self.timing.synchronous_mode and sync is None:
                raise InvalidOperation(f"{name} was lost with no synchronous standby named: in synchronous_mode "
                                       "Patroni promotes no other node (start it again with 'fault start')")
            if wait:
                out["new_leader"] = self.wait_one_leader(timeout=self.failover_budget(), exclude=name)
            return out
        return self._op("kill", name, body)

    def kill_manager(self, name: str, wait: bool = False) -> dict[str, Any]:
        """Patroni of ``name`` dies (SIGKILL); its PostgreSQL server keeps running."""
        def body() -> dict[str, Any]:
            was_leader = self._leader_quick() == name
            sync = self.sync_standby()
            self._kill_patroni(name)
            self._emit("ham.kill", node=name, was_leader=was_leader, what="patroni", sync_standby=sync)
            out: dict[str, Any] = {"was_leader": was_leader}
            if wait:
                out["new_leader"] = self.wait_one_leader(timeout=self.failover_budget())
            return out
        return self._op("kill-manager", name, body)

    def _kill_postmaster(self, name: str) -> None:
        """SIGKILL the node's postmaster (its group, when it leads one) and wait until it is gone;
        its children notice the postmaster's death and exit by themselves."""
        pm = self._postmaster_pid(name)
        if not pm:
            return
        try:
            leads = os.getpgid(pm) == pm
        except ProcessLookupError:
            return
        if leads:
            kill_group(pm, timeout=10)
        else:
            signal_pid(pm, signal.SIGKILL)
            wait_gone(pm, timeout=10)
        if self._postmaster_pid(name):
            raise TopologyError(f"the postmaster of {name} (pid {pm}) survived SIGKILL")

    def _kill_patroni(self, name: str) -> None:
        for p in self.state().processes:
            if p.name == f"patroni-{name}" and pid_alive(p.pid):
                kill_group(p.pgid or p.pid, timeout=10)
        self._update_state(lambda s: setattr(s, "processes", [p for p in s.processes if p.name != f"patroni-{name}"]))

    def start(self, name: str, wait: bool = True) -> dict[str, Any]:
        """Start the Patroni of ``name`` again (it starts or adopts the server and rejoins, with
        pg_rewind when it diverged: HAM-6). With ``wait``, returns once it is a streaming replica or
        the leader."""
        def body() -> dict[str, Any]:
            if self._manager_pid(name):
                raise InvalidOperation(f"Patroni of {name} is running already")
            self._start_patroni(name)
            self._set_node(name, RUNNING)
            self._emit("ham.start", node=name)
            if wait:
                deadline = time.monotonic() + 120
                while (rest.status(self.api_address(name), "/replica") != 200
                       and rest.status(self.api_address(name), "/primary") != 200):
                    if time.monotonic() > deadline:
                        raise TopologyError(f"{name} did not rejoin within 120 s (see {self.path / name})")
                    time.sleep(0.2)
            return {}
        return self._op("start", name, body)

    def partition_dcs(self, name: str, hold: float | None = None, wait: bool = True) -> dict[str, Any]:
        """Cut ``name`` from etcd. With ``hold``: heal after that many seconds; then (``wait``)
        return once one node accepts writes. Without ``hold`` the cut stays (``heal_dcs``)."""
        def body() -> dict[str, Any]:
            was_leader = self._leader_quick() == name
            self.cut(name, "dcs")
            if hold is not None:
                time.sleep(hold)
                self.heal(name, "dcs")
            out: dict[str, Any] = {"hold": hold, "was_leader": was_leader}
            if wait:  # a leader cut for good must give way (HAM-2): wait for another one
                exclude = name if was_leader and hold is None else None
                out["leader_after"] = self.wait_one_leader(timeout=self.failover_budget(), exclude=exclude)
            return out
        return self._op("partition-dcs", name, body)

    def heal_dcs(self, name: str) -> dict[str, Any]:
        """Restore ``name``'s link to etcd."""
        return self._op("heal-dcs", name, lambda: (self.heal(name, "dcs"), {})[1])

    def set_pause(self, paused: bool) -> dict[str, Any]:
        """Maintenance mode on (``pause``) or off: ``PATCH /config {"pause": ...}`` on a live node."""
        def body() -> dict[str, Any]:
            for n in self.names:
                if self._manager_pid(n):
                    code, text = rest.send(self.api_address(n), "PATCH", "/config", {"pause": paused})
                    if code == 200:
                        self._emit("ham.pause" if paused else "ham.resume", node=n)
                        return {"via": n}
            raise TopologyError("no Patroni REST API accepted the maintenance-mode change")
        return self._op("pause" if paused else "resume", None, body)

    def observe(self, history: Any = None) -> Observer:
        """A background observer recording ``ham.probe`` events of every node into ``history``
        (default: this cluster's) while the ``with`` block runs (HAM-1/2/3/5/6 evidence)."""
        def nodes() -> list[tuple[str, Path, int, str]]:
            return [(n.name, self.path / n.name, n.port, self.api_address(n.name)) for n in self.state().nodes]
        return observer(nodes, history if history is not None else self.history)

    def describe(self) -> dict[str, Any]:
        """The CLI JSON shape: run, topology, timings, nodes with their addresses and proxies."""
        x = self._x()
        state = self.state()
        creds = f"passfile={self.path / 'pgpass'}"
        return {"run": self.run_id, "backend": "local", "topology": self.topology, "mode": state.mode,
                "mirror_readable": True, "engine": "postgres", "version": state.version, "manager": "patroni",
                "versions": x.versions, "timing": x.timing, "fault_proxy": {"url": state.links.url},
                "etcd": f"127.0.0.1:{x.etcd_client_port}",
                "nodes": [{"name": n.name, "role": n.role, "state": n.state,
                           "client_address": f"{n.client_host}:{n.client_port}",
                           "server_address": f"127.0.0.1:{n.port}", "api": self.api_address(n.name),
                           "proxies": x.node(n.name).listens,
                           "dsn": f"host={n.client_host} port={n.client_port} dbname={APP_DATABASE} "
                                  f"user={APP_USER} {creds}"} for n in state.nodes]}
