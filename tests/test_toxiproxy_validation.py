"""What the embedded Toxiproxy API refuses, checked beside the real Toxiproxy 2.12 binary where it runs
(docs/toxiproxy.md, "What the embedded server accepts" and "Deliberate differences"):

* proxy and toxic names real 2.12 creates but can never address again (``../../../tmp/x``, ``a/b``,
  ``..``) are 400 on the embedded server; every name real can address is accepted by both;
* ``toxicity`` outside 0 … 1 is 400 (real stores it, 200, and acts as if clamped);
* a connection whose request headers stay incomplete is closed after the header timeout (real: 15 s,
  even when bytes trickle in), while an idle kept-alive connection stays open on both."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from harness.ports import allocate_port, release_port
from harness.toxiproxy.httpconn import HEADER_TIMEOUT
from harness.toxiproxy.server import EmbeddedToxiproxy
from tests.support.checkout import repo_root

REAL = Path(os.environ.get("TOXIPROXY_SERVER_BIN") or repo_root().parent / "shared" / "toxiproxy" / "toxiproxy-server")
UNADDRESSABLE = ["../../../tmp/x", "a/b", "..", "/lead", "trail/"]
ADDRESSABLE = ["a b", "x.y", "ünï", "A:B", "a+b", "a~b", "a%2Fb", "...", ".hidden"]


def _real_runs() -> bool:
    return REAL.is_file() and os.access(REAL, os.X_OK)


@pytest.fixture
def real() -> Iterator[str]:
    """The real toxiproxy-server 2.12 on a free loopback port (its URL); skipped where no binary runs."""
    if not _real_runs():
        pytest.skip(f"no real toxiproxy-server at {REAL} (set TOXIPROXY_SERVER_BIN)")
    port = allocate_port()
    proc = subprocess.Popen([str(REAL), "-host", "127.0.0.1", "-port", str(port)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if httpx.get(f"{url}/version", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the real server did not start"
            time.sleep(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait()
        release_port(port)


@pytest.fixture
def embedded() -> Iterator[EmbeddedToxiproxy]:
    """The embedded server with a short header timeout (0.5 s) so the timeout tests stay fast."""
    with EmbeddedToxiproxy(header_timeout=0.5) as tp:
        yield tp


#: One client for every request of this module (a new httpx client per request costs ~0.3 s here).
HTTP = httpx.Client(timeout=5)


@pytest.fixture(scope="module", autouse=True)
def _close_http() -> Iterator[None]:
    yield
    HTTP.close()


def _create(url: str, name: str) -> httpx.Response:
    return HTTP.post(f"{url}/proxies", json={"name": name, "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"},
                      timeout=5)


# ------------------------------------------------------------------------------------------- names
@pytest.mark.parametrize("name", [*UNADDRESSABLE, ".", "a\nb", "nul\x00", "x" * 257])
def test_the_embedded_server_refuses_a_name_it_could_not_serve(embedded: EmbeddedToxiproxy, name: str) -> None:
    resp = _create(embedded.url, name)
    assert resp.status_code == 400 and "invalid proxy name" in resp.json()["error"]
    assert HTTP.get(f"{embedded.url}/proxies", timeout=5).json() == {}  # nothing created, no listener
    good = _create(embedded.url, "p")
    assert good.status_code == 201
    toxic = HTTP.post(f"{embedded.url}/proxies/p/toxics", json={"type": "latency", "name": name}, timeout=5)
    assert toxic.status_code == 400 and "invalid toxic name" in toxic.json()["error"]
    populate = HTTP.post(f"{embedded.url}/populate", json=[{"name": name, "upstream": "127.0.0.1:1"}], timeout=5)
    assert populate.status_code == 400


def test_real_2_12_creates_those_names_but_can_never_address_them(real: str) -> None:
    """Why the embedded server refuses them: real answers 201 (a listener is bound) and then 301/404
    to every GET and DELETE of the name, so the proxy can never be read or removed."""
    for name in UNADDRESSABLE:
        created = _create(real, name)
        assert created.status_code == 201, (name, created.text)
        assert name in HTTP.get(f"{real}/proxies", timeout=5).json()
        for method in ("GET", "DELETE"):
            resp = HTTP.request(method, f"{real}/proxies/{quote(name, safe='')}", timeout=5)
            assert resp.status_code in (301, 404), (name, method, resp.status_code)
        assert name in HTTP.get(f"{real}/proxies", timeout=5).json()  # still there, for good


@pytest.mark.parametrize("server", ["embedded", "real"])
def test_every_name_real_can_address_is_accepted(server: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("embedded").url if server == "embedded" else request.getfixturevalue("real")
    for name in ADDRESSABLE:
        assert _create(url, name).status_code == 201, name
        got = HTTP.get(f"{url}/proxies/{quote(name, safe='')}", timeout=5)
        assert got.status_code == 200 and got.json()["name"] == name, (name, got.status_code)
        assert HTTP.delete(f"{url}/proxies/{quote(name, safe='')}", timeout=5).status_code == 204


# ---------------------------------------------------------------------------------------- toxicity
OUT_OF_RANGE = [5.0, -1, 1.5, -0.001]


def test_the_embedded_server_refuses_a_toxicity_outside_0_to_1(embedded: EmbeddedToxiproxy) -> None:
    url = embedded.url
    assert _create(url, "p").status_code == 201
    for value in OUT_OF_RANGE:
        resp = HTTP.post(f"{url}/proxies/p/toxics", json={"type": "latency", "name": "t", "toxicity": value},
                          timeout=5)
        assert resp.status_code == 400 and "toxicity" in resp.json()["error"], (value, resp.text)
    assert HTTP.get(f"{url}/proxies/p/toxics", timeout=5).json() == []
    for value in (0, 0.5, 1):
        resp = HTTP.post(f"{url}/proxies/p/toxics", json={"type": "latency", "name": f"t{value}",
                                                           "toxicity": value}, timeout=5)
        assert resp.status_code == 200 and resp.json()["toxicity"] == value
    for value in OUT_OF_RANGE:
        resp = HTTP.patch(f"{url}/proxies/p/toxics/t1", json={"toxicity": value}, timeout=5)
        assert resp.status_code == 400, (value, resp.text)
    assert HTTP.get(f"{url}/proxies/p/toxics/t1", timeout=5).json()["toxicity"] == 1


def test_real_2_12_stores_an_out_of_range_toxicity(real: str) -> None:
    """The documented difference, checked so that a change of the real server is noticed: real
    answers 200 and keeps the value (its draw then acts like 0 or 1)."""
    assert _create(real, "p").status_code == 201
    for i, value in enumerate(OUT_OF_RANGE):
        resp = HTTP.post(f"{real}/proxies/p/toxics", json={"type": "latency", "name": f"t{i}", "toxicity": value},
                          timeout=5)
        assert resp.status_code == 200 and resp.json()["toxicity"] == pytest.approx(value), resp.text


# ---------------------------------------------------------------------------------- header timeout
def _closed_after(port: int, send: bytes, trickle: bytes = b"", limit: float = 30) -> float:
    """Connect, send ``send`` (then ``trickle`` a byte every 0.2 s); seconds until the server closes."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(send)
        s.settimeout(0.2)
        rest = list(trickle)
        while time.monotonic() - t0 < limit:
            try:
                data = s.recv(4096)
            except TimeoutError:
                if rest:
                    try:
                        s.sendall(bytes([rest.pop(0)]))
                    except OSError:
                        return time.monotonic() - t0
                continue
            except ConnectionResetError:
                return time.monotonic() - t0
            if data == b"":
                return time.monotonic() - t0
            raise AssertionError(f"the server answered an incomplete request: {data[:80]!r}")
    return time.monotonic() - t0


def _idle_keeps_serving(port: int, idle: float) -> bool:
    """A complete request, ``idle`` seconds of silence, then a second one on the same connection."""
    req = b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(5)
        s.sendall(req)
        first = s.recv(4096)
        time.sleep(idle)
        try:
            s.sendall(req)
            second = s.recv(4096)
        except OSError:
            return False
    return first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200")


PARTIAL = b"GET /version HTTP/1.1\r\nHost: x\r\n"


def test_the_embedded_api_closes_a_connection_with_incomplete_headers(embedded: EmbeddedToxiproxy) -> None:
    assert HEADER_TIMEOUT == 15.0  # the default is real 2.12's (measured below)
    port = embedded.api_port
    assert 0.4 < _closed_after(port, PARTIAL, limit=10) < 5  # 0.5 s, with room for a loaded machine
    assert 0.4 < _closed_after(port, b"", trickle=b"GET /version HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxx", limit=10) < 5
    assert _idle_keeps_serving(port, idle=1.2)  # idle between requests is not a slow header
    with socket.create_connection(("127.0.0.1", port)) as s:  # the API still answers afterwards
        s.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        s.settimeout(5)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")


def test_real_2_12_closes_incomplete_headers_after_15_s_but_keeps_idle_connections(real: str) -> None:
    port = int(real.rsplit(":", 1)[1])
    idle: list[bool] = []
    waiter = threading.Thread(target=lambda: idle.append(_idle_keeps_serving(port, idle=HEADER_TIMEOUT + 1)))
    waiter.start()
    seconds = _closed_after(port, PARTIAL, limit=30)
    waiter.join(timeout=30)
    assert HEADER_TIMEOUT - 1 < seconds < HEADER_TIMEOUT + 4
    assert idle == [True]
