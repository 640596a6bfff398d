"""``nginx``: real nginx 1.22 (Debian, open-source build) as an ICM-profile router, configured from the
cluster. It proxies instead of redirecting, so the verdicts judge which server served each request
(observed at the servers).

What the configuration expresses, per database and scheme (an ``upstream http_mail`` /
``https_mail`` for ``/mail.nsf``):

* candidates: the servers holding a replica (ICM-1 at start-up; replica marks cannot be expressed);
* probes: none - open-source nginx has no active health checks, only passive ones (``max_fails=1
  fail_timeout=2s``, ``proxy_next_upstream error timeout``): a server is found dead by sending it a
  request (ICM-3);
* least loaded: ``least_conn`` - nginx's own connections, not the servers' sessions (ICM-5);
* MAXUSERS: ``max_conns`` per server = ``Server_MaxUsers``;
* RESTRICTED: the server marked ``down`` (the configuration rewritten and nginx reloaded, ``-s reload``);
* last resort: each server listed a second time as ``backup``.

BUSY (the availability index) has no nginx counterpart."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from harness.clients.icm.pools import pool_entries, pool_name
from harness.clients.icm.process import ProcessRouter
from harness.errors import ClientStartError
from harness.topology.process import database_user

LIMITATIONS = {
    "ICM-1": "replica marks (Out of Service, Pending Delete) have no nginx counterpart: only the servers "
             "holding a replica at start-up are in an upstream",
    "ICM-2": "no availability index: nginx sees its own connections, not the server's sessions; BUSY "
             "(Server_Availability_Threshold) cannot be expressed",
    "ICM-3": "open-source nginx has no active health checks: servers are not pinged, a dead one is found by "
             "sending it a request (passive max_fails)",
    "ICM-5": "least_conn counts nginx's own connections, not the servers' load",
    "ICM-7": "a proxy: requests after a server failure go to another server without an error",
}


class NginxRouter(ProcessRouter):
    """nginx in the foreground (``daemon off``), everything in its folder."""

    name = "nginx"
    binary = "nginx"
    package = "nginx"
    limitations = LIMITATIONS

    def argv(self) -> list[str]:
        """``nginx -p DIR -c nginx.conf``."""
        assert self.dir is not None
        return [self.binary, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf"), "-e", str(self.dir / "error.log")]

    def config_text(self) -> str:
        """The configuration for the cluster's current state."""
        assert self.dir is not None
        c, d = self.cluster, self.dir
        out = ["daemon off;", "worker_processes 1;", f"pid {d}/nginx.pid;", f"error_log {d}/error.log warn;",
               "events { worker_connections 256; }", "http {", f"  access_log {d}/access.log;",
               f"  client_body_temp_path {d}/body;", f"  proxy_temp_path {d}/proxy;",
               f"  fastcgi_temp_path {d}/fastcgi;", f"  uwsgi_temp_path {d}/uwsgi;", f"  scgi_temp_path {d}/scgi;",
               "  proxy_connect_timeout 1s;", "  proxy_read_timeout 3s;", "  proxy_next_upstream error timeout;",
               "  proxy_http_version 1.1;", '  proxy_set_header Connection "";', "  keepalive_timeout 0;"]
        for scheme in ("http", "https"):
            for db in c.databases():
                out.append(f"  upstream {pool_name(scheme, db)} {{")
                out.append("    least_conn;")
                for e in pool_entries(c, scheme, db):
                    if e.backup:
                        extra = " backup"
                    else:
                        extra = (f" max_conns={e.max_users}" if e.max_users else "") + (" down" if e.restricted else "")
                    out.append(f"    server {e.host}:{e.port} max_fails=1 fail_timeout=2s{extra};")
                out.append("  }")
        for scheme in ("http", "https"):
            listen = f"127.0.0.1:{self.ports[scheme]}" + (" ssl" if scheme == "https" else "")
            out += ["  server {", f"    listen {listen};"]
            if scheme == "https":
                out += [f"    ssl_certificate {c.cert_path};", f"    ssl_certificate_key {c.cert_path};"]
            for db in c.databases():
                out += [f"    location /{db} {{", f"      proxy_pass {scheme}://{pool_name(scheme, db)};"]
                if scheme == "https":
                    out += ["      proxy_ssl_verify on;", f"      proxy_ssl_trusted_certificate {c.ca_path};",
                            "      proxy_ssl_name localhost;"]
                out.append("    }")
            out.append("  }")
        out.append("}")
        return "\n".join(out) + "\n"

    def on_change(self, type_: str, fields: dict[str, Any]) -> None:
        """RESTRICTED -> ``down``, Server_MaxUsers -> ``max_conns``: rewrite the configuration and reload."""
        if type_ != "icm.server.state" or self.pid is None or self.dir is None:
            return
        self.write_config()
        before = _workers(self.pid)
        res = subprocess.run([*self.argv(), "-s", "reload"], capture_output=True, text=True, timeout=10,
                             **database_user().popen_kwargs())
        if res.returncode != 0:
            raise ClientStartError(f"nginx -s reload failed: {(res.stderr or res.stdout).strip()[-300:]}")
        deadline = time.monotonic() + 5  # the reload is done once a worker with the new configuration runs
        while time.monotonic() < deadline and not (_workers(self.pid) - before):
            time.sleep(0.01)
        self.record_reconfigured(fields)


def _workers(master: int) -> set[int]:
    """PIDs of the nginx master's worker processes."""
    try:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    except OSError:
        return set()
    return {int(c) for c in children}


def nginx_router(cluster: Any, history: Any = None, **options: Any) -> NginxRouter:
    """Factory of the ``nginx`` ICM router."""
    return NginxRouter(cluster, history, **options)
