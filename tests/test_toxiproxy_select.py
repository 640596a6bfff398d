"""Server selection (external / spawned / embedded) and the real-server log-event adapter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from toxiproxy_compat.tcp_servers import TcpServer, connect, echo_handler, round_trip, wait_until

from harness.errors import ConfigError, MissingDependencyError, ProxyError
from harness.toxiproxy import EmbeddedToxiproxy, ToxiproxyUnreachableError
from harness.toxiproxy.server_choice import start_fault_proxy

REPO = Path(__file__).resolve().parents[1]


def test_embedded_when_nothing_configured() -> None:
    with start_fault_proxy(env={"PATH": ""}) as handle:
        assert handle.kind == "embedded" and handle.events_supported
        assert handle.version == "2.12.0"
        assert handle.url.startswith("http://127.0.0.1:")
        assert "embedded" in handle.describe() and handle.url in handle.describe()
        url = handle.url
    with pytest.raises(ProxyError, match="closed"):
        handle.client.version()  # the handle's client is closed with it
    from harness.toxiproxy import ToxiproxyClient
    with ToxiproxyClient(url, timeout=1) as c:
        assert not c.is_available()  # stopped on exit


def test_external_from_env_has_no_events() -> None:
    with EmbeddedToxiproxy() as server, TcpServer(echo_handler) as echo:
        with start_fault_proxy(env={"TOXIPROXY_URL": server.url, "PATH": ""}) as handle:
            assert handle.kind == "external" and handle.url == server.url
            assert handle.events_supported is False
            called = []
            unsubscribe = handle.subscribe(called.append)
            p = handle.client.create_proxy("x", echo.address)
            with connect(p.listen_port) as s:
                round_trip(s)
            unsubscribe()
            assert called == []
            assert "external" in handle.describe() and "unavailable" in handle.describe()
        assert server.server.proxies  # an external server is not stopped by the harness


def test_external_unreachable_names_url() -> None:
    with pytest.raises(ToxiproxyUnreachableError) as info:
        with start_fault_proxy(env={"TOXIPROXY_URL": "http://127.0.0.1:9"}):
            pass
    assert "http://127.0.0.1:9" in str(info.value)


def test_bad_choices_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="unknown fault proxy kind"):
        with start_fault_proxy(kind="docker"):
            pass
    with pytest.raises(MissingDependencyError, match="TOXIPROXY_SERVER_BIN"):
        with start_fault_proxy(env={"TOXIPROXY_SERVER_BIN": "/nonexistent/toxiproxy-server"}):
            pass
    with pytest.raises(MissingDependencyError, match="not on PATH"):
        with start_fault_proxy(kind="spawned", env={"PATH": ""}):
            pass


def test_spawned_binary_is_started_and_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in binary with toxiproxy-server's command line (-host H -port P): our own CLI.
    shim = tmp_path / "toxiproxy-server"
    shim.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from harness.cli import main\n"
        "a = sys.argv[1:]\n"
        "sys.exit(main(['toxiproxy-server', '--host', a[a.index('-host') + 1], "
        "'--port', a[a.index('-port') + 1]]))\n")
    shim.chmod(0o755)
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs = []
    import harness.toxiproxy.server_choice as select_mod

    class Recording(select_mod.ToxiproxyProcess):  # keep a reference to read the exit code
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw)
            procs.append(self)

    monkeypatch.setattr(select_mod, "ToxiproxyProcess", Recording)
    with start_fault_proxy(env=env) as handle:
        assert handle.kind == "spawned" and handle.version == "2.12.0"
        assert str(shim) in handle.describe()
        with TcpServer(echo_handler) as echo:
            p = handle.client.create_proxy("s", echo.address)
            with connect(p.listen_port) as s:
                round_trip(s)
        url = handle.url
    from harness.toxiproxy import ToxiproxyClient
    with ToxiproxyClient(url, timeout=1) as c:
        assert wait_until(lambda: not c.is_available(), 3)
    assert procs[0].returncode == 0  # SIGTERM -> clean shutdown of the foreground CLI server


def test_forward_to_history_keeps_event_times() -> None:
    from harness.history.core import History
    from harness.toxiproxy.server_choice import forward_to_history

    history = History()
    with start_fault_proxy(env={"PATH": ""}) as handle, TcpServer(echo_handler) as echo:
        unsubscribe = forward_to_history(handle, history)
        seen = []
        handle.subscribe(seen.append)
        p = handle.client.create_proxy("db", echo.address, node="pg-1")
        with connect(p.listen_port) as s:
            round_trip(s)
        assert wait_until(lambda: len(history.events("conn.closed")) == 1)
        unsubscribe()
    events = history.events("conn.")
    assert [e.type for e in events] == ["conn.accepted", "conn.upstream_connected", "conn.closed"]
    assert [e.t for e in events] == [e.t for e in seen[:3]]
    assert events[0].get("node") == "pg-1" and "seq" not in events[0].fields


def test_planned_choice_follows_the_selection_order(tmp_path: Path) -> None:
    from harness.report.allure import collect_environment
    from harness.toxiproxy.server_choice import planned_choice

    binary = tmp_path / "toxiproxy-server"
    binary.write_text("#!/bin/sh\necho 'toxiproxy-server version 2.12.0'\n")
    binary.chmod(0o755)
    assert planned_choice({"PATH": ""}) == ("embedded", "harness.toxiproxy")
    assert planned_choice({"PATH": str(tmp_path)}) == ("spawned", str(binary))
    assert planned_choice({"TOXIPROXY_SERVER_BIN": str(binary), "PATH": ""}) == ("spawned", str(binary))
    assert planned_choice({"TOXIPROXY_SERVER_BIN": "/nope", "PATH": ""}) == ("spawned", "/nope (missing)")
    assert planned_choice({"TOXIPROXY_URL": "http://127.0.0.1:9", "TOXIPROXY_SERVER_BIN": str(binary)}) == (
        "external", "http://127.0.0.1:9")
    with pytest.MonkeyPatch.context() as mp:  # the report environment shows the same choice
        mp.setenv("TOXIPROXY_SERVER_BIN", str(binary))
        mp.delenv("TOXIPROXY_URL", raising=False)
        env = collect_environment("local", "postgres", None)
    assert env["fault_proxy"] == f"toxiproxy-server ({binary})"
    assert "2.12.0" in env["fault_proxy.version"]
