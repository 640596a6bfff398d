"""Unit tests of the typed Toxiproxy client: errors, timeouts, dataclasses (real TCP, no mocks)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from harness.errors import ProxyError
from harness.toxiproxy import (
    EmbeddedToxiproxy,
    Proxy,
    Toxic,
    ToxiproxyAPIError,
    ToxiproxyClient,
    ToxiproxyUnreachableError,
)


@pytest.fixture
def tp() -> Iterator[EmbeddedToxiproxy]:
    with EmbeddedToxiproxy() as server:
        yield server


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with ToxiproxyClient(url, timeout=1) as client:
        with pytest.raises(ToxiproxyUnreachableError) as info:
            client.proxies()
    assert isinstance(info.value, ProxyError)
    assert url in str(info.value) and info.value.url == f"{url}/proxies"
    assert not ToxiproxyClient(url, timeout=1).is_available()


def test_request_timeout() -> None:
    silent = socket.socket()  # accepts (kernel backlog) but never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with ToxiproxyClient(url, timeout=0.3) as client:
            with pytest.raises(ToxiproxyUnreachableError) as info:
                client.version()
        assert "within 0.3 s" in str(info.value)
    finally:
        silent.close()


def test_api_error_carries_status_and_message(tp: EmbeddedToxiproxy) -> None:
    with ToxiproxyClient(tp.url) as client:
        with pytest.raises(ToxiproxyAPIError) as info:
            client.delete_toxic("missing", "x")
    err = info.value
    assert err.status == 404 and err.message == "proxy not found"
    assert "HTTP 404" in str(err) and "/proxies/missing/toxics/x" in str(err)


def test_full_cycle_with_dataclasses(tp: EmbeddedToxiproxy) -> None:
    with ToxiproxyClient(tp.url) as client:
        p = client.create_proxy("db", "127.0.0.1:1", node="n1")
        assert isinstance(p, Proxy) and p.listen_host == "127.0.0.1" and p.listen_port > 0
        assert p.node == "n1"
        t = client.add_toxic("db", "bandwidth", stream="upstream", attributes={"rate": 5})
        assert t == Toxic("bandwidth_upstream", "bandwidth", "upstream", 1.0, {"rate": 5})
        t2 = client.update_toxic("db", t.name, attributes={"rate": 7}, toxicity=0.25)
        assert t2.attributes == {"rate": 7} and t2.toxicity == 0.25
        moved = client.update_proxy("db", upstream="127.0.0.1:2")
        assert moved.upstream == "127.0.0.1:2" and moved.toxics == [t2]
        populated = client.populate([Proxy("db2", "127.0.0.1:0", "127.0.0.1:3")])
        assert [x.name for x in populated] == ["db2"] and populated[0].listen_port > 0
        client.reset()
        assert all(x.toxics == [] and x.enabled for x in client.proxies().values())
        client.delete_proxy("db")
        assert set(client.proxies()) == {"db2"}


def test_server_stops_cleanly() -> None:
    before = {t.name for t in threading.enumerate()}
    server = EmbeddedToxiproxy().start()
    url = server.url
    server.stop()
    server.stop()  # idempotent
    assert {t.name for t in threading.enumerate()} <= before
    with ToxiproxyClient(url, timeout=1) as client:
        assert not client.is_available()


def test_api_port_in_use_is_a_clear_error() -> None:
    with EmbeddedToxiproxy() as first:
        with pytest.raises(ProxyError) as info:
            EmbeddedToxiproxy(port=first.api_port).start()
    assert "could not bind" in str(info.value) and "--port" in str(info.value)


def test_populate_with_nothing_answers_null_proxies_like_real(tp: EmbeddedToxiproxy) -> None:
    import httpx

    resp = httpx.post(f"{tp.url}/populate", json=[], timeout=5)
    assert resp.status_code == 201 and resp.json() == {"proxies": None}
    with ToxiproxyClient(tp.url) as client:
        assert client.populate([]) == []
