"""HTTP API shapes, status codes and error messages of Toxiproxy 2.12 (TOXIPROXY.md)."""

from __future__ import annotations

import socket

import httpx
import pytest
from tcp_servers import connect, round_trip

from harness.toxiproxy import ToxiproxyAPIError


def raw(toxi, method: str, path: str, **kw) -> httpx.Response:
    with httpx.Client(base_url=toxi.client.url, timeout=5) as http:
        return http.request(method, path, **kw)


def test_version(toxi) -> None:
    resp = raw(toxi, "GET", "/version")
    assert resp.status_code == 200
    assert toxi.client.version().startswith("2.")


def test_create_returns_201_and_rewrites_port_0(toxi, echo) -> None:
    name = toxi.name()
    toxi.created.append(name)
    resp = raw(toxi, "POST", "/proxies", json={"name": name, "listen": "127.0.0.1:0",
                                                "upstream": echo.address})
    assert resp.status_code == 201
    body = resp.json()
    assert {"name", "listen", "upstream", "enabled", "toxics"} <= set(body)
    assert body["name"] == name and body["upstream"] == echo.address and body["enabled"] is True
    assert body["toxics"] == []
    host, port = body["listen"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    with connect(int(port)) as s:
        s.sendall(b"hello")
        assert s.recv(5) == b"hello"


def test_create_errors(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    dup = raw(toxi, "POST", "/proxies", json={"name": p.name, "listen": "127.0.0.1:0",
                                              "upstream": echo.address})
    assert dup.status_code == 409
    assert dup.json() == {"error": "proxy already exists", "status": 409}
    no_name = raw(toxi, "POST", "/proxies", json={"upstream": echo.address})
    assert no_name.status_code == 400
    assert no_name.json()["error"] == "missing required field: name"
    no_up = raw(toxi, "POST", "/proxies", json={"name": toxi.name("x")})
    assert no_up.status_code == 400
    assert no_up.json()["error"] == "missing required field: upstream"
    bad = raw(toxi, "POST", "/proxies", content=b"{not json")
    assert bad.status_code == 400
    assert bad.json()["error"].startswith("bad request body")


def test_bind_error_is_500(toxi, echo) -> None:
    resp = raw(toxi, "POST", "/proxies", json={"name": toxi.name("busy"), "listen": echo.address,
                                                "upstream": echo.address})
    toxi.created.append(toxi.name("busy"))
    assert resp.status_code == 500
    assert "address already in use" in resp.json()["error"]
    assert toxi.name("busy") not in toxi.client.proxies()


def test_get_list_delete(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    assert toxi.client.get_proxy(p.name).listen == p.listen
    assert p.name in toxi.client.proxies()
    resp = raw(toxi, "DELETE", f"/proxies/{p.name}")
    assert resp.status_code == 204
    missing = raw(toxi, "GET", f"/proxies/{p.name}")
    assert missing.status_code == 404
    assert missing.json() == {"error": "proxy not found", "status": 404}
    assert raw(toxi, "DELETE", f"/proxies/{p.name}").status_code == 404
    with pytest.raises(ToxiproxyAPIError) as info:
        toxi.client.get_proxy(p.name)
    assert info.value.status == 404 and info.value.message == "proxy not found"


def test_patch_keeps_omitted_fields_and_disable_enable(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "latency", attributes={"latency": 1})
    off = toxi.client.update_proxy(p.name, enabled=False)
    assert off.enabled is False and off.listen == p.listen and off.upstream == echo.address
    with pytest.raises(ConnectionRefusedError):
        connect(p.listen_port)
    on = toxi.client.update_proxy(p.name, enabled=True)
    assert on.enabled is True and on.listen == p.listen  # same port re-bound
    assert [t.name for t in on.toxics] == ["latency_downstream"]  # toxics kept
    with connect(p.listen_port) as s:
        round_trip(s)
    # deprecated POST form of the update still works
    resp = raw(toxi, "POST", f"/proxies/{p.name}", json={"enabled": False})
    assert resp.status_code == 200 and resp.json()["enabled"] is False
    assert raw(toxi, "PATCH", "/proxies/nope_" + p.name, json={}).status_code == 404


def test_populate(toxi, echo) -> None:
    a, b = toxi.name("a"), toxi.name("b")
    toxi.created += [a, b]
    resp = raw(toxi, "POST", "/populate", json=[
        {"name": a, "listen": "127.0.0.1:0", "upstream": echo.address},
        {"name": b, "listen": "127.0.0.1:0", "upstream": echo.address}])
    assert resp.status_code == 201
    proxies = resp.json()["proxies"]
    assert [p["name"] for p in proxies] == [a, b]
    listen_a = proxies[0]["listen"]
    # an unchanged proxy is left as is (its connection survives)
    with connect(int(listen_a.rsplit(":", 1)[1])) as s:
        round_trip(s)
        again = toxi.client.populate([{"name": a, "listen": listen_a, "upstream": echo.address}])
        assert again[0].listen == listen_a
        assert round_trip(s) < 1.0
    # invalid entries are rejected before anything is applied
    c = toxi.name("c")
    bad = raw(toxi, "POST", "/populate", json=[
        {"name": c, "listen": "127.0.0.1:0", "upstream": echo.address}, {"name": toxi.name("d")}])
    assert bad.status_code == 400
    assert c not in toxi.client.proxies()


def test_toxic_add_defaults_and_errors(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    resp = raw(toxi, "POST", f"/proxies/{p.name}/toxics", json={"type": "latency",
                                                                  "attributes": {"latency": 5}})
    assert resp.status_code == 200
    assert resp.json() == {"name": "latency_downstream", "type": "latency", "stream": "downstream",
                           "toxicity": 1.0, "attributes": {"latency": 5, "jitter": 0}}
    dup = raw(toxi, "POST", f"/proxies/{p.name}/toxics", json={"type": "latency"})
    assert dup.status_code == 409 and dup.json()["error"] == "toxic already exists"
    bad_type = raw(toxi, "POST", f"/proxies/{p.name}/toxics", json={"type": "nope"})
    assert bad_type.status_code == 400 and bad_type.json()["error"] == "invalid toxic type"
    bad_stream = raw(toxi, "POST", f"/proxies/{p.name}/toxics",
                     json={"type": "latency", "stream": "sideways"})
    assert bad_stream.status_code == 400
    assert bad_stream.json()["error"] == "stream was invalid, can be either upstream or downstream"
    no_proxy = raw(toxi, "POST", f"/proxies/{p.name}x/toxics", json={"type": "latency"})
    assert no_proxy.status_code == 404 and no_proxy.json()["error"] == "proxy not found"
    assert raw(toxi, "POST", f"/proxies/{p.name}/toxics", content=b"[").status_code == 400


def test_toxic_list_get_patch_delete(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "bandwidth", stream="downstream", attributes={"rate": 100})
    toxi.client.add_toxic(p.name, "timeout", stream="upstream", name="t_up",
                          attributes={"timeout": 5000})
    listed = toxi.client.toxics(p.name)
    assert [(t.name, t.stream) for t in listed] == [("t_up", "upstream"),
                                                   ("bandwidth_downstream", "downstream")]
    assert toxi.client.get_toxic(p.name, "t_up").attributes == {"timeout": 5000}
    resp = raw(toxi, "PATCH", f"/proxies/{p.name}/toxics/t_up",
               json={"attributes": {"timeout": 10}, "toxicity": 0.5, "type": "latency"})
    assert resp.status_code == 200
    body = resp.json()
    assert body["attributes"] == {"timeout": 10} and body["toxicity"] == 0.5
    assert body["type"] == "timeout" and body["stream"] == "upstream"  # ignored
    missing = raw(toxi, "PATCH", f"/proxies/{p.name}/toxics/nope", json={})
    assert missing.status_code == 404 and missing.json()["error"] == "toxic not found"
    assert raw(toxi, "DELETE", f"/proxies/{p.name}/toxics/t_up").status_code == 204
    assert raw(toxi, "GET", f"/proxies/{p.name}/toxics/t_up").status_code == 404
    assert raw(toxi, "GET", f"/proxies/{p.name}x/toxics").status_code == 404


def test_reset_enables_and_removes_toxics(toxi, echo) -> None:
    if toxi.kind == "external":
        pytest.skip("POST /reset would disturb other users of a shared external server")
    p = toxi.proxy(echo.address)
    toxi.client.add_toxic(p.name, "latency", attributes={"latency": 500})
    toxi.client.disable_proxy(p.name)
    resp = raw(toxi, "POST", "/reset")
    assert resp.status_code == 204
    after = toxi.client.get_proxy(p.name)
    assert after.enabled is True and after.toxics == [] and after.listen == p.listen
    with connect(p.listen_port) as s:
        assert round_trip(s) < 0.2


@pytest.mark.embedded_only(reason="deliberate difference: the real server accepts these and crashes")
def test_invalid_attributes_are_400(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    for type_, attrs in (("slicer", {"average_size": 0}), ("latency", {"latency": -1}),
                         ("bandwidth", {"rate": -5}), ("timeout", {"timeout": -1})):
        with pytest.raises(ToxiproxyAPIError) as info:
            toxi.client.add_toxic(p.name, type_, attributes=attrs)
        assert info.value.status == 400
        assert "must be" in info.value.message
    assert toxi.client.toxics(p.name) == []


def test_listen_conflict_on_patch_is_500(toxi, echo) -> None:
    p = toxi.proxy(echo.address)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    try:
        port = blocker.getsockname()[1]
        with pytest.raises(ToxiproxyAPIError) as info:
            toxi.client.update_proxy(p.name, listen=f"127.0.0.1:{port}")
        assert info.value.status == 500
    finally:
        blocker.close()
