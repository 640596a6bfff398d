"""Real TCP servers on 127.0.0.1 for the fault-proxy tests: echo, sink, and sender.

Each runs its accept loop and connections on threads and stops everything in :meth:`close`.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable


class TcpServer:
    """A threaded TCP server on 127.0.0.1 with a free port; ``handler(conn)`` runs per connection."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self._handler = handler
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port: int = self._sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self.accepted = 0
        t = threading.Thread(target=self._accept_loop, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self.accepted += 1
                self._conns.append(conn)
                t = threading.Thread(target=self._run, args=(conn,), daemon=True)
                self._threads.append(t)
            t.start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self._handler(conn)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def close(self) -> None:
        """Stop accepting, close every connection and join the threads."""
        with self._lock:
            self._closed = True
            conns = list(self._conns)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> TcpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def echo_handler(conn: socket.socket) -> None:
    """Send back everything received."""
    while True:
        data = conn.recv(65536)
        if not data:
            return
        conn.sendall(data)


def sink_handler(counter: list[int]) -> Callable[[socket.socket], None]:
    """Read and discard; adds the byte count to ``counter[0]``."""
    def handler(conn: socket.socket) -> None:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            counter[0] += len(data)
    return handler


def sender_handler(payload: bytes, close_after: bool = True, then_wait: float = 0.0
                   ) -> Callable[[socket.socket], None]:
    """Send ``payload`` on connect, then close (or keep the connection until the peer closes)."""
    def handler(conn: socket.socket) -> None:
        conn.sendall(payload)
        if then_wait:
            time.sleep(then_wait)
        if not close_after:
            while conn.recv(65536):
                pass
    return handler


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    """A TCP_NODELAY client socket connected to 127.0.0.1:port."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """Read exactly ``n`` bytes (raises EOFError if the peer closes first)."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"peer closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_all(sock: socket.socket) -> bytes:
    """Read until EOF."""
    buf = bytearray()
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return bytes(buf)
        buf += chunk


def round_trip(sock: socket.socket, payload: bytes = b"ping") -> float:
    """Seconds for ``payload`` to come back through an echo path."""
    t0 = time.monotonic()
    sock.sendall(payload)
    recv_exactly(sock, len(payload))
    return time.monotonic() - t0


def wait_until(predicate: Callable[[], bool], timeout: float = 3.0, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until true or ``timeout``; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
