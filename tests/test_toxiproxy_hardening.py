"""The embedded server under values its checks would now refuse: a toxic task that fails closes its
connection pair and logs why, instead of leaving it hanging with a leaked upstream socket."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest
from toxiproxy_compat.tcp_servers import TcpServer, connect, round_trip, wait_until

from harness.toxiproxy import EmbeddedToxiproxy, ToxiproxyAPIError, ToxiproxyClient
from harness.toxiproxy.api import ToxiproxyServer

HUGE = int("1" + "0" * 400)  # a hostile request's value: accepted, and every later connection hung


class Upstream:
    """An echo server that counts the connections it saw close (a leaked socket never does)."""

    def __init__(self) -> None:
        self.closed = 0
        self._lock = threading.Lock()
        self.server = TcpServer(self._handle)

    def _handle(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:
            pass
        with self._lock:
            self.closed += 1


@pytest.fixture
def setup() -> Iterator[tuple[EmbeddedToxiproxy, ToxiproxyClient, Upstream]]:
    up = Upstream()
    with EmbeddedToxiproxy() as tp, ToxiproxyClient(tp.url) as client:
        yield tp, client, up
    up.server.close()


def _poke(tp: EmbeddedToxiproxy, proxy: str, toxic: str, **attributes: int) -> None:
    """Set attributes behind the API's back, as the unchecked server used to accept them."""
    def poke(server: ToxiproxyServer) -> None:
        state = server.proxies[proxy].toxics[toxic]
        state.attributes.update(attributes)
        state.touch()
        server.proxies[proxy].toxics_changed()

    tp.call(poke)


def test_huge_latency_is_refused_by_the_api(setup) -> None:
    tp, client, up = setup
    p = client.create_proxy("db", up.server.address)
    for type_, key in (("latency", "latency"), ("latency", "jitter"), ("timeout", "timeout")):
        with pytest.raises(ToxiproxyAPIError) as info:
            client.add_toxic(p.name, type_, attributes={key: HUGE})
        assert info.value.status == 400 and "401-digit number" in info.value.message
    assert client.toxics(p.name) == []


@pytest.mark.parametrize(("type_", "stream", "key"), [("latency", "downstream", "latency"),
                                                      ("timeout", "upstream", "timeout")])
def test_a_failing_toxic_closes_its_connection_pair_and_logs_why(setup, caplog, type_, stream, key) -> None:
    tp, client, up = setup
    caplog.set_level(logging.ERROR, logger="harness.toxiproxy.server")
    p = client.create_proxy("db", up.server.address)
    client.add_toxic(p.name, type_, stream=stream, name="bad", attributes={key: 10_000})
    seen: list = []
    tp.subscribe(seen.append)
    _poke(tp, p.name, "bad", **{key: HUGE})
    for n in (1, 2):  # a later connection fails the same way: closed, not hung
        try:
            with connect(p.listen_port, timeout=3) as s:
                s.sendall(b"x")
                s.settimeout(3)
                assert s.recv(10) == b""
        except ConnectionResetError:
            pass  # closed with a reset (under load even before connect() returned): it did not hang
        assert wait_until(lambda n=n: up.closed == n, 3), "the upstream socket leaked"
    closed = [e for e in seen if e.type == "conn.closed"]
    assert len(closed) == 2 and all(e.fields["reason"] == "internal error: OverflowError" for e in closed)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all("failed: OverflowError" in m and "closing it" in m for m in messages)
    client.delete_toxic(p.name, "bad")
    with connect(p.listen_port) as s:  # the proxy itself is fine
        round_trip(s)
