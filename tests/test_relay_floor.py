"""The benchmarks' Python relay floor (benchmarks/relay_floor.py): a relay on the persistent
proxy's event loop with no parsing. Its row is only a floor if it relays every byte both ways, passes
an end of connection on, and leaves nothing running when stopped - checked here over real TCP."""

from __future__ import annotations

import importlib.util
import socket
import threading
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "relay_floor", Path(__file__).resolve().parents[1] / "benchmarks" / "relay_floor.py")
assert _SPEC is not None and _SPEC.loader is not None
relay_floor = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(relay_floor)


@pytest.fixture
def echo():
    """An echo server on 127.0.0.1 (one thread per connection); yields its address and the EOFs it saw."""
    srv = socket.create_server(("127.0.0.1", 0))
    eofs: list[int] = []

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)
            eofs.append(1)

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield srv.getsockname(), eofs
    srv.close()


def _read(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return bytes(got)


def test_every_byte_is_relayed_both_ways_under_back_pressure(echo) -> None:
    address, _ = echo
    payload = bytes(range(256)) * 16384  # 4 MiB: more than the socket buffers, so writes pause
    with relay_floor.PythonTcpRelay(address) as relay:
        with socket.create_connection(relay.address, timeout=10) as client:
            sender = threading.Thread(target=client.sendall, args=(payload,))
            sender.start()
            got = _read(client, len(payload))
            sender.join(10)
    assert got == payload


def test_a_client_close_reaches_the_server_and_stop_leaves_no_thread(echo) -> None:
    address, eofs = echo
    relay = relay_floor.PythonTcpRelay(address).start()
    with socket.create_connection(relay.address, timeout=5) as client:
        client.sendall(b"ping")
        assert _read(client, 4) == b"ping"
    for _ in range(100):
        if eofs:
            break
        threading.Event().wait(0.02)
    assert eofs == [1]
    kept = socket.create_connection(relay.address, timeout=5)
    kept.sendall(b"x")
    assert _read(kept, 1) == b"x"
    relay.stop()
    assert kept.recv(1) == b""  # stop closed the relayed connection
    kept.close()
    assert not any(t.name == relay.name for t in threading.enumerate())
    with pytest.raises(OSError):
        socket.create_connection(relay.address, timeout=1).close()


def test_a_dead_server_closes_the_client() -> None:
    dead = socket.create_server(("127.0.0.1", 0))
    address = dead.getsockname()
    dead.close()  # nothing listens there now
    with relay_floor.PythonTcpRelay(address) as relay:
        with socket.create_connection(relay.address, timeout=5) as client:
            client.sendall(b"hello")
            assert client.recv(10) == b""
