"""``haproxy``: real HAProxy 2.6 (Debian) as an ICM-profile router, configured from the cluster. It
proxies instead of redirecting, so the verdicts judge which server served each request (observed at
the servers).

What the configuration expresses, per database and scheme (a backend ``http_mail`` / ``https_mail``
for ``/mail.nsf``):

* candidates: the servers holding a replica (ICM-1 at start-up; replica marks cannot be expressed);
* probes: ``option httpchk GET /icm/ping`` on each server's port of the backend's scheme (HTTPS
  checks over TLS), every 300 ms, down after one failure (ICM-3); one check per server port, which
  every backend's entry ``track``-s;
* least loaded: ``balance leastconn`` - HAProxy's own connections, not the servers' sessions (ICM-5);
* MAXUSERS: ``maxconn`` per server = ``Server_MaxUsers`` (``set maxconn server`` at run time);
* RESTRICTED: the server's state ``drain`` (``set server ... state drain`` on the admin socket);
* last resort: each server listed a second time as ``backup`` (used when no active server is up).

BUSY (the availability index against ``Server_Availability_Threshold``) has no HAProxy
counterpart without an agent on the servers."""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

from harness.clients.icm.pools import pool_entries, pool_name
from harness.clients.icm.process import ProcessRouter
from harness.errors import ClientStartError

LIMITATIONS = {
    "ICM-1": "replica marks (Out of Service, Pending Delete) have no HAProxy counterpart: only the servers "
             "holding a replica at start-up are in a backend",
    "ICM-2": "no availability index: HAProxy sees its own connections, not the server's sessions; BUSY "
             "(Server_Availability_Threshold) cannot be expressed",
    "ICM-5": "balance leastconn counts HAProxy's own connections, not the servers' load",
    "ICM-7": "a proxy: requests after a server failure are redispatched to another server without an error",
}


class HaproxyRouter(ProcessRouter):
    """HAProxy in the foreground (``-db``) with an admin socket in its folder."""

    name = "haproxy"
    binary = "haproxy"
    package = "haproxy"
    limitations = LIMITATIONS

    def argv(self) -> list[str]:
        """``haproxy -db -f haproxy.conf``."""
        assert self.dir is not None
        return [self.binary, "-db", "-f", str(self.dir / "haproxy.conf")]

    def config_text(self) -> str:
        """The configuration for the cluster's current state."""
        assert self.dir is not None
        c = self.cluster
        lines = [
            "global", f"    stats socket {self.dir}/admin.sock mode 600 level admin", "    maxconn 512", "",
            "defaults", "    mode http", "    timeout connect 1s", "    timeout client 10s", "    timeout server 3s",
            "    timeout check 500ms", "    option redispatch", "    retries 1", "",
        ]
        for scheme in ("http", "https"):
            bind = f"    bind 127.0.0.1:{self.ports[scheme]}" + (f" ssl crt {c.cert_path}" if scheme == "https" else "")
            lines += [f"frontend fe_{scheme}", bind]
            lines += [f"    use_backend {pool_name(scheme, db)} if {{ path_beg /{db} }}" for db in c.databases()]
            lines.append("")
        for scheme in ("http", "https"):  # one health check per server port; every backend tracks it
            tls = f" ssl verify required ca-file {c.ca_path} sni str(localhost)" if scheme == "https" else ""
            lines += [f"backend check_{scheme}", "    option httpchk",
                      "    http-check send meth GET uri /icm/ping hdr User-Agent fh-icm-haproxy-check",
                      "    default-server inter 300ms fall 1 rise 1"]
            for server in c.servers:
                host, port = c.address(server, scheme)
                lines.append(f"    server {server} {host}:{port} check{tls}")
            lines.append("")
            for db in c.databases():
                lines += [f"backend {pool_name(scheme, db)}", "    balance leastconn"]
                for e in pool_entries(c, scheme, db):
                    track = f"track check_{scheme}/{e.server}"
                    if e.backup:
                        lines.append(f"    server {e.server}_backup {e.host}:{e.port}{tls} {track} backup")
                        continue
                    maxconn = f" maxconn {e.max_users}" if e.max_users else ""
                    disabled = " disabled" if e.restricted else ""
                    lines.append(f"    server {e.server} {e.host}:{e.port}{tls} {track}{maxconn}{disabled}")
                lines.append("")
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        """Start HAProxy, then wait until every server port has been checked once: HAProxy assumes a
        server up before its first check, which a router that has been running never does."""
        super().start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            lines = self.admin("show stat").splitlines()
            head = lines[0].lstrip("# ").split(",") if lines else []
            rows = [line.split(",") for line in lines[1:] if line.startswith("check_")]
            col = head.index("check_status") if "check_status" in head else -1
            statuses = [r[col] for r in rows if col >= 0 and len(r) > col and r[1] not in ("BACKEND", "FRONTEND")]
            if statuses and not any(s.startswith("INI") or not s for s in statuses):
                return
            time.sleep(0.05)

    def admin(self, command: str) -> str:
        """One command on the admin socket; its answer."""
        assert self.dir is not None
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(3)
                sock.connect(str(self.dir / "admin.sock"))
                sock.sendall(command.encode() + b"\n")
                chunks = []
                with contextlib.suppress(TimeoutError):
                    while chunk := sock.recv(65536):
                        chunks.append(chunk)
        except OSError as exc:
            raise ClientStartError(f"haproxy admin socket: {exc}") from exc
        return b"".join(chunks).decode(errors="replace")

    def on_change(self, type_: str, fields: dict[str, Any]) -> None:
        """RESTRICTED -> ``drain`` / ``ready``; Server_MaxUsers -> ``set maxconn server``."""
        if type_ != "icm.server.state" or self.pid is None:
            return
        server = fields["server"]
        for scheme in ("http", "https"):
            for db in self.cluster.databases():
                if server not in self.cluster.holders(db):
                    continue
                be = pool_name(scheme, db)
                self.admin(f"set server {be}/{server} state {'drain' if fields.get('restricted') else 'ready'}")
                self.admin(f"set maxconn server {be}/{server} {fields.get('max_users') or 0}")
        self.record_reconfigured(fields)


def haproxy_router(cluster: Any, history: Any = None, **options: Any) -> HaproxyRouter:
    """Factory of the ``haproxy`` ICM router."""
    return HaproxyRouter(cluster, history, **options)
