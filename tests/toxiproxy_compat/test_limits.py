"""Bad input to the API: addresses, bodies and queries get a one-line error, never a traceback or a
500 from the embedded server; where real 2.12 differs the test says how (docs/toxiproxy.md)."""

from __future__ import annotations

import socket

import httpx
import pytest
from tcp_servers import connect, round_trip

BAD_LISTEN = ["127.0.0.1:70000", "127.0.0.1:-1", "127.0.0.1:x", "127.0.0.1", "127.0.0.1:99999999999999999999"]


def raw(toxi, method: str, path: str, **kw) -> httpx.Response:
    with httpx.Client(base_url=toxi.client.url, timeout=10) as http:
        return http.request(method, path, **kw)


@pytest.mark.parametrize("listen", BAD_LISTEN)
def test_listen_with_a_bad_port_is_rejected(toxi, echo, listen) -> None:
    """A listen port outside 0..65535 (or none) is refused and nothing is bound: 400 on the
    embedded server (it is bad input), 500 on real 2.12 (its bind error). The embedded server
    used to bind 70000 mod 65536 = 4464."""
    name = toxi.name("badlisten")
    toxi.created.append(name)
    resp = raw(toxi, "POST", "/proxies", json={"name": name, "listen": listen, "upstream": echo.address})
    assert resp.status_code == (400 if toxi.kind == "embedded" else 500), resp.text
    assert "port" in resp.json()["error"]
    assert name not in toxi.client.proxies()
    p = toxi.proxy(echo.address)
    patched = raw(toxi, "PATCH", f"/proxies/{p.name}", json={"listen": listen})
    assert patched.status_code == (400 if toxi.kind == "embedded" else 500), patched.text
    if toxi.kind == "embedded":  # real 2.12 has already closed the old listener by then
        with connect(p.listen_port) as s:
            round_trip(s)


def test_localhost_listen_binds_loopback(toxi, echo) -> None:
    """``localhost:0`` binds 127.0.0.1 on both servers."""
    name = toxi.name("lh")
    toxi.created.append(name)
    p = toxi.client.create_proxy(name, echo.address, listen="localhost:0")
    assert p.listen_host == "127.0.0.1" and p.listen_port > 0
    with connect(p.listen_port) as s:
        round_trip(s)


@pytest.mark.embedded_only(reason="deliberate difference: real 2.12 binds all interfaces ([::]) for a listen "
                           "address without a host; the embedded server binds loopback")
def test_listen_without_host_binds_loopback_only(toxi, echo) -> None:
    """Embedded only: real 2.12 binds all interfaces here. ``":0"`` (no host) binds 127.0.0.1, never every
    interface: the proxy is not reachable on another address of this machine."""
    name = toxi.name("nohost")
    toxi.created.append(name)
    p = toxi.client.create_proxy(name, echo.address, listen=":0")
    assert p.listen == f"127.0.0.1:{p.listen_port}"
    with connect(p.listen_port) as s:
        round_trip(s)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outward address
        outward = probe.getsockname()[0]
    except OSError:
        outward = None
    finally:
        probe.close()
    if outward and not outward.startswith("127."):
        with pytest.raises(OSError):
            socket.create_connection((outward, p.listen_port), timeout=1).close()


@pytest.mark.embedded_only(reason="deliberate difference: real 2.12 resolves host names in listen and "
                           "accepts any upstream string (a bad one fails only when a client connects)")
def test_names_and_malformed_upstreams_are_400(toxi, echo) -> None:
    """Embedded only: real 2.12 resolves names and accepts any upstream string. A listen host must
    be an IP address or localhost (no DNS look-up happens); an upstream must be
    ``host:port`` with a port 1..65535; a disabled proxy is checked the same way."""
    cases = [({"listen": "db.example.invalid:0", "upstream": echo.address}, "must be an IP address"),
             ({"listen": "127.0.0.1:0", "upstream": "127.0.0.1:70000"}, "invalid port"),
             ({"listen": "127.0.0.1:0", "upstream": "127.0.0.1:0"}, "invalid port"),
             ({"listen": "127.0.0.1:0", "upstream": "nohostport"}, "missing port"),
             ({"listen": "127.0.0.1:0", "upstream": ":5432"}, "missing host"),
             ({"listen": "127.0.0.1:70000", "upstream": echo.address, "enabled": False}, "invalid port")]
    for i, (fields, message) in enumerate(cases):
        name = toxi.name(f"n{i}")
        toxi.created.append(name)
        resp = raw(toxi, "POST", "/proxies", json={"name": name, **fields})
        assert resp.status_code == 400 and message in resp.json()["error"], (fields, resp.text)
        assert name not in toxi.client.proxies()


@pytest.mark.embedded_only(reason="deliberate difference: real 2.12 sets no body size limit; the embedded "
                           "server answers 413 beyond 1 MiB and 400 beyond 32 levels of nesting")
def test_body_size_and_nesting_limits(toxi, echo) -> None:
    """Embedded only: real 2.12 has no such limits. A body nested 100 000 deep is a 400 (it was a 500 with
    a traceback); a 2 MiB body is a 413; the server keeps serving."""
    deep = b"[" * 100_000 + b"]" * 100_000
    for path in ("/proxies", "/populate"):
        resp = raw(toxi, "POST", path, content=deep)
        assert resp.status_code == 400 and "nested deeper than 32" in resp.json()["error"], resp.text
    p = toxi.proxy(echo.address)
    nested = b'{"type": "latency", "attributes": ' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"}"
    resp = raw(toxi, "POST", f"/proxies/{p.name}/toxics", content=nested)
    assert resp.status_code == 400, resp.text
    big = b'{"name": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    resp = raw(toxi, "POST", "/proxies", content=big)
    assert resp.status_code == 413 and "too large" in resp.json()["error"], resp.text[:200]
    resp = raw(toxi, "POST", "/proxies", content=b"\xff\xfe not utf-8")
    assert resp.status_code == 400, resp.text
    with connect(p.listen_port) as s:
        round_trip(s)


@pytest.mark.embedded_only(reason="GET /events is an extension of the embedded server")
def test_events_query_is_validated(toxi) -> None:
    """Embedded only: ``GET /events`` is an extension. ``since`` >= 0 and ``limit`` 1..100000, both
    integers: anything else is a 400 naming the parameter (``limit=0`` was a 500 with a traceback)."""
    for query in ("limit=0", "limit=-1", "limit=abc", "limit=1000001", "since=-1", "since=1.5", "since=",
                  "limit=" + "9" * 30):
        resp = raw(toxi, "GET", f"/events?{query}")
        assert resp.status_code == 400, (query, resp.text)
        assert query.split("=")[0] in resp.json()["error"]
    assert raw(toxi, "GET", "/events?since=0&limit=1").status_code == 200
