"""HAProxy in front of a Patroni topology - the canonical deployment Patroni documents (docs/ha-managers.md
"HAProxy in front"): one client address whose backend is every node's client proxy, each server
health-checked on its node's REST API with ``option httpchk GET /primary`` (200 only on the leader:
HAM-5), so clients reach whichever node leads without a host list.

HAProxy (Debian ``haproxy`` 2.6) runs in the foreground (``-db``) as a process of the run: it is in
the run state from the moment it exists (its process group), so ``down``, ``down --all`` and the
reaper stop it with the rest, also after a crash. ``on-marked-down shutdown-sessions`` closes the
sessions of a server that stops being the leader, as Patroni's HAProxy template does."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from harness.errors import MissingDependencyError, TopologyError
from harness.ports import allocate_port
from harness.topology.postgres import APP_DATABASE, APP_USER
from harness.topology.process import pid_alive

HAPROXY_BIN = "/usr/sbin/haproxy"
#: Health-check timing: every second, two failures mark a server down, one success up again.
CHECK = "inter 1s fall 2 rise 1"


def check_installed() -> str:
    """The HAProxy binary of the HAM-5 front (MissingDependencyError with the install command when absent)."""
    found = shutil.which("haproxy") or (HAPROXY_BIN if Path(HAPROXY_BIN).exists() else None)
    if not found:
        raise MissingDependencyError("haproxy is not installed; apt-get install -y --no-install-recommends haproxy")
    return found


def config_text(listen_port: int, servers: list[tuple[str, str, int]], stats_socket: Path | None = None) -> str:
    """The HAProxy configuration: a TCP front on 127.0.0.1:``listen_port`` and one backend server per
    ``(name, client address host:port, REST API port)``, checked with ``GET /primary`` (HAM-5); with
    ``stats_socket``, a Unix stats socket the harness reads the servers' check states from."""
    stats = [f"    stats socket {stats_socket} mode 600 level user"] if stats_socket is not None else []
    lines = ["global", "    maxconn 200", *stats, "", "defaults", "    mode tcp", "    retries 2",
             "    timeout connect 4s", "    timeout client 30m", "    timeout server 30m", "    timeout check 2s", "",
             "listen primary", f"    bind 127.0.0.1:{listen_port}", "    option httpchk GET /primary",
             "    http-check expect status 200",
             f"    default-server {CHECK} on-marked-down shutdown-sessions"]
    for name, address, api_port in servers:
        lines.append(f"    server {name} {address} check port {api_port} addr 127.0.0.1")
    return "\n".join(lines) + "\n"


class HAProxyFront:
    """HAProxy (HAM-5 health checks; DUR-1 through one address) in front of a started
    :class:`~harness.topology.patroni.PatroniCluster` (use as a
    context manager, or :meth:`start` / :meth:`stop`)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.port: int | None = None
        self.pid: int | None = None
        self.stats_socket = Path()

    def __enter__(self) -> HAProxyFront:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 30) -> HAProxyFront:
        """Write the configuration into the run, start HAProxy (HAM-5 routing; a process of the run) and return
        once its health checks route to the leader (a TopologyError with its log otherwise)."""
        binary = check_installed()
        self.port = allocate_port()
        servers = []
        for n in self.cluster.state().nodes:
            servers.append((n.name, f"{n.client_host}:{n.client_port}", self.cluster._x().node(n.name).api_port))
        path: Path = self.cluster.path
        conf = path / "haproxy.cfg"
        self.stats_socket = path / "haproxy.sock"
        conf.write_text(config_text(self.port, servers, self.stats_socket))
        log = path / "haproxy.log"
        self.pid = self.cluster._spawn("haproxy", [binary, "-db", "-f", str(conf)], log, path)
        self.cluster._emit("ham.front", kind="haproxy", listen=f"127.0.0.1:{self.port}", check="GET /primary")
        deadline = time.monotonic() + timeout
        while not self._routes():
            if not pid_alive(self.pid) or time.monotonic() > deadline:
                tail = " | ".join(log.read_text(errors="replace").splitlines()[-5:]) if log.exists() else "no log"
                self.stop()
                raise TopologyError(f"HAProxy did not route to a leader within {timeout:.0f} s ({tail[-600:]})")
            time.sleep(0.2)
        return self

    def up_servers(self) -> list[str] | None:
        """The servers HAProxy's ``GET /primary`` checks (HAM-5) hold UP now (``show stat`` on the stats socket), or
        None when the socket does not answer. HAProxy starts every server UP until its checks fail,
        so right after start a replica is routed to as well."""
        import socket

        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2)
                sock.connect(str(self.stats_socket))
                sock.sendall(b"show stat\n")
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
        except OSError:
            return None
        up = []
        for line in data.decode(errors="replace").splitlines():
            fields = line.split(",")
            if len(fields) > 17 and fields[0] == "primary" and fields[1] not in ("FRONTEND", "BACKEND"):
                if fields[17].startswith("UP"):
                    up.append(fields[1])
        return up

    def _routes(self) -> bool:
        """Exactly one server UP, and it is the node that accepts writes."""
        up = self.up_servers()
        return up is not None and len(up) == 1 and up[0] == self.cluster.leader()

    def dsn(self) -> str:
        """One address (HAProxy's) for the test login (DUR-1's writers); no host list, no target_session_attrs."""
        return (f"host=127.0.0.1 port={self.port} dbname={APP_DATABASE} user={APP_USER} "
                f"passfile={self.cluster.path / 'pgpass'} connect_timeout=2")

    def stop(self) -> None:
        """Stop HAProxy (its process group) and forget it in the run state (OBS-1: nothing left running)."""
        if self.pid is None:
            return
        from harness.topology.process import kill_group

        if pid_alive(self.pid):
            kill_group(self.pid, timeout=5)
        pid = self.pid
        self.cluster._update_state(lambda s: setattr(s, "processes", [p for p in s.processes if p.pid != pid]))
        self.pid = None
