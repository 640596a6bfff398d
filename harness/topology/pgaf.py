"""pg_auto_failover topologies on the local backend (``pgaf-pair``, ``pgaf-group3``; RULEBOOK HAM):
one pg_autoctl monitor, and per data node a ``pg_autoctl`` keeper that runs that node's PostgreSQL
15 server. Every role change is the monitor's and the keepers'; the harness only asks (``pg_autoctl
perform ...``, ``enable maintenance``) or breaks things (faults).

Links (:mod:`harness.topology.pgaf_conf` says why the others cannot be proxied):

* ``fh-<run>-<node>`` clients -> the node's server;
* ``fh-<run>-monitor-<node>`` the node's keeper -> the monitor (its ``--monitor`` URI).

The monitor's health checks and the standbys' replication use the address each node registers,
which is the server's own port: those links are direct.

The run is an ordinary run directory (:mod:`harness.topology.run`): every pg_autoctl (the monitor's
and each keeper, each with its PostgreSQL server in its process group) is recorded with its process
group the moment it exists, each data node's postmaster as the node's PID, so ``down``, ``down
--all`` and the reaper stop all of it, also after a crash. What only a pg_auto_failover run has
(settings, proxies, ports) is in ``pgaf.json`` beside the state file. Operations record ``ham.*``
events into an optional history (docs/events.md, docs/ha-managers.md).
One job: the pg_auto_failover topology's lifecycle and its manager-driven role operations."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, InvalidOperation, MissingDependencyError, TopologyError
from harness.ports import allocate_port
from harness.topology.manager_cluster import ManagerCluster, has_run_file, log_tail, node_named, refuse_backend
from harness.topology.pgaf_conf import (
    FORMATION,
    GROUP,
    PG_AUTOCTL,
    NodePaths,
    create_monitor_argv,
    create_node_argv,
    environment,
    monitor_uri,
    run_argv,
    server_settings,
)
from harness.topology.pgaf_probe import MonitorView, PgafProbe, monitor_states, probe_node
from harness.topology.pgaf_settings import DEFAULT_SETTINGS, PgafSettings
from harness.topology.postgres import APP_DATABASE, APP_USER, admin_connect, pg_bindir
from harness.topology.process import (
    children_of,
    group_members,
    kill_group,
    parent_pid,
    pid_alive,
    signal_pid,
    spawn_server,
    start_ticks,
    wait_gone,
)
from harness.topology.proxied import start_proxied_links
from harness.topology.server_probe import Observer
from harness.topology.state import (
    KILLED,
    RUNNING,
    ProcessRecord,
    RunState,
)

#: The pg_auto_failover topologies ``up --topology`` knows, and their data-node counts.
PGAF_TOPOLOGIES = {"pgaf-pair": 2, "pgaf-group3": 3}
EXTRA_FILE = "pgaf.json"
EXTENSION_CONTROL = "/usr/share/postgresql/15/extension/pgautofailover.control"
#: Proxy kinds of a data node.
LINKS = ("client", "monitor")
#: The capability row of the pg_auto_failover topologies (harness/topology/capabilities.py).
CAPABILITY = "pgaf-pair / pgaf-group3"
#: Monitor states in which a node runs as the primary / as a standby (pg_auto_failover's state
#: machine, "Failover State Machine"); the others (draining, demoted, maintenance ...) claim neither.
PRIMARY_STATES = ("single", "wait_primary", "primary", "join_primary", "apply_settings")
STANDBY_STATES = ("secondary", "catchingup")


def check_backend(backend: str) -> None:
    """The pg_auto_failover topologies run on the local backend only: on another one a ConfigError
    with the capability table's one-line reason."""
    refuse_backend(backend, CAPABILITY)


def is_pgaf_run(run_id: str) -> bool:
    """True when run ``run_id`` is a pg_auto_failover topology (ConfigError when there is no such run)."""
    return has_run_file(run_id, EXTRA_FILE)


def check_installed() -> dict[str, str]:
    """pg_autoctl's version (MissingDependencyError naming the packages when pg_autoctl or the
    monitor's PostgreSQL 15 extension is absent)."""
    if not Path(PG_AUTOCTL).exists() or not Path(EXTENSION_CONTROL).exists():
        raise MissingDependencyError(f"pg_auto_failover is not installed ({PG_AUTOCTL}, {EXTENSION_CONTROL}); "
                                     "apt-get install -y --no-install-recommends pg-auto-failover-cli "
                                     "postgresql-15-auto-failover")
    out = subprocess.run([PG_AUTOCTL, "--version"], capture_output=True, text=True, timeout=30)
    lines = (out.stdout or out.stderr).strip().splitlines()
    return {"pg_autoctl": lines[0].strip() if lines else "?"}


@dataclass
class PgafNodeExtra:
    """What a pg_auto_failover run knows of one data node besides its NodeState: port and proxies."""

    name: str
    pg_port: int
    proxies: dict[str, str] = field(default_factory=dict)  # kind -> proxy name
    listens: dict[str, str] = field(default_factory=dict)  # kind -> proxy listen address


@dataclass
class PgafExtra:
    """The ``pgaf.json`` of a run: settings, the monitor's port, the data nodes' ports and proxies."""

    settings: dict[str, Any]
    monitor_port: int
    nodes: list[PgafNodeExtra]
    versions: dict[str, str] = field(default_factory=dict)

    def node(self, name: str) -> PgafNodeExtra:
        return node_named(self.nodes, name)

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "monitor_port": self.monitor_port, "versions": self.versions,
                "nodes": [vars(n) for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PgafExtra:
        return cls(settings=data["settings"], monitor_port=data["monitor_port"], versions=data.get("versions", {}),
                   nodes=[PgafNodeExtra(**n) for n in data["nodes"]])


class PgafCluster(ManagerCluster):
    """A pg_auto_failover formation of ``nodes`` local PostgreSQL servers and one monitor (see the
    module docstring). Use as a context manager or call :meth:`up` / :meth:`down`; :meth:`attach`
    drives a run another process started (``up --detach``)."""

    EXTRA_FILE = EXTRA_FILE
    LINKS = LINKS
    PROCESS_PREFIX = "pgaf-"
    LEADER_WORD = "primary"

    def __init__(self, nodes: int = 3, settings: PgafSettings = DEFAULT_SETTINGS, history: Any = None,
                 detached: bool = False, progress: Callable[[str], None] | None = None) -> None:
        if not isinstance(nodes, int) or nodes < 2:
            raise ConfigError(f"a pg_auto_failover topology needs at least 2 data nodes, not {nodes!r}")
        super().__init__(nodes, history, detached, progress, "pgaf-pair" if nodes == 2 else f"pgaf-group{nodes}")
        self.settings = settings
        self.extra: PgafExtra | None = None

    # ---------------------------------------------------------------------------- lifecycle
    @classmethod
    def _from_extra(cls, data: dict[str, Any], nodes: int, history: Any, detached: bool) -> PgafCluster:
        extra = PgafExtra.from_dict(data)
        cluster = cls(nodes=nodes, settings=PgafSettings.from_dict(extra.settings), history=history,
                      detached=detached)
        cluster.extra = extra
        return cluster

    def _check_installed(self) -> dict[str, str]:
        return check_installed()

    def _allocate_ports(self, names: list[str]) -> list[int]:
        """The monitor's port."""
        return [allocate_port()]

    def _settings_fields(self) -> dict[str, Any]:
        return {"manager": "pg_auto_failover", **self.settings.to_dict(), "synchronous_mode": True,
                "failover_bound_s": self.settings.failover_bound_s()}

    def _start_all(self, names: list[str], pg_ports: list[int], ports: list[int], versions: dict[str, str]) -> None:
        """The fault proxy, the monitor (with the harness's settings) and every keeper (the first
        initialises its server, the others clone it); returns once one primary accepts writes and every
        other node is a streaming secondary."""
        monitor_port, = ports
        self.progress("starting the fault proxy")
        self._links = start_proxied_links(detached=self.detached, run_dir=self.path, register=self._register)
        self._client = self._links.client
        nodes: list[PgafNodeExtra] = []
        for name, pg in zip(names, pg_ports, strict=True):
            upstreams = {"client": f"127.0.0.1:{pg}", "monitor": f"127.0.0.1:{monitor_port}"}
            extra = PgafNodeExtra(name, pg)
            self._proxy_node_links(name, upstreams, extra.proxies, extra.listens)
            nodes.append(extra)
        self.extra = PgafExtra(settings=self.settings.to_dict(), monitor_port=monitor_port, nodes=nodes,
                               versions=versions)
        (self.path / EXTRA_FILE).write_text(json.dumps(self.extra.to_dict(), indent=1))
        self._wire_links("monitor")  # a node's second proxy is its keeper -> monitor link (replication is direct)
        sock = self.socket_dir
        sock.mkdir(mode=0o755)
        self.run_as.chown(sock)
        self.progress("starting the pg_auto_failover monitor")
        self._start_monitor()
        first, *others = names
        self.progress(f"starting {first} (initialises the first server)")
        self._initdb(self.node_paths(first))
        self._spawn_keeper(first, create=True)
        self._wait_monitor_state({first: ("single",)}, timeout=120)
        self.progress(f"starting {', '.join(others)} (clones of {first})")
        for n in others:
            self._spawn_keeper(n, create=True)
        self._wait_monitor_state({first: ("primary",), **{n: ("secondary",) for n in others}}, timeout=180)
        for n in names:
            self._autoctl(self.node_paths(n), ["config", "set", "--pgdata", str(self.node_paths(n).pgdata),
                                               "timeout.network_partition_timeout",
                                               str(self.settings.network_partition_timeout_s)])
        self.progress(f"{first} is the primary; creating the test login")
        self._create_login(first)
        self.wait_one_leader(timeout=60)
        self.refresh_roles()

    def _spawn(self, name: str, argv: list[str], paths: NodePaths, log: Path) -> int:
        runtime = paths.home / "run"  # pg_autoctl's pid file goes here ($XDG_RUNTIME_DIR), else to /tmp
        runtime.mkdir(mode=0o700, exist_ok=True)
        self.run_as.chown(runtime)
        pid = spawn_server(argv, log, self.run_as, cwd=paths.home, env=environment(paths, pg_bindir()))
        self._register(ProcessRecord(name, pid, pid, start_ticks(pid)))
        return pid

    def _autoctl(self, paths: NodePaths, args: list[str], timeout: float = 120) -> str:
        """Run one short ``pg_autoctl`` command as ``paths``' node (its config and state); its output,
        or a TopologyError with its last lines."""
        out = subprocess.run([PG_AUTOCTL, *args], capture_output=True, text=True, timeout=timeout,
                             cwd=paths.home, env=environment(paths, pg_bindir()), stdin=subprocess.DEVNULL,
                             **self.run_as.popen_kwargs())
        if out.returncode != 0:
            tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-4:])
            raise TopologyError(f"pg_autoctl {' '.join(args[:2])} failed (exit {out.returncode}): {tail[-800:]}")
        return out.stdout

    def _initdb(self, paths: NodePaths) -> None:
        """A fresh data directory with the harness's server settings (:func:`pgaf_conf.server_settings`)."""
        paths.home.mkdir(mode=0o700, exist_ok=True)
        self.run_as.chown(paths.home)
        out = subprocess.run([str(pg_bindir() / "initdb"), "-D", str(paths.pgdata), "-U", "postgres", "--auth=trust",
                              "-E", "UTF8", "--locale=C"], capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL, **self.run_as.popen_kwargs())
        if out.returncode != 0:
            raise TopologyError(f"initdb {paths.pgdata} failed: {out.stderr.strip()[-500:]}")
        with open(paths.pgdata / "postgresql.auto.conf", "a", encoding="utf-8") as fh:
            fh.write(server_settings(self.socket_dir))

    def _start_monitor(self) -> None:
        """The monitor (``pg_autoctl create monitor --run``), then the harness's settings (``ALTER
        SYSTEM`` + reload), read back to check they hold."""
        paths = self.monitor_paths
        self._initdb(paths)
        pid = self._spawn("pgaf-monitor", create_monitor_argv(paths, self._x().monitor_port), paths,
                          self.path / "monitor.log")
        deadline = time.monotonic() + 60
        while True:
            try:
                with admin_connect(self.socket_dir, self._x().monitor_port, dbname="pg_auto_failover") as conn:
                    conn.execute("SELECT count(*) FROM pgautofailover.node")
                    for guc, value in self.settings.monitor_gucs().items():
                        conn.execute(f"ALTER SYSTEM SET {guc} = {int(value)}")
                    conn.execute("SELECT pg_reload_conf()")
                break
            except Exception as exc:  # not up yet, or the extension not created yet
                if not pid_alive(pid) or time.monotonic() > deadline:
                    raise TopologyError(f"the pg_auto_failover monitor did not come up within 60 s ({exc}); "
                                        f"see {self.path / 'monitor.log'}") from None
                time.sleep(0.2)
        self._check_monitor_settings()

    def _check_monitor_settings(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        want = {g: str(v) for g, v in self.settings.monitor_gucs().items()}
        while True:
            with admin_connect(self.socket_dir, self._x().monitor_port, dbname="pg_auto_failover") as conn:
                rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                                    (list(want),)).fetchall()
            have = {r[0]: r[1] for r in rows}
            if have == want:
                return
            if time.monotonic() > deadline:
                raise TopologyError(f"the monitor did not take the harness's settings: {have} (want {want})")
            time.sleep(0.1)

    def _spawn_keeper(self, name: str, create: bool) -> int:
        paths = self.node_paths(name)
        paths.home.mkdir(mode=0o700, exist_ok=True)
        self.run_as.chown(paths.home)
        self._remove_stale_pidfile(paths)
        x = self._x().node(name)
        argv = create_node_argv(paths, name, x.pg_port, x.listens["monitor"]) if create else run_argv(paths)
        return self._spawn(f"pgaf-{name}", argv, paths, paths.home / "pg_autoctl.log")

    @staticmethod
    def _remove_stale_pidfile(paths: NodePaths) -> None:
        """A SIGKILLed pg_autoctl leaves its pid file behind, and while its PostgreSQL server still runs
        in the dead pg_autoctl's process group a new ``pg_autoctl run`` takes that for a live instance and
        exits: remove the file when the pg_autoctl it names is gone."""
        for pidfile in (paths.home / "run").rglob("pg_autoctl.pid"):
            try:
                pid = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if not pid_alive(pid):
                pidfile.unlink(missing_ok=True)

    def _admin_socket_dir(self, name: str) -> Path:
        return self.socket_dir

    def _stop_processes(self, state: RunState) -> None:
        """SIGTERM to every pg_autoctl, which fast-stops its server; a server whose keeper was killed
        is fast-stopped itself; whatever is left is killed with the run (``down_run``)."""
        keepers = [p for p in state.processes if p.name.startswith("pgaf-") and pid_alive(p.pid)]
        for p in keepers:
            signal_pid(p.pid, signal.SIGTERM)
        for n in state.nodes:  # a server whose keeper was killed: fast shutdown
            pm = self._postmaster_pid(n.name)
            if pm and not self._manager_pid(n.name):
                signal_pid(pm, signal.SIGINT)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (any(pid_alive(p.pid) for p in keepers)
                                               or any(self._postmaster_pid(n.name) for n in state.nodes)):
            time.sleep(0.05)

    # ----------------------------------------------------------------------------- state
    @property
    def socket_dir(self) -> Path:
        """The run's one Unix-socket folder (every server's socket)."""
        return self.path / "sock"

    @property
    def monitor_paths(self) -> NodePaths:
        """The monitor's home and data directory."""
        return NodePaths(self.path / "monitor", self.socket_dir)

    def node_paths(self, name: str) -> NodePaths:
        """A data node's home (its pg_autoctl's config and state) and data directory."""
        return NodePaths(self.path / name, self.socket_dir)

    def _x(self) -> PgafExtra:
        return super()._x()

    def _datadir(self, name: str) -> Path:
        return self.node_paths(name).pgdata

    def monitor_view(self) -> dict[str, MonitorView]:
        """The monitor's row of every node (reported state, assigned state, health)."""
        return monitor_states(self.socket_dir, self._x().monitor_port)

    def probe(self, name: str) -> PgafProbe:
        """One observation of ``name`` (:func:`harness.topology.pgaf_probe.probe_node`)."""
        return probe_node(name, self.socket_dir, self.node_state(name).port, self._x().monitor_port)

    def failover_budget(self) -> float:
        """How long a fault command waits for a new primary: HAM-3's documented bound (detection +
        primary_demote_timeout) plus 30 s for the keepers' steps on a loaded machine."""
        return self.settings.failover_bound_s() + 30

    # --------------------------------------------------------------------------- waiting
    def _wait_monitor_state(self, want: dict[str, tuple[str, ...]], timeout: float) -> None:
        """Wait until the monitor says every node of ``want`` reported (and is assigned) one of its states."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.monitor_view()
            if all(n in view and view[n].reported in states and view[n].goal in states for n, states in want.items()):
                return
            if time.monotonic() > deadline:
                seen = ", ".join(f"{n}: {v.reported}/{v.goal}" for n, v in view.items()) or "no answer"
                raise TopologyError(f"pg_auto_failover did not reach {want} within {timeout:.0f} s (monitor: {seen}; "
                                    f"see {self.path}/*/pg_autoctl.log)")
            time.sleep(0.2)

    def _wait_rejoined(self, name: str, timeout: float) -> str:
        """Wait until ``name`` is a streaming secondary again; ``streaming`` or why not (not raised:
        HAM-6 judges the rejoin)."""
        deadline = time.monotonic() + timeout
        while True:
            p = self.probe(name)
            if p.recovery and p.streaming and p.monitor_state in STANDBY_STATES:
                return "streaming"
            if time.monotonic() > deadline:
                return f"not streaming yet after {timeout:.0f} s ({p.summary()})"
            time.sleep(0.3)

    # ---------------------------------------------------------------------- operations
    def _perform(self, action: str, target: str | None) -> str:
        """``pg_autoctl perform switchover|failover`` (or ``promotion --name target``) asked of the
        monitor with the monitor's own configuration (not through a node's monitor proxy)."""
        args = (["perform", "promotion", "--name", target] if target else ["perform", action])
        args += ["--pgdata", str(self.monitor_paths.pgdata), "--formation", FORMATION, "--wait", "60"]
        if not target:
            args += ["--group", str(GROUP)]
        out = self._autoctl(self.monitor_paths, args, timeout=120)
        return out.strip()[-200:]

    def _role_change(self, op: str, target: str | None) -> dict[str, Any]:
        def body() -> dict[str, Any]:
            old = self.wait_one_leader(timeout=30)
            if target == old:
                raise InvalidOperation(f"{target} is the primary already")
            said = self._perform(op, target)
            new = self.wait_one_leader(timeout=self.failover_budget(), exclude=old)
            return {"from": old, "to": new, "pg_autoctl": said, "former_leader": self._wait_rejoined(old, 60)}
        return self._op(op, target, body)

    def switchover(self, target: str | None = None) -> dict[str, Any]:
        """Planned switchover asked of the monitor (``pg_autoctl perform switchover``, or ``perform
        promotion --name TARGET``); returns once another node accepts writes, and reports whether the
        former primary streams from it within 60 s more (``former_leader``; HAM-6 judges it)."""
        return self._role_change("switchover", target)

    def failover(self, target: str | None = None) -> dict[str, Any]:
        """Manual failover asked of the monitor (``pg_autoctl perform failover``, or ``perform promotion
        --name TARGET``); returns as :meth:`switchover` does."""
        return self._role_change("failover", target)

    def kill(self, name: str, wait: bool = True) -> dict[str, Any]:
        """Machine loss of ``name``: its pg_autoctl and its PostgreSQL server die (SIGKILL). With
        ``wait``, returns once one other node accepts writes (HAM-3)."""
        def body() -> dict[str, Any]:
            was_leader = self._leader_quick() == name
            self._kill_keeper(name, keep_postgres=False)
            self._kill_postmaster(name)
            self._set_node(name, KILLED)
            since = time.time()
            self._emit("ham.kill", node=name, was_leader=was_leader, what="pg_autoctl+postgres")
            out: dict[str, Any] = {"was_leader": was_leader}
            if wait:
                out["new_leader"] = self.wait_one_leader(timeout=self.failover_budget(),
                                                         exclude=name if was_leader else None)
                out["monitor_steps"] = self.monitor_steps(since)
            return out
        return self._op("kill", name, body)

    def monitor_steps(self, since: float, limit: int = 24) -> list[str]:
        """The monitor's own account of the state machine since ``since`` (epoch seconds): its log lines
        that mark a node unhealthy or assign a goal state (HAM-3 evidence: where a failover's time went)."""
        try:
            lines = (self.path / "monitor.log").read_text(errors="replace").splitlines()
        except OSError:
            return []
        start = time.strftime("%H:%M:%S", time.localtime(since - 1))
        keep = [line.strip()[:220] for line in lines
                if line[:8] >= start and ("unhealthy" in line or "Setting goal state" in line)]
        return keep[:limit]

    def kill_manager(self, name: str, wait: bool = False) -> dict[str, Any]:
        """Only the pg_autoctl of ``name`` dies (SIGKILL); its PostgreSQL server keeps running."""
        def body() -> dict[str, Any]:
            was_leader = self._leader_quick() == name
            self._kill_keeper(name, keep_postgres=True)
            self._emit("ham.kill", node=name, was_leader=was_leader, what="pg_autoctl")
            out: dict[str, Any] = {"was_leader": was_leader}
            if wait:
                out["new_leader"] = self.wait_one_leader(timeout=self.failover_budget())
            return out
        return self._op("kill-manager", name, body)

    def _kill_keeper(self, name: str, keep_postgres: bool) -> None:
        """SIGKILL the pg_autoctl processes of ``name`` (its process group; with ``keep_postgres``, every
        member but the postmaster, which shares the group, and the postmaster's own children)."""
        pm = self._postmaster_pid(name)
        for p in self.state().processes:
            if p.name != f"pgaf-{name}" or not pid_alive(p.pid):
                continue
            pgid = p.pgid or p.pid
            if not keep_postgres:
                kill_group(pgid, timeout=10)
                continue
            for pid in group_members(pgid):
                if pid != pm and parent_pid(pid) != pm:
                    signal_pid(pid, signal.SIGKILL)
            for pid in group_members(pgid):
                if pid != pm and parent_pid(pid) != pm:
                    wait_gone(pid, timeout=10)
        self._update_state(lambda s: setattr(s, "processes", [p for p in s.processes if p.name != f"pgaf-{name}"]))

    def _kill_postmaster(self, name: str) -> None:
        """SIGKILL the node's postmaster (when its keeper's group did not take it) and its children with
        it - a machine loss takes every process of the node: a backend left behind would hold the old
        shared memory, and the server the keeper starts again would refuse to start beside it - and wait
        until they are gone."""
        pm = self._postmaster_pid(name)
        if not pm:
            return
        children = children_of(pm)
        for pid in (pm, *children):
            signal_pid(pid, signal.SIGKILL)
        for pid in children:
            wait_gone(pid, timeout=10)
        wait_gone(pm, timeout=10)
        if self._postmaster_pid(name):
            raise TopologyError(f"the postmaster of {name} (pid {pm}) survived SIGKILL")

    def start(self, name: str, wait: bool = True) -> dict[str, Any]:
        """Start the pg_autoctl of ``name`` again (``pg_autoctl run``: it starts or adopts the server and
        rejoins, with pg_rewind when it diverged: HAM-6). With ``wait``, returns once the monitor has
        it as a secondary or the primary again."""
        def body() -> dict[str, Any]:
            if self._manager_pid(name):
                raise InvalidOperation(f"pg_autoctl of {name} is running already")
            since = time.time()
            pid = self._spawn_keeper(name, create=False)
            self._set_node(name, RUNNING)
            self._emit("ham.start", node=name)
            if wait:
                deadline = time.monotonic() + 120
                while True:
                    p = self.probe(name)
                    row = self.monitor_view().get(name)
                    if not pid_alive(pid):
                        raise TopologyError(f"pg_autoctl of {name} exited (see "
                                            f"{self.node_paths(name).home / 'pg_autoctl.log'})")
                    if (p.recovery is not None and p.monitor_state in (*STANDBY_STATES, *PRIMARY_STATES)
                            and p.monitor_goal == p.monitor_state and row is not None
                            and (row.reported_at or 0) > since):  # reported by the new pg_autoctl
                        break
                    if time.monotonic() > deadline:
                        log = self.node_paths(name).home / "pg_autoctl.log"
                        raise TopologyError(f"{name} did not rejoin within 120 s ({p.summary()}; see {log}; its "
                                            f"last lines: {log_tail(log, lines=12, chars=2400)})")
                    time.sleep(0.2)
            return {}
        return self._op("start", name, body)

    def partition_monitor(self, name: str, hold: float | None = None) -> dict[str, Any]:
        """Cut ``name``'s keeper from the monitor (the monitor's health checks and replication, direct
        links, go on). With ``hold``: healed after that many seconds. Returns once one node accepts
        writes."""
        def body() -> dict[str, Any]:
            was_leader = self._leader_quick() == name
            self.cut(name, "monitor")
            if hold is not None:
                time.sleep(hold)
                self.heal(name, "monitor")
            return {"hold": hold, "was_leader": was_leader,
                    "leader_after": self.wait_one_leader(timeout=self.failover_budget())}
        return self._op("partition-monitor", name, body)

    def heal_monitor(self, name: str) -> dict[str, Any]:
        """Restore ``name``'s link to the monitor."""
        return self._op("heal-monitor", name, lambda: (self.heal(name, "monitor"), {})[1])

    def set_maintenance(self, name: str, on: bool) -> dict[str, Any]:
        """``pg_autoctl enable maintenance`` (with ``--allow-failover`` on the primary: the monitor
        first hands the primary role over) or ``disable maintenance`` on ``name``; returns once one
        node accepts writes (and, when ended, the monitor has ``name`` back as a secondary)."""
        def body() -> dict[str, Any]:
            paths = self.node_paths(name)
            was_leader = self._leader_quick() == name
            args = ["enable" if on else "disable", "maintenance", "--pgdata", str(paths.pgdata)]
            if on and was_leader:
                args.append("--allow-failover")
            said = self._autoctl(paths, args, timeout=180).strip()[-200:]
            self._emit("ham.maintenance", node=name, on=on, was_leader=was_leader)
            leader = self.wait_one_leader(timeout=self.failover_budget())
            out: dict[str, Any] = {"was_leader": was_leader, "leader_after": leader, "pg_autoctl": said}
            if not on:
                out["rejoined"] = self._wait_rejoined(name, 60) if leader != name else "primary"
            return out
        return self._op("maintenance" if on else "resume", name, body)

    def observe(self, history: Any = None) -> Observer:
        """A background observer recording ``ham.probe`` events of every data node into ``history``
        (default: this cluster's) while the ``with`` block runs (HAM-1/3/5/6 evidence)."""
        monitor_port = self._x().monitor_port

        def probes() -> list[Callable[[], PgafProbe]]:
            return [partial(probe_node, n.name, self.socket_dir, n.port, monitor_port) for n in self.state().nodes]
        return Observer(probes, history if history is not None else self.history)

    def describe(self) -> dict[str, Any]:
        """The CLI JSON shape: run, topology, settings, monitor, nodes with their addresses and proxies."""
        x = self._x()
        state = self.state()
        view = self.monitor_view()
        creds = f"passfile={self.path / 'pgpass'}"
        return {"run": self.run_id, "backend": "local", "topology": self.topology, "mode": state.mode,
                "mirror_readable": True, "engine": "postgres", "version": state.version,
                "manager": "pg_auto_failover", "versions": x.versions, "settings": x.settings,
                "fault_proxy": {"url": state.links.url}, "monitor": f"127.0.0.1:{x.monitor_port}",
                "nodes": [{"name": n.name, "role": n.role, "state": n.state,
                           "monitor_state": view[n.name].reported if n.name in view else None,
                           "client_address": f"{n.client_host}:{n.client_port}",
                           "server_address": f"127.0.0.1:{n.port}", "proxies": x.node(n.name).listens,
                           "dsn": f"host={n.client_host} port={n.client_port} dbname={APP_DATABASE} "
                                  f"user={APP_USER} {creds}"} for n in state.nodes]}

    def monitor_address(self) -> str:
        """The monitor's own address (the harness's requests; the keepers use their proxies)."""
        return monitor_uri(f"127.0.0.1:{self._x().monitor_port}")
