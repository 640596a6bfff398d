"""The ICM cluster stand-in (RULEBOOK ICM-1..7, seed 004): N Domino-like server nodes, each an HTTP
and an HTTPS listener serving the databases it holds replicas of, every port behind the fault proxy.

* **Data**: each (server, replica) is a PostgreSQL database ``icm_<server>_<db>`` on the backing
  topology's principal - one PostgreSQL instance for the whole cluster (an interpretation kept small
  on purpose, docs/icm.md); a request for ``/<db>`` reads its row from that server's own database.
* **Ports**: ``fh-<run>-icm-<server>-<scheme>`` proxies on the backing topology's fault proxy front
  every listener, so a partition of ``s1:http`` leaves ``s1:https`` answering (ICM-3).
* **Certificates**: a CA and a server certificate for 127.0.0.1 are made at start-up with
  ``trustme`` (nothing on disk but the PEM files clients need).
* **State, recorded as history events** (docs/icm.md lists them): per server its open ``sessions``
  (the load that drives the availability index), ``Server_Availability_Threshold``,
  ``Server_MaxUsers``, ``Server_Restricted`` (0-4) - ``icm.server.state``; per replica the marks
  *Out of Service* / *Pending Delete* - ``icm.replica.mark``; a server failing / coming back -
  ``icm.server.down`` / ``icm.server.up``; every request a server served - ``icm.served``; every
  ping it answered - ``icm.ping``. Both carry ``via``: ``proxy`` when the connection came through
  the port's fault proxy, ``direct`` when it reached the listener's own address
  (:meth:`IcmCluster.server_address`) and so bypassed every fault (ICM-3 counts no such ping), absent
  when the fault proxy does not say which connections are its own (a real toxiproxy-server).
* **Directory file**: the cluster database directory (replicas and marks) is also written to
  ``<run>/icm-directory.json`` so ``failover-harness fault --run RUN mark-state`` can mark a replica
  from another process; the cluster notices and records it (``source: "cli"``).

The server nodes and their listeners are :mod:`harness.topology.icm_server`, the directory file
:mod:`harness.topology.icm_directory`, the history relay :mod:`harness.topology.icm_relay`.

Sessions and authentication: a user authenticates to one server with HTTP Basic credentials (a
``401`` challenge first) and gets a session cookie valid on that server only (ICM-7: a new server
needs a new login unless the user already logged in there)."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import ssl
import tempfile
import threading
import time
from base64 import b64decode
from collections import OrderedDict
from pathlib import Path
from typing import Any

import psycopg

from harness.errors import ConfigError, HarnessError, InvalidOperation, TopologyError
from harness.redact import remember
from harness.topology.icm_directory import DIRECTORY_FILE, MARKS, locked_directory
from harness.topology.icm_server import Listener, RequestHandler, ServerNode, ServerSettings, availability_index
from harness.topology.process import database_user

SCHEMES = ("http", "https")
#: How many of the fault proxies' upstream connections the cluster remembers (to tell ``via``).
PROXIED_KEPT = 50_000
#: Default replica layout: server -> databases it holds (every database on >= 2 servers).
DEFAULT_LAYOUT: dict[str, tuple[str, ...]] = {
    "s1": ("mail.nsf", "crm.nsf"),
    "s2": ("mail.nsf", "crm.nsf", "docs.nsf"),
    "s3": ("mail.nsf", "docs.nsf"),
}
USERS = ("alice", "bob", "carol")
_NAME = re.compile(r"[a-z][a-z0-9]{0,15}")
_DB = re.compile(r"[a-z][a-z0-9_]{0,30}\.nsf")

__all__ = ["DEFAULT_LAYOUT", "DIRECTORY_FILE", "MARKS", "SCHEMES", "USERS", "IcmCluster", "ServerSettings",
           "availability_index", "database_name"]


def _check_setting(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"ICM server setting {name} must be a whole number from {low} to {high}, not {value!r}")
    return value


class IcmCluster:
    """The cluster stand-in over a started backing ``topology`` (its principal holds the databases,
    its fault proxy fronts the ports). ``up()`` / ``down()``; :meth:`bind` points the events at a
    test's history (one cluster may serve many tests: :meth:`reset` between them)."""

    def __init__(self, topology: Any, layout: dict[str, tuple[str, ...]] | None = None, history: Any = None) -> None:
        layout = dict(layout or DEFAULT_LAYOUT)
        if len(layout) < 3:
            raise ConfigError(f"an ICM cluster needs at least 3 servers, not {len(layout)}")
        for name, dbs in layout.items():
            if not _NAME.fullmatch(name) or not dbs or not all(_DB.fullmatch(d) for d in dbs):
                raise ConfigError(f"bad ICM layout entry {name!r}: {dbs!r} (server names like s1, databases like "
                                  "mail.nsf)")
        self.topology = topology
        self.history = history
        self._nodes = {name: ServerNode(name, tuple(dbs)) for name, dbs in layout.items()}
        self._lock = threading.RLock()
        self._marks: dict[tuple[str, str], str] = {}
        self._dir_version = 0
        self._watchers: list[Any] = []
        self._passwords = {u: secrets.token_urlsafe(12) for u in USERS}
        for password in self._passwords.values():
            remember(password)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.ca_path: Path | None = None
        self.cert_path: Path | None = None  # server certificate + key (PEM; routers terminate TLS with it)
        self._context: ssl.SSLContext | None = None
        self.started = False
        # The fault proxies' upstream connections (their local host:port, the peer a listener sees):
        # a connection from any other peer bypassed the fault proxy (``via: direct``).
        self._proxied: OrderedDict[str, None] = OrderedDict()
        self._proxy_names: set[str] = set()
        self._paths_known = False
        self._paths_lock = threading.Lock()  # its own: the proxy's thread must never wait for a control
        self._unsubscribe: Any = None

    # ------------------------------------------------------------------------- views
    @property
    def servers(self) -> list[str]:
        """Server names in cluster order (the order the tie-break ``first`` means)."""
        return list(self._nodes)

    def databases(self) -> list[str]:
        """Every database some server holds a replica of."""
        return sorted({d for n in self._nodes.values() for d in n.databases})

    def holders(self, database: str) -> list[str]:
        """Servers holding a replica of ``database`` (marked or not)."""
        return [n.name for n in self._nodes.values() if database in n.databases]

    def port_names(self) -> list[str]:
        """``s1:http``, ``s1:https``, ... (what the fault vocabulary partitions)."""
        return [f"{n}:{s}" for n in self._nodes for s in SCHEMES]

    def _node(self, server: str) -> ServerNode:
        if server not in self._nodes:
            raise ConfigError(f"no ICM server {server!r}; servers: {', '.join(self._nodes)}")
        return self._nodes[server]

    def address(self, server: str, scheme: str) -> tuple[str, int]:
        """Where clients reach ``server``'s ``scheme`` port (its fault proxy). A router probes this
        address and sends or proxies requests to it (ICM-3: the faults act here)."""
        host, _, port = self._node(server).proxies[_scheme(scheme)][1].rpartition(":")
        return host, int(port)

    def server_address(self, server: str, scheme: str) -> tuple[str, int]:
        """The listener's own address, bypassing the fault proxy: for the harness's own checks only. A
        router must not probe it - a cut port still answers here; such a ping is recorded with
        ``via: direct`` and ICM-3 does not count it."""
        return "127.0.0.1", self._node(server).ports[_scheme(scheme)]

    def proxy_name(self, port_name: str) -> str:
        """The fault proxy of ``s1:http``."""
        server, _, scheme = port_name.partition(":")
        return self._node(server).proxies[_scheme(scheme)][0]

    def server_of_port(self, port: int) -> str | None:
        """The server whose proxied (or own) port is ``port``."""
        for n in self._nodes.values():
            for scheme in SCHEMES:
                if port in (n.ports.get(scheme), int(n.proxies[scheme][1].rpartition(":")[2]) if n.proxies else -1):
                    return n.name
        return None

    def url(self, server: str, scheme: str, path: str = "/") -> str:
        """``https://127.0.0.1:PORT/path`` through the fault proxy."""
        host, port = self.address(server, scheme)
        return f"{scheme}://{host}:{port}{path}"

    def password(self, user: str) -> str:
        """The test user's password (random per cluster; never printed)."""
        if user not in self._passwords:
            raise ConfigError(f"no ICM user {user!r}; users: {', '.join(USERS)}")
        return self._passwords[user]

    def settings(self, server: str) -> ServerSettings:
        """A copy of ``server``'s current settings."""
        return ServerSettings(**self._node(server).settings.to_dict())

    def is_up(self, server: str) -> bool:
        """Whether ``server``'s listeners run."""
        return self._node(server).up

    def directory(self) -> dict[str, Any]:
        """The cluster database directory and the servers' availability as ICM reads them: per server
        its settings, index and whether it runs; per database its replicas and their marks."""
        self._read_directory_file()
        with self._lock:
            return {
                "servers": {n.name: {**n.settings.to_dict(), "index": n.settings.index(), "up": n.up}
                            for n in self._nodes.values()},
                "replicas": {db: {s: self._marks.get((s, db)) for s in self.holders(db)} for db in self.databases()},
                "order": self.servers,
            }

    # ------------------------------------------------------------------------- lifecycle
    def up(self) -> IcmCluster:
        """Create the databases, the certificates, the listeners and their proxies."""
        import trustme

        try:
            base = Path(getattr(self.topology, "path", "") or tempfile.gettempdir())  # gone with the run
            self._tmp = tempfile.TemporaryDirectory(prefix="icm-", dir=base if base.is_dir() else None)
            tmp = Path(self._tmp.name)
            ca = trustme.CA()
            cert = ca.issue_cert("127.0.0.1", "localhost")
            self.ca_path = tmp / "ca.pem"
            ca.cert_pem.write_to_path(str(self.ca_path))
            self.cert_path = tmp / "server.pem"
            cert.private_key_and_cert_chain_pem.write_to_path(str(self.cert_path))
            self.cert_path.chmod(0o600)
            database_user().chown(self.cert_path)  # the routers run as the database user read it
            tmp.chmod(0o755)
            self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            cert.configure_cert(self._context)
            self._create_databases()
            client = self.topology.links.client
            run = self.topology.run_id
            self._watch_proxy()
            for node in self._nodes.values():
                for scheme in SCHEMES:
                    listener = self._listen(node, scheme, 0)
                    node.ports[scheme] = listener.server_address[1]
                    proxy = client.create_proxy(f"fh-{run}-icm-{node.name}-{scheme}",
                                                upstream=f"127.0.0.1:{node.ports[scheme]}",
                                                node=f"{node.name}:{scheme}")
                    node.proxies[scheme] = (proxy.name, proxy.listen)
                    self._proxy_names.add(proxy.name)
                node.up = True
            self.started = True
            self._write_directory_file()
        except BaseException:
            self.down()
            raise
        self._record_layout()
        return self

    def _listen(self, node: ServerNode, scheme: str, port: int) -> Listener:
        listener = Listener(self, node.name, scheme, port, self._context if scheme == "https" else None)
        threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.05},
                         name=f"icm-{node.name}-{scheme}", daemon=True).start()
        node.listeners[scheme] = listener
        return listener

    def _create_databases(self) -> None:
        with self.topology.principal.admin() as conn:
            existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
            for node in self._nodes.values():
                for db in node.databases:
                    name = database_name(node.name, db)
                    if name not in existing:
                        conn.execute(f'CREATE DATABASE "{name}" OWNER app')
        for node in self._nodes.values():
            for db in node.databases:
                with psycopg.connect(self.topology.principal.dsn(dbname=database_name(node.name, db), direct=True),
                                     autocommit=True) as conn:
                    conn.execute("CREATE TABLE IF NOT EXISTS documents (id int PRIMARY KEY, title text NOT NULL)")
                    conn.execute("INSERT INTO documents VALUES (1, %s) ON CONFLICT (id) DO UPDATE SET title = "
                                 "excluded.title", (f"{db} replica on {node.name}",))

    def _watch_proxy(self) -> None:
        """Follow the fault proxy's connection events (where it has them) to tell which connections
        to a listener are its own. Only a proxy that names its upstream connection's local address
        (the embedded server, synchronously, before it relays a byte) makes ``via`` known."""
        handle = getattr(getattr(self.topology, "links", None), "handle", None)
        subscribe = getattr(handle, "subscribe", None)
        if subscribe is None or self._unsubscribe is not None:
            return
        self._paths_known = getattr(handle, "kind", None) == "embedded"
        self._unsubscribe = subscribe(self._proxy_event)

    def _proxy_event(self, event: Any) -> None:
        """A fault-proxy connection event (on the proxy's thread): remember its upstream peer."""
        fields = getattr(event, "fields", {}) or {}
        if event.type != "conn.upstream_connected" or fields.get("proxy") not in self._proxy_names:
            return
        local = fields.get("local")
        if not local:
            return
        with self._paths_lock:
            self._paths_known = True
            self._proxied[str(local)] = None
            self._proxied.move_to_end(str(local))
            while len(self._proxied) > PROXIED_KEPT:
                self._proxied.popitem(last=False)

    def path_of(self, peer: tuple[str, int] | Any) -> str | None:
        """``proxy`` when a listener's peer ``(host, port)`` is a fault proxy's upstream connection,
        ``direct`` when it is not (the listener's own address was used), None when the fault proxy
        does not tell its connections."""
        try:
            key = f"{peer[0]}:{peer[1]}"
        except (TypeError, IndexError):
            return None
        with self._paths_lock:
            if key in self._proxied:
                return "proxy"
            return "direct" if self._paths_known else None

    def down(self) -> None:
        """Stop every listener and delete the proxies (safe to call twice)."""
        if self._unsubscribe is not None:
            with contextlib.suppress(Exception):
                self._unsubscribe()
            self._unsubscribe = None
        client = getattr(getattr(self.topology, "links", None), "client", None)
        for node in self._nodes.values():
            for listener in node.listeners.values():
                with contextlib.suppress(Exception):
                    listener.fail()
            node.listeners.clear()
            node.up = False
            for name, _ in node.proxies.values():
                if client is not None:
                    with contextlib.suppress(HarnessError):
                        client.delete_proxy(name)
            node.proxies.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        self.started = False

    def __enter__(self) -> IcmCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def bind(self, history: Any) -> None:
        """Record into ``history`` from now on, starting with the layout and every current state
        (each test's history then holds all its checkers need)."""
        self.history = history
        self._record_layout()

    def reset(self) -> None:
        """Back to the start: every server up with default settings, no mark, no session (recorded)."""
        with self._lock:
            for node in self._nodes.values():
                if not node.up:
                    self.start_server(node.name)
                node.settings = ServerSettings()
                node.cookies.clear()
                self._emit("icm.server.state", server=node.name, **node.settings.to_dict(),
                           availability=node.settings.index())
            for (server, db) in list(self._marks):
                self.mark(server, db, None)

    def _record_layout(self) -> None:
        self._emit("icm.cluster.up", servers=[
            {"name": n.name, "databases": list(n.databases),
             "ports": {s: {"proxy": n.proxies[s][0], "listen": n.proxies[s][1], "server": f"127.0.0.1:{n.ports[s]}"}
                       for s in SCHEMES if s in n.proxies}} for n in self._nodes.values()],
            order=self.servers)
        for node in self._nodes.values():
            self._emit("icm.server.state", server=node.name, **node.settings.to_dict(),
                       availability=node.settings.index())
            if not node.up:
                self._emit("icm.server.down", server=node.name)
        for (server, db), mark in sorted(self._marks.items()):
            self._emit("icm.replica.mark", server=server, database=db, mark=mark, source="harness")

    def _emit(self, type_: str, **fields: Any) -> None:
        if self.history is not None:
            self.history.record(type_, **fields)
        if type_ in ("icm.server.state", "icm.replica.mark", "icm.server.down", "icm.server.up"):
            for watcher in list(self._watchers):
                watcher(type_, fields)

    def watch(self, callback: Any) -> Any:
        """Call ``callback(event_type, fields)`` on every later state change (a router adapter that
        translates the cluster's settings into its own configuration); returns the function that stops it."""
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    # ------------------------------------------------------------------------- controls
    def set_server(self, server: str, **settings: int) -> ServerSettings:
        """Change ``sessions``, ``capacity``, ``availability_threshold``, ``max_users`` or ``restricted``
        of ``server`` (ICM-2), recorded as ``icm.server.state``."""
        limits = {"sessions": (0, 10**6), "capacity": (1, 10**6), "availability_threshold": (0, 100),
                  "max_users": (0, 10**6), "restricted": (0, 4)}
        with self._lock:
            node = self._node(server)
            for key, value in settings.items():
                if key not in limits:
                    raise ConfigError(f"unknown ICM server setting {key!r}; use one of {', '.join(limits)}")
                setattr(node.settings, key, _check_setting(key, value, *limits[key]))
            self._emit("icm.server.state", server=server, **node.settings.to_dict(), availability=node.settings.index())
            return self.settings(server)

    def mark(self, server: str, database: str, mark: str | None, source: str = "harness") -> None:
        """Mark ``server``'s replica of ``database`` *Out of Service* / *Pending Delete* (``None``: clear),
        recorded as ``icm.replica.mark`` (ICM-1)."""
        if mark is not None and mark not in MARKS:
            raise ConfigError(f"replica mark must be one of {', '.join(MARKS)} or none, not {mark!r}")
        with self._lock:
            if database not in self._node(server).databases:
                raise ConfigError(f"server {server} holds no replica of {database!r} (it holds "
                                  f"{', '.join(self._node(server).databases)})")
            if mark is None:
                self._marks.pop((server, database), None)
            else:
                self._marks[(server, database)] = mark
            if self.started:
                self._write_directory_file()
            self._emit("icm.replica.mark", server=server, database=database, mark=mark, source=source)

    def kill_server(self, server: str) -> None:
        """The server fails: both listeners stop and every open connection drops (ICM-7)."""
        with self._lock:
            node = self._node(server)
            if not node.up:
                raise InvalidOperation(f"ICM server {server} is already down")
            for listener in node.listeners.values():
                listener.fail()
            node.listeners.clear()
            node.up = False
            node.cookies.clear()  # its sessions die with it
            self._emit("icm.server.down", server=server)

    def start_server(self, server: str) -> None:
        """Start a failed server again on the same ports."""
        with self._lock:
            node = self._node(server)
            if node.up:
                raise InvalidOperation(f"ICM server {server} is already up")
            for scheme in SCHEMES:
                deadline = time.monotonic() + 5
                while True:
                    try:
                        self._listen(node, scheme, node.ports[scheme])
                        break
                    except OSError as exc:
                        if time.monotonic() > deadline:
                            raise TopologyError(f"ICM server {server} could not listen on its {scheme} port "
                                                f"{node.ports[scheme]} again: {exc}") from exc
                        time.sleep(0.05)
            node.up = True
            self._emit("icm.server.up", server=server)

    # ------------------------------------------------------------------------- directory file
    @property
    def directory_path(self) -> Path:
        """``<run>/icm-directory.json``: the replica marks, editable by ``fault mark-state``."""
        return Path(self.topology.path) / DIRECTORY_FILE

    def _write_directory_file(self) -> None:
        self._dir_version += 1
        data = {"version": self._dir_version, "servers": self.servers,
                "replicas": {f"{s}/{db}": self._marks.get((s, db))
                             for s in self._nodes for db in self._nodes[s].databases}}
        with locked_directory(self.directory_path):
            tmp = self.directory_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(self.directory_path)

    def _read_directory_file(self) -> None:
        """Take marks another process wrote (``fault mark-state``) and record them (``source: cli``)."""
        if not self.started:
            return
        try:
            data = json.loads(self.directory_path.read_text())
        except (OSError, ValueError):
            return
        if int(data.get("version", 0)) == self._dir_version:
            return
        with self._lock:
            self._dir_version = int(data.get("version", 0))
            for key, mark in (data.get("replicas") or {}).items():
                server, _, db = key.partition("/")
                if server in self._nodes and self._marks.get((server, db)) != mark:
                    if mark is None:
                        self._marks.pop((server, db), None)
                    else:
                        self._marks[(server, db)] = mark
                    self._emit("icm.replica.mark", server=server, database=db, mark=mark, source="cli")

    # ------------------------------------------------------------------------- serving
    def _serve(self, req: RequestHandler, server: str, scheme: str) -> None:
        path, _, query = req.path.partition("?")
        params = dict(p.partition("=")[::2] for p in query.split("&") if p)
        rid = req.headers.get("X-Request-Id")
        via = self.path_of(req.client_address)
        if path == "/icm/ping":
            self._emit("icm.ping", server=server, scheme=scheme, request_id=params.get("for"),
                       by=req.headers.get("User-Agent", "")[:60], via=via)
            req.reply(200, {"server": server, "scheme": scheme, "pong": True})
            return
        database = path.strip("/").split("/")[0]
        node = self._node(server)
        if database not in node.databases:
            self._emit("icm.served", server=server, scheme=scheme, database=database, status=404, request_id=rid,
                       user=None, auth="none", via=via)
            req.reply(404, {"server": server, "error": f"no replica of {database!r} here"})
            return
        user, auth = self._authenticate(req, node)
        if user is None:
            self._emit("icm.served", server=server, scheme=scheme, database=database, status=401, request_id=rid,
                       user=None, auth="challenge", via=via)
            req.reply(401, {"server": server, "error": "authentication required"},
                      {"WWW-Authenticate": f'Basic realm="{server}"'})
            return
        try:
            with psycopg.connect(self.topology.principal.dsn(dbname=database_name(server, database), direct=True),
                                 connect_timeout=5) as conn:
                row = conn.execute("SELECT title, current_database() FROM documents WHERE id = 1").fetchone()
        except psycopg.Error as exc:
            self._emit("icm.served", server=server, scheme=scheme, database=database, status=500, request_id=rid,
                       user=user, auth=auth, error=str(exc).strip()[:200], via=via)
            req.reply(500, {"server": server, "error": "database error"})
            return
        headers: dict[str, str] = {}
        if auth == "login":
            cookie = secrets.token_hex(8)
            with self._lock:
                node.cookies[cookie] = user
            headers["Set-Cookie"] = f"ICMSESSION_{server}={cookie}; Path=/"
        self._emit("icm.served", server=server, scheme=scheme, database=database, status=200, request_id=rid,
                   user=user, auth=auth, source_database=row[1], via=via)
        req.reply(200, {"server": server, "database": database, "title": row[0], "source": row[1], "user": user},
                  headers)

    def _authenticate(self, req: RequestHandler, node: ServerNode) -> tuple[str | None, str]:
        """(user, ``session`` | ``login``) or (None, ``challenge``)."""
        for part in req.headers.get("Cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == f"ICMSESSION_{node.name}":
                with self._lock:
                    user = node.cookies.get(value)
                if user is not None:
                    return user, "session"
        header = req.headers.get("Authorization", "")
        if header.startswith("Basic "):
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                user, _, password = b64decode(header[6:]).decode().partition(":")
                if user in self._passwords and secrets.compare_digest(password, self._passwords[user]):
                    return user, "login"
        return None, "challenge"


def database_name(server: str, database: str) -> str:
    """The PostgreSQL database holding ``server``'s replica of ``database``: ``icm_s1_mail``."""
    return f"icm_{server}_{database.removesuffix('.nsf')}"


def _scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise ConfigError(f"scheme must be http or https, not {scheme!r}")
    return scheme
