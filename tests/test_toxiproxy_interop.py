"""Interop: the unmaintained toxiproxy-python 0.1.1 client against the embedded server."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import toxiproxy  # noqa: E402  (toxiproxy-python 0.1.1, a dev dependency)
from toxiproxy_compat.tcp_servers import TcpServer, connect, echo_handler, round_trip

from harness.toxiproxy import EmbeddedToxiproxy


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedToxiproxy]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with EmbeddedToxiproxy() as tp:
        yield tp


@pytest.fixture
def echo() -> Iterator[TcpServer]:
    with TcpServer(echo_handler) as s:
        yield s


def test_toxiproxy_python_round_trip(server: EmbeddedToxiproxy, echo: TcpServer) -> None:
    tp = toxiproxy.Toxiproxy()
    tp.update_api_consumer("127.0.0.1", server.api_port)
    assert tp.running()
    assert b"2.12.0" in tp.version()

    proxy = tp.create(upstream=echo.address, name="interop", listen="127.0.0.1:0")
    port = int(proxy.listen.rsplit(":", 1)[1])
    assert port > 0
    assert set(tp.proxies()) == {"interop"}
    with pytest.raises(toxiproxy.server.ProxyExists):
        tp.create(upstream=echo.address, name="interop")

    proxy.add_toxic(type="latency", attributes={"latency": 100})
    assert set(proxy.toxics()) == {"latency_downstream"}
    with connect(port) as s:
        assert round_trip(s) >= 0.09
    proxy.destroy_toxic("latency_downstream")
    assert proxy.toxics() == {}

    proxy.disable()
    with pytest.raises(ConnectionRefusedError):
        connect(port)
    proxy.enable()
    with connect(port) as s:
        assert round_trip(s) < 0.09

    with proxy.down():
        with pytest.raises(ConnectionRefusedError):
            connect(port)
    with connect(port) as s:
        round_trip(s)

    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 0})
    proxy.disable()
    assert tp.reset() is True
    fresh = tp.get_proxy("interop")
    assert fresh.enabled is True and fresh.toxics() == {}
    with connect(port) as s:
        round_trip(s)

    assert tp.destroy(fresh) is True
    assert tp.get_proxy("interop") is None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1)
