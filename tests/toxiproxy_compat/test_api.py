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


REQUEST_ID = "x-toxiproxy-request-id"


def test_reply_shapes_match_real_2_12(toxi, echo) -> None:
    """Content types, the request-id header, ``toxicity`` printed as Go prints a float32, error
    bodies, ``/populate`` errors and unknown routes, as real 2.12 answers them."""
    p = toxi.proxy(echo.address)
    replies = []
    version = raw(toxi, "GET", "/version")
    assert version.headers["content-type"] == "application/json;charset=utf-8"
    created = raw(toxi, "POST", f"/proxies/{p.name}/toxics", json={"type": "latency", "name": "one"})
    half = raw(toxi, "POST", f"/proxies/{p.name}/toxics",
               json={"type": "latency", "name": "half", "toxicity": 0.5})
    replies += [version, created, half]
    for resp in (created, half):
        assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    assert '"toxicity":1}' in created.text and type(created.json()["toxicity"]) is int
    assert half.json()["toxicity"] == 0.5
    missing = raw(toxi, "GET", f"/proxies/{p.name}x")
    dup = raw(toxi, "POST", f"/proxies/{p.name}/toxics", json={"type": "latency", "name": "one"})
    replies += [missing, dup]
    for resp, status, message in ((missing, 404, "proxy not found"), (dup, 409, "toxic already exists")):
        assert resp.status_code == status
        assert resp.headers["content-type"] == "text/plain; charset=utf-8"
        assert resp.headers["x-content-type-options"] == "nosniff"
        assert resp.json() == {"error": message, "status": status}
    bad = raw(toxi, "POST", "/populate", json=[
        {"name": toxi.name("ok"), "listen": "127.0.0.1:0", "upstream": echo.address}, {"name": toxi.name("no")}])
    replies.append(bad)
    assert bad.status_code == 400 and bad.headers["content-type"] == "application/json"
    assert bad.json() == {"error": "missing required field: upstream at proxy 2", "status": 400, "proxies": None}
    unknown = raw(toxi, "GET", "/no/such/route")
    assert unknown.status_code == 404 and unknown.text == "404 page not found\n"
    assert unknown.headers["content-type"] == "text/plain; charset=utf-8"
    wrong_method = raw(toxi, "DELETE", "/version")
    assert wrong_method.status_code == 405 and wrong_method.text == ""
    for resp in replies:
        assert len(resp.headers[REQUEST_ID]) == 20, resp.headers
    assert len({resp.headers[REQUEST_ID] for resp in replies}) == len(replies)


def test_non_json_numbers_are_400_on_both(toxi, echo) -> None:
    """``NaN``/``Infinity`` are not JSON (Go rejects them; Python's decoder would accept them) and a
    toxicity beyond float32 is out of range: 400 on both servers, nothing added."""
    p = toxi.proxy(echo.address)
    for body in (b'{"type": "latency", "toxicity": NaN}', b'{"type": "latency", "toxicity": Infinity}',
                 b'{"type": "latency", "toxicity": 1e39}', b'{"type": "latency", "attributes": {"latency": 1e400}}'):
        resp = raw(toxi, "POST", f"/proxies/{p.name}/toxics", content=body)
        assert resp.status_code == 400, (body, resp.text)
        assert resp.json()["error"].startswith("bad request body"), resp.text
    assert toxi.client.toxics(p.name) == []


# Limits the embedded server enforces where real 2.12 accepts the value and then crashes, hangs or
# misbehaves (docs/toxiproxy.md, "Deliberate differences"): type, attributes, and the message part.
BAD_TOXICS = [
    ("slicer", {"average_size": 0}, "'average_size' of a slicer toxic must be >= 1"),
    ("slicer", {}, "'average_size' of a slicer toxic must be >= 1"),
    ("slicer", {"average_size": 10, "size_variation": 10}, "must be less than 'average_size'"),
    ("slicer", {"average_size": 10, "delay": -1}, "'delay' of a slicer toxic must be >= 0"),
    ("latency", {"latency": -1}, "'latency' of a latency toxic must be >= 0"),
    ("latency", {"latency": int("1" + "0" * 400)}, "must be <= 9223372036854 (ms), got a 401-digit number"),
    ("latency", {"jitter": 2**63 - 1}, "'jitter' of a latency toxic must be <= 9223372036854"),
    ("bandwidth", {"rate": -5}, "'rate' of a bandwidth toxic must be >= 0 (KB/s), got -5; real 2.12 panics"),
    ("bandwidth", {"rate": 2**62}, "'rate' of a bandwidth toxic must be <= 92233720368547758"),
    ("timeout", {"timeout": -1}, "'timeout' of a timeout toxic must be >= 0"),
    ("timeout", {"timeout": int("1" + "0" * 400)}, "'timeout' of a timeout toxic must be <="),
    ("reset_peer", {"timeout": -1}, "'timeout' of a reset_peer toxic must be >= 0"),
    ("slow_close", {"delay": -1}, "'delay' of a slow_close toxic must be >= 0"),
    ("limit_data", {"bytes": -1}, "'bytes' of a limit_data toxic must be >= 0"),
    ("latency", {"latency": "5"}, "'latency' of a latency toxic must be an integer (ms)"),
    ("latency", {"latency": True}, "'latency' of a latency toxic must be an integer (ms)"),
]


@pytest.mark.embedded_only(reason="deliberate difference: real 2.12 accepts these values and then crashes "
                           "(slicer average_size 0, bandwidth rate -5), hangs or treats them as 0")
@pytest.mark.parametrize(("type_", "attrs", "message"), BAD_TOXICS)
def test_invalid_attributes_are_400(toxi, echo, type_, attrs, message) -> None:
    """Embedded only: real 2.12 accepts these and then crashes, hangs or ignores them. Every toxic
    attribute is checked against the range its real Go type implies (int64 ms that must fit a
    time.Duration, rate*100 within int64, slicer sizes >= 1 and variation below the average): a
    one-line 400 naming the attribute and the limit, nothing added; PATCH too."""
    p = toxi.proxy(echo.address)
    with pytest.raises(ToxiproxyAPIError) as info:
        toxi.client.add_toxic(p.name, type_, attributes=attrs)
    assert info.value.status == 400 and message in info.value.message, info.value.message
    assert "\n" not in info.value.message and len(info.value.message) < 200
    assert toxi.client.toxics(p.name) == []
    good = {"slicer": {"average_size": 10}}.get(type_, {})
    before = toxi.client.add_toxic(p.name, type_, name="ok", attributes=good).attributes
    with pytest.raises(ToxiproxyAPIError) as info:
        toxi.client.update_toxic(p.name, "ok", attributes=attrs or {"average_size": 0})
    assert info.value.status == 400
    assert toxi.client.get_toxic(p.name, "ok").attributes == before  # unchanged


def test_largest_durations_are_accepted(toxi, echo) -> None:
    """The limits are the real types': the longest time.Duration in ms is still a valid latency."""
    p = toxi.proxy(echo.address)
    toxic = toxi.client.add_toxic(p.name, "latency", attributes={"latency": 9_223_372_036_854})
    assert toxic.attributes["latency"] == 9_223_372_036_854


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
