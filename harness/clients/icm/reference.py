"""``reference``: the harness's own Internet Cluster Manager (RULEBOOK ICM-1..6, seed 004). An HTTP and
an HTTPS listener; for a request of ``/<database>`` it

1. reads the cluster database directory: servers holding a replica not marked *Out of Service* or
   *Pending Delete* are the candidates (ICM-1);
2. reads each candidate's availability index and states BUSY / MAXUSERS / RESTRICTED (ICM-2);
3. pings each candidate's port of the request's scheme through the fault proxy, ``GET /icm/ping``
   (ICM-3; the pings are connections the network sees);
4. excludes the unreachable, RESTRICTED, BUSY and MAXUSERS servers (ICM-4);
5. redirects (302 + ``Location``) to the remaining server with the highest index (ICM-5), the tie
   broken by ``tie_break`` (``first`` / ``last`` in cluster order: the docs do not say);
6. else to the reachable BUSY / MAXUSERS / RESTRICTED server with the highest index, never to an
   unreachable one (ICM-6); with none reachable it answers ``503``.

Its counters (``/icm/counters``) are Domino's: redirects successful, unsuccessful, cluster busy.
It never forwards a request, so a client whose server fails gets that server's error and must come
back (ICM-7). Every decision is recorded as ``icm.router.decision``."""

from __future__ import annotations

import http.client
import http.server
import json
import socketserver
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness.errors import ConfigError

TIE_BREAKS = ("first", "last")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Listener

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: decisions go to the history."""

    def do_GET(self) -> None:  # noqa: N802
        """Route one request."""
        status, body, headers = self.server.router.route(self.server.scheme, self.path,
                                                         self.headers.get("X-Request-Id"))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class _Listener(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self, router: ReferenceRouter, scheme: str, context: ssl.SSLContext | None) -> None:
        self.router, self.scheme, self.context = router, scheme, context
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """TLS on the request's own thread."""
        if self.context is not None:
            try:
                request.settimeout(10)
                request = self.context.wrap_socket(request, server_side=True)
                request.settimeout(None)
            except (OSError, ssl.SSLError):
                request.close()
                return
        super().process_request_thread(request, client_address)


class ReferenceRouter:
    """The reference ICM (see module docstring). ``probe_timeout``: seconds a ping may take before the
    server counts as not answering."""

    name = "reference"
    mode = "redirect"
    limitations: dict[str, str] = {}

    def __init__(self, cluster: Any, history: Any = None, probe_timeout: float = 0.5, tie_break: str = "first") -> None:
        if tie_break not in TIE_BREAKS:
            raise ConfigError(f"tie_break must be one of {', '.join(TIE_BREAKS)}, not {tie_break!r}")
        if not 0 < probe_timeout <= 30:
            raise ConfigError(f"probe_timeout must be > 0 and <= 30 seconds, not {probe_timeout!r}")
        self.cluster = cluster
        self.history = history
        self.probe_timeout = probe_timeout
        self.tie_break = tie_break
        self._listeners: dict[str, _Listener] = {}
        self._lock = threading.Lock()
        self._counters = {"successful": 0, "unsuccessful": 0, "cluster_busy": 0}
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="icm-probe")
        self._client_context = ssl.create_default_context(cafile=str(cluster.ca_path))

    def start(self) -> None:
        """Listen on HTTP and HTTPS (127.0.0.1, ports chosen by the kernel)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.cluster.cert_path))
        for scheme in ("http", "https"):
            listener = _Listener(self, scheme, context if scheme == "https" else None)
            threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                             name=f"icm-router-{scheme}").start()
            self._listeners[scheme] = listener

    def url(self, scheme: str, path: str = "/") -> str:
        """``http://127.0.0.1:PORT/path``."""
        port = self._listeners[scheme].server_address[1]
        return f"{scheme}://127.0.0.1:{port}{path}"

    def counters(self) -> dict[str, int]:
        """Redirects successful / unsuccessful / cluster busy (Domino's ICM statistics)."""
        with self._lock:
            return dict(self._counters)

    def stop(self) -> None:
        """Stop both listeners and the probe threads."""
        for listener in self._listeners.values():
            listener.shutdown()
            listener.server_close()
        self._listeners.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------ the decision
    def _probe(self, server: str, scheme: str, rid: str | None) -> bool:
        """ICM-3: ``GET /icm/ping`` on ``server``'s ``scheme`` port (through the fault proxy)."""
        host, port = self.cluster.address(server, scheme)
        conn: http.client.HTTPConnection
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=self.probe_timeout, context=self._client_context)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self.probe_timeout)
        try:
            conn.request("GET", f"/icm/ping?for={rid or ''}", headers={"User-Agent": "fh-icm-reference-probe"})
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def route(self, scheme: str, path: str, rid: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Choose a server for ``path`` (ICM-1..6); returns (status, body, headers)."""
        if path.startswith("/icm/counters"):
            return 200, self.counters(), {}
        database = path.partition("?")[0].strip("/").split("/")[0]
        directory = self.cluster.directory()
        replicas = directory["replicas"].get(database)
        if replicas is None:
            return 404, {"error": f"no database {database!r} in the cluster"}, {}
        candidates = [s for s in directory["order"] if s in replicas and replicas[s] is None]
        info: dict[str, dict[str, Any]] = {}
        for s in candidates:
            st = directory["servers"][s]
            states = []
            if st["availability_threshold"] > 0 and st["index"] < st["availability_threshold"]:
                states.append("BUSY")
            if st["max_users"] > 0 and st["sessions"] >= st["max_users"]:
                states.append("MAXUSERS")
            if st["restricted"] != 0:
                states.append("RESTRICTED")
            info[s] = {"server": s, "index": st["index"], "states": states}
        probes = {s: self._pool.submit(self._probe, s, scheme, rid) for s in candidates}
        for s, future in probes.items():
            info[s]["reachable"] = future.result()
        reachable = [s for s in candidates if info[s]["reachable"]]
        available = [s for s in reachable if not info[s]["states"]]
        pool, reason = (available, "available") if available else (reachable, "last-resort")
        chosen = self._lightest(pool, info)
        with self._lock:
            if chosen is None:
                self._counters["unsuccessful"] += 1
            else:
                self._counters["successful"] += 1
                if reason == "last-resort":
                    self._counters["cluster_busy"] += 1
        self._decide(rid, database, scheme, [info[s] for s in candidates], chosen, reason if chosen else "none")
        if chosen is None:
            return 503, {"error": f"no server holding {database} answers"}, {}
        return 302, {"server": chosen}, {"Location": self.cluster.url(chosen, scheme, path)}

    def _lightest(self, pool: list[str], info: dict[str, dict[str, Any]]) -> str | None:
        """ICM-5: the highest availability index; among equals the ``tie_break`` one."""
        if not pool:
            return None
        best = max(info[s]["index"] for s in pool)
        equals = [s for s in pool if info[s]["index"] == best]
        return equals[0] if self.tie_break == "first" else equals[-1]

    def _decide(self, rid: str | None, database: str, scheme: str, candidates: list[dict[str, Any]],
                chosen: str | None, reason: str) -> None:
        if self.history is not None:
            self.history.record("icm.router.decision", router=self.name, request_id=rid, database=database,
                                scheme=scheme, candidates=candidates, chosen=chosen, reason=reason,
                                tie_break=self.tie_break, counters=self.counters())


def reference_router(cluster: Any, history: Any = None, **options: Any) -> ReferenceRouter:
    """Factory of the ``reference`` ICM router."""
    return ReferenceRouter(cluster, history, **options)
