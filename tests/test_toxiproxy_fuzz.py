"""Property: whatever body reaches the embedded server's API, the answer is a 2xx or a 4xx with a JSON
(or text) error on one line - never a 5xx, never a traceback - and the server keeps serving.

Bodies are random JSON and mutated valid bodies (keys dropped, values replaced, text cut or spliced
with ``NaN``/``1e400``/deep nesting) sent to ``POST /proxies``, ``/populate``,
``/proxies/{p}/toxics``, ``PATCH /proxies/{p}`` and ``PATCH /proxies/{p}/toxics/{t}``. Listen
addresses only ever name port 0 or a bad port (the fuzzer never takes a real port of this shared
machine) and never a non-loopback address. Bounded: the examples stop after ``BUDGET`` seconds.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toxiproxy_compat.tcp_servers import TcpServer, connect, echo_handler, round_trip

from harness.toxiproxy import EmbeddedToxiproxy, ToxiproxyClient
from harness.toxiproxy.api import ToxiproxyServer
from harness.toxiproxy.models import TOXIC_TYPES

BUDGET = 10.0  # seconds of requests (with the generation after it, the test stays under 15 s)
KEEP = "fuzz_keep"  # the proxy and toxic every request may target

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                      st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def _beyond_loopback(listen: str) -> bool:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        return not ipaddress.ip_address(host).is_loopback or host == "::1"
    except ValueError:
        return False


listen_text = st.one_of(
    st.sampled_from(["127.0.0.1:0", ":0", "localhost:0", "127.0.0.1:70000", "127.0.0.1:-1", "127.0.0.1:",
                     "127.0.0.1", "", "nohost:0", "127.0.0.1:0:0", "127.0.0.1:٣", "127.0.0.1:99999999999"]),
    st.text(max_size=16).filter(lambda s: not _beyond_loopback(s)
                                and not s.rpartition(":")[2].strip().isdigit()))
upstream_text = st.one_of(st.sampled_from(["127.0.0.1:1", "127.0.0.1:70000", ":5432", "x", "", "127.0.0.1:0"]),
                          st.text(max_size=16))
proxy_body = st.fixed_dictionaries(
    {"name": st.one_of(st.text(max_size=10), json_leaf), "listen": st.one_of(listen_text, json_leaf),
     "upstream": st.one_of(upstream_text, json_leaf)},
    optional={"enabled": st.one_of(st.booleans(), json_leaf), "node": st.one_of(st.text(max_size=6), json_leaf)})
attrs = st.dictionaries(st.sampled_from(["latency", "jitter", "rate", "delay", "timeout", "average_size",
                                         "size_variation", "bytes", "x"]),
                        st.one_of(st.integers(min_value=-(2**65), max_value=2**65), json_leaf), max_size=4)
toxic_body = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(TOXIC_TYPES), json_leaf)},
    optional={"name": st.one_of(st.text(max_size=8), json_leaf), "stream": st.sampled_from(["upstream",
              "downstream", "sideways"]), "toxicity": st.one_of(st.floats(-2, 3, allow_nan=False), json_leaf),
              "attributes": st.one_of(attrs, json_value)})


@st.composite
def mutated(draw: st.DrawFn, body: st.SearchStrategy[Any]) -> bytes:
    """A body as text, maybe broken: keys dropped or replaced, then the text cut or spliced."""
    value = draw(body)
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value, key=str)))
        if draw(st.booleans()):
            del value[key]
        else:
            value[key] = draw(json_value)
    text = json.dumps(value)
    how = draw(st.sampled_from(["keep", "keep", "cut", "splice"]))
    if how == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    elif how == "splice":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["NaN", "Infinity", "1e400", "-", '"', "\\", "[" * 50,
                                                 "\x00", "\ud800", "}", ","])) + text[at:]
    return text.encode("utf-8", "surrogatepass")


requests = st.one_of(
    st.tuples(st.just(("POST", "/proxies")), mutated(proxy_body)),
    st.tuples(st.just(("POST", "/populate")), mutated(st.lists(proxy_body, max_size=3))),
    st.tuples(st.just(("POST", f"/proxies/{KEEP}/toxics")), mutated(toxic_body)),
    st.tuples(st.just(("PATCH", f"/proxies/{KEEP}/toxics/{KEEP}")), mutated(toxic_body)),
    st.tuples(st.just(("PATCH", f"/proxies/{KEEP}")), mutated(proxy_body)),
    st.tuples(st.sampled_from([("POST", "/proxies"), ("POST", "/populate"), ("POST", f"/proxies/{KEEP}/toxics")]),
              mutated(json_value)),
)


class Errors(logging.Handler):
    """Collects the server's ERROR records (an unexpected exception is logged as one)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[EmbeddedToxiproxy, httpx.Client, TcpServer, Errors]]:
    errors = Errors()
    logger = logging.getLogger("harness.toxiproxy.server")
    logger.addHandler(errors)
    with EmbeddedToxiproxy() as tp, TcpServer(echo_handler) as echo, \
            httpx.Client(base_url=tp.url, timeout=10, trust_env=False) as http:
        try:
            yield tp, http, echo, errors
        finally:
            logger.removeHandler(errors)


def _reset(tp: EmbeddedToxiproxy, http: httpx.Client, echo: TcpServer) -> None:
    """Back to one proxy ``KEEP`` with one toxic ``KEEP`` (whatever the last request made)."""
    def clear(server: ToxiproxyServer) -> None:
        for proxy in list(server.proxies.values()):
            proxy.stop("fuzz reset")
        server.proxies.clear()

    tp.call(clear)
    assert http.post("/proxies", json={"name": KEEP, "upstream": echo.address}).status_code == 201
    assert http.post(f"/proxies/{KEEP}/toxics", json={"type": "latency", "name": KEEP,
                                                     "attributes": {"latency": 1}}).status_code == 200


def test_api_answers_every_body_without_5xx_or_traceback(world) -> None:
    tp, http, echo, errors = world
    deadline = time.monotonic() + BUDGET
    tried = [0]

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(requests)
    def one(request: tuple[tuple[str, str], bytes]) -> None:
        if time.monotonic() > deadline and tried[0] >= 50:
            return  # the time budget is spent (and the 50 requests asserted below were sent): no-ops
        (method, path), body = request
        _reset(tp, http, echo)
        resp = http.request(method, path, content=body, headers={"Content-Type": "application/json"})
        tried[0] += 1
        assert resp.status_code < 500, (method, path, body[:200], resp.status_code, resp.text[:300])
        assert "Traceback" not in resp.text
        if resp.status_code >= 400:
            assert resp.text.count("\n") <= 1, resp.text[:300]
            assert json.loads(resp.text)["error"], resp.text[:300]

    t0 = time.monotonic()
    one()
    print(f'fuzz: {tried[0]} requests, {time.monotonic() - t0:.1f} s')
    assert tried[0] >= 50, f"only {tried[0]} requests in {BUDGET} s"
    assert errors.records == [], [r.getMessage() for r in errors.records]
    _reset(tp, http, echo)  # still serving: the API and the data path
    with ToxiproxyClient(tp.url) as client:
        p = client.get_proxy(KEEP)
        assert client.version() == "2.12.0"
    with connect(p.listen_port) as s:
        round_trip(s)
