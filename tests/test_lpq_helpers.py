"""The LPQ adapters' plumbing without a server: the JSON-lines helpers (Node, generic JDBC) answer
the documented protocol, a refused host list is the driver's error (never a harness error), and
the ctypes libpq reference reports libpq's own message. Real processes, real sockets (a closed
port on 127.0.0.1)."""

from __future__ import annotations

import socket
import threading

import pytest

from harness.clients.lpq import LPQ_CLIENTS, factory
from harness.clients.lpq.helper import HelperError, JsonLinesHelper
from harness.clients.lpq.jdbc import start_jdbc_helper
from harness.clients.lpq.node import start_helper
from harness.clients.lpq.protocol import HostListOpenError, HostListSpec, NotOfferedError
from harness.history.core import History


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spec(n: int = 2, **kw) -> HostListSpec:
    return HostListSpec(hosts=tuple(("127.0.0.1", closed_port()) for _ in range(n)), dbname="app", user="app",
                        password="s3cret-pw", connect_timeout=2, **kw)


def test_node_helper_protocol() -> None:
    helper = start_helper("node-test")
    try:
        assert helper.hello["ok"] and helper.hello["versions"]["pg"] == "8.23.1"
        assert helper.hello["versions"]["postgres"] == "3.4.9"
        port = closed_port()
        reply = helper.call("open", driver="postgres", options={"host": ["127.0.0.1"], "port": [port],
                                                                "database": "app", "username": "app",
                                                                "connect_timeout": 1})
        assert reply["ok"] is False and "ECONNREFUSED" in reply["error"] + str(reply.get("code"))
        assert helper.call("execute", conn=99, sql="SELECT 1") == {"id": 3, "ok": False, "error": "no connection 99"}
        assert helper.call("nonsense")["ok"] is False
    finally:
        helper.close()
    assert helper.proc.poll() is not None
    with pytest.raises(HelperError):
        helper.call("hello")


def test_jdbc_helper_protocol() -> None:
    helper = start_jdbc_helper(["/usr/share/java/postgresql.jar"], name="jdbc-test",
                               driver_class="org.postgresql.Driver")
    try:
        assert helper.hello["driver_version"].startswith("42.")
        assert "org.postgresql.Driver" in helper.hello["drivers"]
        reply = helper.call("open", url=f"jdbc:postgresql://127.0.0.1:{closed_port()}/app",
                            properties={"user": "app", "password": "x", "connectTimeout": "1"})
        assert reply["ok"] is False and reply["sqlstate"] == "08001", reply
        bad = helper.call("execute", conn=5, sql="SELECT 1")
        assert bad["ok"] is False and bad["sqlstate"] == "08003"
    finally:
        helper.close()


def test_helper_that_cannot_start_is_a_harness_error() -> None:
    with pytest.raises(HelperError):
        JsonLinesHelper(["/nonexistent/helper"], name="nothing")


@pytest.mark.parametrize("name", ["libpq", "psycopg", "psycopg2", "asyncpg", "pgjdbc"])
def test_every_refused_host_is_the_drivers_error_and_recorded(name: str) -> None:
    history = History()
    client = factory(name)(history=history, process=name)
    try:
        with pytest.raises(HostListOpenError):
            client.open(spec(2))
    finally:
        client.shutdown()
    invoke, end = [e for e in history.events() if e.get("f") == "open"]
    assert invoke.type == "op.invoke" and len(invoke.get("value")["hosts"]) == 2
    assert end.type == "op.fail" and "s3cret-pw" not in str(history.events())  # redacted


def test_postgres_js_keeps_trying_when_every_host_refuses() -> None:
    """The LPQ-2 finding, seen without a server: postgres.js's open never fails while every host
    refuses; stopping the client ends the helper and the pending call (a harness-side error)."""
    client = factory("postgres-js")(process="pjs")
    outcome: list[BaseException] = []
    th = threading.Thread(target=lambda: _catch(outcome, client.open, spec(2)), daemon=True)
    th.start()
    th.join(3.0)
    assert th.is_alive()  # still retrying after 3 s (libpq fails in milliseconds)
    client.shutdown()
    th.join(10.0)
    assert not th.is_alive() and outcome and isinstance(outcome[0], HelperError)


def _catch(out: list[BaseException], fn, *args) -> None:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        out.append(exc)


@pytest.mark.parametrize("name", ["pg8000", "node-pg"])
def test_single_host_drivers_do_not_offer_a_host_list(name: str) -> None:
    history = History()
    client = factory(name)(history=history, process=name)
    try:
        assert "single host" in client.not_offered(spec(2))
        assert client.not_offered(spec(1)) is None
        with pytest.raises(NotOfferedError):
            client.open(spec(2))
    finally:
        client.shutdown()
    assert not history.events()  # nothing was attempted, nothing recorded as an open


def test_every_registered_client_declares_its_driver() -> None:
    assert set(LPQ_CLIENTS) >= {"libpq", "psycopg", "psycopg2", "asyncpg", "pg8000", "node-pg", "postgres-js",
                                "pgjdbc"}
    lib = factory("libpq")()
    assert lib.driver.startswith("libpq ") and lib.not_offered(spec(2, load_balance_hosts="random")) is None
    system = factory("libpq-system")()
    assert system.driver.startswith("libpq ")


def test_mirroring_view_of_a_driver_is_its_host_list() -> None:
    """An LPQ driver as a mirroring client: ``Server=A; Failover Partner=B; Connect Timeout=1.5`` is the host
    list [A, B], read-write, connect_timeout 2 (libpq's minimum) - and the driver's refusal is a mirroring
    ConnectionOpenError recorded with the MIR ``op.invoke`` value."""
    from harness.clients.lpq.as_mirroring import host_list_of
    from harness.clients.registry import resolve_client
    from harness.errors import ConnectionOpenError
    from harness.rules.connstring import parse_connection_string

    a, b = closed_port(), closed_port()
    text = f"Server=127.0.0.1,{a}; Failover Partner=127.0.0.1,{b}; Database=app; Connect Timeout=1.5; User ID=app"
    hosts = host_list_of(parse_connection_string(text))
    assert hosts.hosts == (("127.0.0.1", a), ("127.0.0.1", b))
    assert hosts.target_session_attrs == "read-write" and hosts.connect_timeout == 2
    history = History()
    client = resolve_client("lpq-libpq", "mirroring").factory(history=history, process="m")
    with pytest.raises(ConnectionOpenError):
        client.open(text)
    client.shutdown()
    invoke = next(e for e in history.events() if e.type == "op.invoke")
    assert invoke.get("value")["initial"] == f"127.0.0.1,{a}" and invoke.get("value")["failover"] == f"127.0.0.1,{b}"
