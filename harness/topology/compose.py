"""Docker Compose backend (``--backend compose``): a pair or group of PostgreSQL 15 containers behind
the real Toxiproxy 2.12 in its own container, from ``compose/pg-pair.yml`` / ``pg-group3.yml``
(MariaDB 10.11: ``mariadb-pair.yml`` / ``mariadb-group3.yml``, :mod:`harness.topology.compose_mariadb`).

* Host networking only; every server and proxy listens on 127.0.0.1 at a port from
  :func:`harness.ports.allocate_port`, passed to the compose file as variables (an env file per run),
  so parallel runs and xdist workers never collide. Project ``fh-<run>``; every container carries
  the run's labels (:mod:`harness.topology.containers` removes those of crashed runs).
* Each node's folder (``<run dir>/<node>``: data directory, ``postgresql.conf``, Unix socket, log) is
  bind-mounted at the same path, so the harness configures, promotes and administers a container's
  server the way the local backend does its own; the harness's entrypoint (``compose/fh-node.sh``)
  creates, clones and rewinds the data directory inside the container (the images' binaries), and
  every clone and rewind goes through the node's replication proxy.
* The role choreography, state file, lock and history events are the local backend's
  (:class:`~harness.topology.local.LocalTopology`); this class replaces only the per-server
  primitives - start, stop, kill, rewind - with container operations (testcontainers'
  ``DockerCompose`` brings the project up and down, the docker SDK drives single containers).
* Connection events come from Toxiproxy's log stream (:mod:`harness.topology.compose_events`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, InvalidOperation, PortInUseError, TopologyError
from harness.paths import harness_home, runs_dir
from harness.ports import PORT_ATTEMPTS, allocate_port
from harness.redact import write_private_file
from harness.resources import resource
from harness.topology import preflight
from harness.topology.capabilities import refusal
from harness.topology.compose_events import ContainerLogEvents
from harness.topology.dockerd import docker_client
from harness.topology.images import ENGINE_IMAGES, RUNTIME_IMAGES, image_for
from harness.topology.links import DirectLinks, Links
from harness.topology.local import RUN_ENGINES, LocalGroup, LocalPair, LocalTopology
from harness.topology.postgres import PostgresEngine
from harness.topology.process import RunAs, database_user, pid_alive, signal_group, signal_pid
from harness.topology.proxied import ProxiedLinks, links_of_run
from harness.topology.run import down_run, load_state, locked, new_run_id, run_path, save_state, start_reaper
from harness.topology.state import MIRROR, PRINCIPAL, RUNNING, STANDBY, LinksState, NodeState, ProxyNames, RunState
from harness.toxiproxy.client import ToxiproxyClient
from harness.toxiproxy.server_choice import FaultProxyHandle

COMPOSE_FILES = {"pg-pair": "pg-pair.yml", "pg-group3": "pg-group3.yml",
                 "mariadb-pair": "mariadb-pair.yml", "mariadb-group3": "mariadb-group3.yml"}
#: The compose file of a standby added to a running run (node add), in a project of its own.
ADDED_NODE_FILE = "pg-standby.yml"
STOP_SIGNALS = {"fast": "SIGINT", "immediate": "SIGQUIT", "smart": "SIGTERM"}
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # no Ryuk image here: cleanup is by label


def compose_file(topology: str) -> Path:
    """The compose file of a topology (``compose/<name>.yml``)."""
    if topology not in COMPOSE_FILES:
        raise ConfigError(f"no compose file for topology {topology!r}; have {', '.join(COMPOSE_FILES)}")
    return resource("compose", COMPOSE_FILES[topology])


def project_name(run_id: str) -> str:
    """The Compose project of a run."""
    return f"fh-{run_id}".lower()


def compose_env(state: RunState, run_dir: Path, images: dict[str, str], api_port: int) -> dict[str, str]:
    """The variables a compose file takes for one run: project, labels, node folders, images and
    every port (server, client proxy, replication proxy per node; the Toxiproxy API). ``images``
    maps image names (``postgres`` / ``mariadb``, ``toxiproxy``) to the image each runs."""
    env = {"FH_PROJECT": project_name(state.run), "FH_RUN": state.run, "FH_HOME": str(harness_home()),
           "FH_RUN_DIR": str(run_dir), "FH_TOXIPROXY_PORT": str(api_port)}
    for spec in RUNTIME_IMAGES:
        if spec.name in images and spec.variable:
            env[spec.variable] = images[spec.name]
    for node in state.nodes:
        names = state.links.proxies[node.name]
        key = node.name.upper()
        env[f"FH_{key}_PORT"] = str(node.port)
        env[f"FH_{key}_CLIENT_PORT"] = names.client_listen.rsplit(":", 1)[1]
        env[f"FH_{key}_REPL_PORT"] = names.replication_listen.rsplit(":", 1)[1]
    return env


def compose_project(topology: str, env_file: Path) -> Any:
    """testcontainers' ``DockerCompose`` for a run's env file: ``up --detach`` (the harness waits for
    the servers itself) and ``down --volumes --remove-orphans --timeout 0``."""
    from testcontainers.compose import DockerCompose

    class Project(DockerCompose):
        def _run_command(self, cmd: Any, context: str | None = None) -> subprocess.CompletedProcess[bytes]:
            try:
                return super()._run_command(cmd, context)
            except subprocess.CalledProcessError as exc:
                tail = (exc.stderr or b"").decode(errors="replace").strip()[-800:]
                what = " ".join(map(str, exc.cmd[2:]))
                raise TopologyError(f"{what} failed (exit {exc.returncode}): {tail}") from None

        def stop(self, down: bool = True) -> None:
            self._run_command([*self.compose_command_property, "down", "--volumes", "--remove-orphans",
                               "--timeout", "0"])

    file = compose_file(topology)
    return Project(context=str(file.parent), compose_file_name=[file.name], env_file=[str(env_file)], wait=False)


def compose_config(topology: str, env: dict[str, str]) -> str:
    """``docker compose config`` of a topology's file with ``env`` (the validation the tests run)."""
    file = compose_file(topology)
    res = subprocess.run(["docker", "compose", "-f", str(file), "config"], capture_output=True, text=True,
                         env={**os.environ, **env}, cwd=file.parent)
    if res.returncode != 0:
        raise ConfigError(f"{file.name} is not a valid compose file: {res.stderr.strip()[-600:]}")
    return res.stdout


class ComposeTopology(LocalTopology):
    """PostgreSQL containers of one Compose project, driven like local servers (module docstring).
    What differs per engine is in small methods a subclass replaces (:meth:`_bootstrap_files`,
    :meth:`_prepare_principal`, :meth:`_server_version`, :meth:`_before_stop`, ``stop_signals``)."""

    #: The signal of each stop mode, sent to the server's host PID (:meth:`_halt`).
    stop_signals = STOP_SIGNALS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not (self._links_spec in ("proxy", "direct") or self._links_spec is None):
            raise ConfigError(f"backend 'compose': {refusal('compose', 'links object')}, not a Links object")
        self._docker: Any = None
        self._compose: Any = None

    @staticmethod
    def _server_user() -> RunAs:
        """The harness itself: the containers run the servers as their own ``postgres`` user."""
        return RunAs(os.geteuid(), os.getegid(), "harness")

    # ------------------------------------------------------------------------------ lifecycle
    @classmethod
    def attach(cls, run_id: str, history: Any = None, links: Links | None = None) -> ComposeTopology:
        """Drive an existing compose run (``up --detach``, another process) from this one, as this
        class (:func:`harness.topology.compose_backend.attach` picks the engine's pair or group class)."""
        path = run_path(run_id)
        state = load_state(path)
        kwargs = {"nodes": len(state.nodes)} if issubclass(cls, LocalGroup) else {}
        topo = cls(mode=state.mode, mirror_readable=state.mirror_readable, history=history,  # type: ignore[arg-type]
                   links="direct", topology=state.topology, detached=state.detached,
                   engine=RUN_ENGINES.get(state.engine or "postgres", PostgresEngine)(), **kwargs)
        topo.run_id, topo.path, topo._state = run_id, path, state
        topo.links = links or links_of_run(state)
        topo.links.setup(state)
        return topo

    def up(self) -> ComposeTopology:
        """Write the run's folders and env file, ``docker compose up``, wait until the principal
        accepts writes and every standby streams through its replication proxy. When the Toxiproxy
        container finds a listen port of the run taken (a program outside this harness home bound it
        meanwhile), the run is torn down and brought up again on fresh ports (at most
        :data:`~harness.ports.PORT_ATTEMPTS` tries), as a local server is moved (``retry_on_port_in_use``)."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._up_once()
            except PortInUseError as exc:
                if attempt == PORT_ATTEMPTS:
                    raise
                self.progress(f"{str(exc).splitlines()[0]}; bringing the run up again on fresh ports")
        raise AssertionError("unreachable")

    def _up_once(self) -> ComposeTopology:
        t0 = time.monotonic()
        preflight.check_up(self.engine.name, self.n_nodes)  # before any container or process starts
        self._docker = docker_client()
        images = {spec.name: image_for(spec, self._docker) for spec in ENGINE_IMAGES[self.engine.name]}
        self.run_id = new_run_id()
        self.path = runs_dir() / self.run_id
        self.path.mkdir(mode=0o755)
        self._state = self._new_state(images)
        save_state(self.path, self._state)
        reaper = start_reaper(self.path, os.getpid())  # a detached run's one holds its port reservations
        try:
            with locked(self.path):
                self._prepare_folders()
                env = compose_env(self._state, self.path, images, self._api_port)
                env_file = self.path / "compose.env"
                env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
                self.progress(f"docker compose up {self.topology} ({self.mode}) as {env['FH_PROJECT']} in {self.path}")
                self._compose = compose_project(self.topology, env_file)
                started = time.monotonic()
                self._compose.start()
                self._connect_links()
                for node in self._state.nodes:
                    node.pid = self._container_pid(node.name)
                    node.state = "running"
                save_state(self.path, self._state)
                principal = self._principal_name()
                self._wait_started(principal)
                self._state.version = self._server_version(principal)
                self._prepare_principal(principal)
                for n in self._state.nodes:
                    if n.name != principal:
                        self._standby_started(n.name)
                        self._wait_streaming(n.name, principal, timeout=90)
                save_state(self.path, self._state)
                for n in self._state.nodes:  # as local: one node.start per server (here all up together)
                    self._emit("node.start", t=started, node=n.name, role=n.role, seconds=time.monotonic() - started)
            if self.detached:  # this process exits now; the run keeps its ports until 'down'
                self._hold_reservations(reaper)
            self._mark_started()
        except BaseException:
            self.down()
            raise
        self._announce_up(t0)
        return self

    def _new_state(self, images: dict[str, str]) -> RunState:
        assert self.run_id is not None
        names = [f"n{i + 1}" for i in range(self.n_nodes)]
        ports = {n: (allocate_port(), allocate_port(), allocate_port()) for n in names}  # server, client, repl
        self._api_port = allocate_port()
        run = self.run_id
        proxies = {n: ProxyNames(f"fh-{run}-{n}", f"127.0.0.1:{c}", f"fh-{run}-repl-{n}", f"127.0.0.1:{r}")
                   for n, (_, c, r) in ports.items()}
        direct = self._links_spec == "direct"
        links = (LinksState(kind="direct") if direct else
                 LinksState(kind="toxiproxy", url=f"http://127.0.0.1:{self._api_port}", proxy_kind="compose",
                            version="2.12.0", description=f"Toxiproxy container ({images['toxiproxy']}) at "
                            f"http://127.0.0.1:{self._api_port} (connection events: from its log stream)",
                            proxies=proxies))
        nodes = []
        for i, n in enumerate(names):
            server, client, _ = ports[n]
            role = PRINCIPAL if i == 0 else (MIRROR if self.n_nodes == 2 else STANDBY)
            nodes.append(NodeState(name=n, role=role, port=server, client_port=server if direct else client,
                                   datadir=str(self.path / n / "data")))
        all_ports = [p for triple in ports.values() for p in triple] + [self._api_port]
        state = RunState(run=run, topology=self.topology, engine=self.engine.name, version="15", mode=self.mode,
                         mirror_readable=self.mirror_readable, created=time.time(), owner_pid=os.getpid(),
                         detached=self.detached, starting=True, backend="compose", links=links, ports=all_ports,
                         nodes=nodes)
        if direct:  # the compose file still wires the proxies: the replication ports are needed
            state.links.proxies = proxies
        return state

    def _prepare_folders(self) -> None:
        """Each node's folder: the engine's bootstrap files, its data directory - a copy of the
        machine's cached template, as local (a cleanly shut down cluster: every copy is a valid base
        backup, so no initdb and no clone at start; without a template the entrypoint runs initdb on
        the principal and clones the standbys through their replication proxies) - its role and
        configuration (through links naming the proxies the compose file creates)."""
        bootstrap = self._bootstrap_files()
        links = self._state.links
        self.links = (DirectLinks() if links.kind == "direct" else
                      ProxiedLinks(ToxiproxyClient(links.url or "", timeout=5), "compose", links.version or "?",
                                   description=links.description))
        principal = self._principal_name()
        template_dir = getattr(self.engine, "template_dir", None)
        for node in self._state.nodes:
            folder = self.path / node.name
            folder.mkdir(mode=0o755)
            for name, text in bootstrap.items():  # two of them hold the test password
                write_private_file(folder / name, text)
            if node.name != principal and template_dir is None:
                (folder / "clone").write_text("")
            (folder / "role").write_text("principal" if node.name == principal else "standby")
            self._write_conf(node.name)
        if template_dir is not None:  # built by the database user (initdb refuses root)
            self.engine.copy_template(template_dir(database_user()), *(Path(n.datadir) for n in self._state.nodes))

    def _bootstrap_files(self) -> dict[str, str]:
        """The files the entrypoint creates a data directory from (PostgreSQL: initdb arguments,
        ``pg_hba.conf``, ...), written into each node's folder."""
        files = getattr(self.engine, "bootstrap_files", None)
        if files is None:
            raise ConfigError(f"engine {self.engine.name!r} has no container bootstrap; use --engine postgres")
        return dict(files())

    def _standby_started(self, name: str) -> None:
        """At ``up``, before waiting for a standby to stream: nothing for PostgreSQL (its entrypoint
        makes the node a standby of its replication proxy)."""

    def _connect_links(self) -> None:
        """Wait for the Toxiproxy API; follow its log for connection events (when recording)."""
        if not isinstance(self.links, ProxiedLinks):
            return
        client = self.links.client
        deadline = time.monotonic() + 30
        while not client.is_available():
            if time.monotonic() > deadline:
                raise TopologyError(f"the Toxiproxy container did not answer on {client.url} within 30 s; its log:\n"
                                    f"{self._container_log('toxiproxy')}")
            time.sleep(0.05)
        version = client.version()
        self._state.links.version = version
        wanted = {name for names in self._state.links.proxies.values() for name in (names.client, names.replication)}
        missing = wanted - set(client.proxies())
        if missing:  # e.g. a listen port bound meanwhile by a program outside this harness home
            log = self._container_log("toxiproxy")
            taken = "address already in use" in log
            raise (PortInUseError if taken else TopologyError)(
                f"the Toxiproxy container did not create {len(missing)} of the run's proxies "
                f"({', '.join(sorted(missing))}){': a listen port is taken' if taken else ''}; its log:\n{log}")
        owner = contextlib.ExitStack()
        owner.callback(client.close)
        handle = None
        if self.history is not None:
            follower = ContainerLogEvents(self._container("toxiproxy"), client.url, self._proxy_node,
                                          self._proxy_listen).start()
            owner.callback(follower.close)
            handle = FaultProxyHandle("compose", client.url, version, client, True,
                                      "derived from the container's trace log", "compose", follower.subscribe,
                                      _settle=follower.settle)
        self.links = ProxiedLinks(client, "compose", version, handle=handle, owner=owner,
                                  description=self._state.links.description)
        self.links.setup(self._state)
        self._forward_proxy_events()

    def _proxy_names(self, proxy: str) -> tuple[str, ProxyNames] | None:
        """The node and proxy names of a proxy of this run: as the run is now (a node added or
        removed since ``up``, also by another process: then the state file is read again)."""
        known = dict(self._state.links.proxies)
        if not any(proxy in (names.client, names.replication) for names in known.values()) and self.run_id:
            with contextlib.suppress(Exception):  # read only: this runs on the log follower's thread
                known = load_state(self.path).links.proxies
        return next(((node, names) for node, names in known.items() if proxy in (names.client, names.replication)),
                    None)

    def _proxy_node(self, proxy: str) -> str | None:
        """The node a proxy leads to (``nX``, or ``nX:replication``), for the log-derived events."""
        found = self._proxy_names(proxy)
        if found is None:
            return None
        node, names = found
        return node if proxy == names.client else f"{node}:replication"

    def _proxy_listen(self, proxy: str) -> str | None:
        """The configured listen address of a proxy of this run."""
        found = self._proxy_names(proxy)
        if found is None:
            return None
        _, names = found
        return names.client_listen if proxy == names.client else names.replication_listen

    def down(self) -> None:
        """Remove the run's containers and volumes (``compose down``, then the label sweep of
        :func:`~harness.topology.run.down_run`) and its folder (safe to call twice)."""
        if not self.run_id:
            return
        if self._unsubscribe is not None:
            with contextlib.suppress(Exception):  # as local: a late observation must not stop the teardown
                self.settle_observations()
            self._unsubscribe()
            self._unsubscribe = None
        try:
            with contextlib.suppress(Exception):
                self.links.teardown()
            if self._compose is not None:
                with contextlib.suppress(TopologyError):
                    self._compose.stop()
        finally:
            down_run(self.path)
            if self._docker is not None:
                self._docker.close()
                self._docker = None
        self._emit("topology.down", topology=self.topology)
        self.run_id = None

    def describe(self) -> dict[str, Any]:
        """The local shape plus the Compose project."""
        desc = super().describe()
        desc["project"] = project_name(self.run_id or "")
        return desc

    # ----------------------------------------------------------------- per-server primitives
    def _client(self) -> Any:
        if self._docker is None:
            self._docker = docker_client()
        return self._docker

    def _container(self, service: str) -> Any:
        return self._client().containers.get(f"{project_name(self._state.run)}-{service}")

    def _container_pid(self, name: str) -> int:
        container = self._container(name)
        container.reload()
        pid = int(container.attrs["State"]["Pid"] or 0)
        if not pid:
            raise TopologyError(f"container of node {name} is {container.status}; its log:\n"
                                f"{self.engine.log_tail(self.path / name / 'postgres.log')}")
        return pid

    def _container_log(self, service: str) -> str:
        with contextlib.suppress(Exception):
            return self._container(service).logs(tail=15).decode(errors="replace")
        return "(no log)"

    def _prepare_principal(self, principal: str) -> None:
        """Give the superuser the test password (a template has none: locally the superuser only
        uses the Unix socket), for the entrypoint's pg_rewind / pg_basebackup over TCP through the
        replication proxy (pg_hba asks for SCRAM there); the standbys get it through the WAL."""
        from psycopg import sql

        password = self.engine.credentials.password
        with self.engine.admin_connect(self.socket_dir(principal), self._node_state(principal).port) as conn:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier("postgres"), sql.Literal(password)))

    def _server_version(self, name: str) -> str:
        s = self._node_state(name)
        with self.engine.admin_connect(self.socket_dir(name), s.port) as conn:
            return str(conn.execute("SHOW server_version").fetchone()[0]).split()[0]

    def _spawn(self, name: str) -> None:
        """Write the node's configuration and role, ``docker start`` its container (its entrypoint
        clones or rewinds first when told); records the server's PID on this host and ``running``."""
        s = self._node_state(name)
        folder = self.path / name
        self._write_conf(name)
        (folder / "role").write_text("principal" if s.role == PRINCIPAL else "standby")
        (Path(s.datadir) / "postmaster.pid").unlink(missing_ok=True)  # the container is down: it is stale
        self._container(name).start()
        s.pid = self._container_pid(name)
        s.state = RUNNING
        save_state(self.path, self._state)

    def _apply_conf(self, name: str) -> None:
        """SIGHUP the container's postmaster once it takes signals (the engine's own wait reads the
        host PID from ``postmaster.pid``, which in a container holds 1)."""
        s = self._node_state(name)
        if s.pid:
            self._wait_signal_ready(s)
            signal_pid(s.pid, signal.SIGHUP)

    @staticmethod
    def _wait_signal_ready(s: NodeState, timeout: float = 10) -> None:
        """As local (a postmaster dies of a SIGHUP before it has set up its handlers; it writes
        ``postmaster.pid`` only after that), except that the file names the server's PID inside its
        container (1), not the host PID the state records: wait until the file exists (a stale one is
        removed before each start)."""
        pidfile = Path(s.datadir) / "postmaster.pid"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and s.pid and pid_alive(s.pid):
            try:
                if pidfile.read_text().split("\n", 1)[0].strip().isdigit():
                    return
            except (FileNotFoundError, PermissionError):
                pass
            time.sleep(0.005)

    def _halt(self, name: str, mode: str) -> None:
        """Signal the container's server (fast SIGINT / immediate SIGQUIT / smart SIGTERM) and wait for
        the container to exit (killed after 60 s).

        As local (:func:`harness.topology.postgres.stop_server`), the stop signal goes to the server's
        host PID right after the SIGCONT that wakes a paused server, not through the engine's API: a
        ``docker kill`` round trip (tens of ms under load) after the SIGCONT let a paused postmaster
        serve the login it had pending to completion before it heard of the shutdown, so no attempt
        was pending at the shutdown any more (MIR-13 *unknown*, docs/compose.md). ``docker kill`` is
        the fallback when that PID is gone."""
        import docker

        s = self._node_state(name)
        container = self._container(name)
        sig = getattr(signal, self.stop_signals[mode])
        signal_group(s.pid or 0, signal.SIGCONT)  # a paused server cannot shut down
        if s.pid and pid_alive(s.pid):
            self._before_stop(s.pid, mode)
            signal_pid(s.pid, sig)
        else:
            with contextlib.suppress(docker.errors.APIError):  # it may have exited already
                container.kill(signal=self.stop_signals[mode])
        try:
            container.wait(timeout=60)
        except Exception as exc:  # noqa: BLE001 - requests' timeout types vary
            container.kill()
            raise TopologyError(f"node {name} did not stop ({mode}) within 60 s; killed its container") from exc

    def _before_stop(self, pid: int, mode: str) -> None:
        """What the engine does on a running server before its stop signal: nothing for PostgreSQL."""

    def _hard_kill(self, name: str) -> None:
        """``docker kill`` (SIGKILL) the node's container: every server process at once."""
        import docker

        container = self._container(name)
        with contextlib.suppress(docker.errors.APIError):
            container.kill()
        container.wait(timeout=30)

    def _rewind(self, name: str, principal: str) -> None:
        """Tell the node's entrypoint to rewind onto the principal (through the node's replication
        proxy) at its next start - re-cloning when pg_rewind cannot (``node.reclone``)."""
        (self.path / name / "rewind").write_text(principal + "\n")

    def membership_problem(self, op: str) -> str | None:
        """As local (the capability table), and ``add-node`` needs the fault proxy: a new container
        clones and streams through its replication proxy."""
        problem = super().membership_problem(op)
        if problem is None and op == "add-node" and self._state.links.kind == "direct":
            return (f"add-node on compose run {self._state.run}: the new node clones and streams through its "
                    "replication proxy, and this run has no fault proxy (started with --no-proxy / links='direct'); "
                    "start the run with the proxy")
        return problem

    def _provision_standby(self, name: str, principal: str) -> None:
        """A node being added (node add): its folder as :meth:`_prepare_folders` writes a standby's,
        with the ``clone`` marker (its entrypoint clones ``principal`` through the node's replication
        proxy, which :meth:`ProxiedLinks.node_added` has just created), and its container, created but
        not started (``compose/pg-standby.yml``, a Compose project of its own: ``fh-<run>-<node>``,
        labelled with the run like the others)."""
        names = self._state.links.proxies.get(name)
        if names is None or not isinstance(self.links, ProxiedLinks):
            raise InvalidOperation(self.membership_problem("add-node") or f"node {name} has no replication proxy")
        files = getattr(self.engine, "bootstrap_files", None)
        if files is None:
            raise ConfigError(f"engine {self.engine.name!r} has no container bootstrap; use --engine postgres")
        folder = self.path / name
        for file, text in files().items():  # two of them hold the test password
            write_private_file(folder / file, text)
        (folder / "clone").write_text("")
        (folder / "role").write_text("standby")
        self._write_conf(name)
        node = self._node_state(name)
        env = {"FH_NODE_PROJECT": project_name(f"{self._state.run}-{name}"), "FH_NODE": name,
               "FH_NODE_PORT": str(node.port), "FH_NODE_REPL_PORT": names.replication_listen.rsplit(":", 1)[1]}
        env_file = self.path / f"compose-{name}.env"
        env_file.write_text((self.path / "compose.env").read_text()
                            + "".join(f"{k}={v}\n" for k, v in env.items()))
        file = resource("compose", ADDED_NODE_FILE)
        res = subprocess.run(["docker", "compose", "-f", str(file), "--env-file", str(env_file), "up", "--no-start"],
                             capture_output=True, text=True, cwd=file.parent, timeout=120)
        if res.returncode != 0:
            raise TopologyError(f"docker compose up --no-start of node {name} failed (exit {res.returncode}): "
                                f"{res.stderr.strip()[-800:]}")

    def _discard(self, name: str) -> None:
        """Remove the container of a node leaving the run (node remove), with its anonymous volumes;
        its folder goes with the run's bookkeeping (:mod:`harness.topology.membership`)."""
        import docker

        with contextlib.suppress(docker.errors.NotFound):
            self._container(name).remove(force=True, v=True)

    def _wait_started(self, name: str) -> None:
        """As local, then report a re-clone the entrypoint had to do instead of a rewind."""
        super()._wait_started(name)
        marker = self.path / name / "recloned"
        if marker.exists():
            reason = marker.read_text(errors="replace").strip()[:300]
            marker.unlink(missing_ok=True)
            self._emit("node.reclone", node=name, source=self._principal_name(), reason=reason)


class ComposePair(ComposeTopology, LocalPair):
    """A principal + mirror pair of containers (``compose/pg-pair.yml``)."""


class ComposeGroup(ComposeTopology, LocalGroup):
    """A principal and two standbys of containers (``compose/pg-group3.yml``)."""
