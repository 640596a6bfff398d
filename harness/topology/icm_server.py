"""One server node of the ICM cluster stand-in (RULEBOOK ICM-1 … ICM-7, docs/icm.md): its load and
thresholds (:class:`ServerSettings`, ICM-2's availability index), its state (:class:`ServerNode`)
and its HTTP / HTTPS listeners (:class:`Listener`, serving through :class:`RequestHandler`), which
drop every open connection at once when the server fails (ICM-7). The cluster itself is
:class:`harness.topology.icm.IcmCluster`."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import socketserver
import ssl
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.topology.icm import IcmCluster


@dataclass
class ServerSettings:
    """One server's load and thresholds (Domino notes.ini variables, ICM-2)."""

    sessions: int = 0  # open sessions: the load that drives the availability index
    capacity: int = 100  # sessions at which the index reaches 0 (interpretation, docs/icm.md)
    availability_threshold: int = 0  # Server_Availability_Threshold (0: never BUSY)
    max_users: int = 0  # Server_MaxUsers (0: no limit)
    restricted: int = 0  # Server_Restricted 0-4 (non-zero: RESTRICTED)

    def index(self) -> int:
        """The availability index 0-100 (ICM-2 interpretation: 100 - 100 * sessions / capacity)."""
        return availability_index(self.sessions, self.capacity)

    def to_dict(self) -> dict[str, int]:
        """The ``icm.server.state`` fields."""
        return asdict(self)


def availability_index(sessions: int, capacity: int) -> int:
    """ICM-2 (interpretation): Domino's expansion factor mapped to 0-100 as ``100 - 100 * sessions /
    capacity``, rounded down, never below 0."""
    if capacity <= 0:
        return 0
    return max(0, 100 - (100 * sessions + capacity - 1) // capacity)


@dataclass
class ServerNode:
    """One server node: its replicas, settings, listeners and sessions."""

    name: str
    databases: tuple[str, ...]
    settings: ServerSettings = field(default_factory=ServerSettings)
    ports: dict[str, int] = field(default_factory=dict)  # scheme -> the listener's own port
    proxies: dict[str, tuple[str, str]] = field(default_factory=dict)  # scheme -> (proxy name, listen)
    listeners: dict[str, Listener] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)  # session cookie -> user
    up: bool = False


class RequestHandler(http.server.BaseHTTPRequestHandler):
    """Serves one node's requests: ``/icm/ping`` (ICM-3 probe), ``/<db>`` (a replica's data)."""

    protocol_version = "HTTP/1.1"
    server: Listener

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: what a node served goes to the history instead."""

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        """A ping may be a HEAD."""
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        """Answer a ping or a database request; record it."""
        self.server.cluster._serve(self, self.server.node, self.server.scheme)

    def reply(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        """Send a JSON answer (``X-ICM-Server`` names the node)."""
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-ICM-Server", self.server.node)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


class Listener(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """One listener of a node (HTTP, or HTTPS with the cluster's certificate); tracks its
    connections so a failing server drops them all at once (ICM-7)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, cluster: IcmCluster, node: str, scheme: str, port: int, context: ssl.SSLContext | None) -> None:
        self.cluster, self.node, self.scheme, self.context = cluster, node, scheme, context
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", port), RequestHandler)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """TLS handshake on the request's own thread (a slow client never blocks accept)."""
        with self.lock:
            self.open.add(request)
        try:
            if self.context is not None:
                request.settimeout(10)
                try:
                    wrapped = self.context.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    return
                with self.lock:  # the wrapped socket took over the descriptor
                    self.open.discard(request)
                    self.open.add(wrapped)
                request = wrapped
                request.settimeout(None)
            super().process_request_thread(request, client_address)
        finally:
            with self.lock:
                self.open.discard(request)

    def fail(self) -> None:
        """Stop accepting and drop every open connection (the server fails)."""
        self.shutdown()
        self.server_close()
        with self.lock:
            conns = list(self.open)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()
