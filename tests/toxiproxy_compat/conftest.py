"""Fixtures of the Toxiproxy compatibility tests.

By default every test gets its own embedded server on a free port. With ``TOXIPROXY_URL`` set the
same tests run against that server (proxies get unique names and are deleted afterwards); with
``TOXIPROXY_SERVER_BIN`` set each test spawns that binary. Tests marked ``embedded_only`` (the
documented deliberate differences and the events extension) are skipped on a real server.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tcp_servers import TcpServer, echo_handler

from harness.toxiproxy import Proxy, ToxiproxyAPIError, ToxiproxyClient
from harness.toxiproxy.server_choice import FaultProxyHandle, start_fault_proxy


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``embedded_only`` marker."""
    config.addinivalue_line(
        "markers", "embedded_only(reason): needs the embedded server (a documented deliberate "
        "difference or the events extension); skipped against a real toxiproxy-server")


class Toxi:
    """One test's view of the server: the handle, its client, and proxies it created."""

    def __init__(self, handle: FaultProxyHandle) -> None:
        self.handle = handle
        self.client: ToxiproxyClient = handle.client
        self.kind = handle.kind
        self.prefix = f"t{uuid.uuid4().hex[:8]}_"
        self.created: list[str] = []

    def name(self, base: str = "p") -> str:
        """A proxy name unique to this test (the server may be shared)."""
        return self.prefix + base

    def proxy(self, upstream: str, base: str = "p", **kwargs: Any) -> Proxy:
        """Create a proxy on a free 127.0.0.1 port in front of ``upstream``."""
        name = self.name(base)
        self.created.append(name)
        return self.client.create_proxy(name, upstream, listen="127.0.0.1:0", **kwargs)

    def cleanup(self) -> None:
        """Delete every proxy this test created (ignore ones already gone)."""
        for name in self.created:
            try:
                self.client.delete_proxy(name)
            except ToxiproxyAPIError:
                pass


@pytest.fixture
def toxi(request: pytest.FixtureRequest) -> Iterator[Toxi]:
    """A fault proxy server chosen like the harness does (embedded unless configured)."""
    with start_fault_proxy() as handle:
        marker = request.node.get_closest_marker("embedded_only")
        if marker is not None and handle.kind != "embedded":
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            pytest.skip(f"embedded server only: {reason}")
        t = Toxi(handle)
        try:
            yield t
        finally:
            t.cleanup()


@pytest.fixture
def echo() -> Iterator[TcpServer]:
    """A TCP echo server on 127.0.0.1."""
    with TcpServer(echo_handler) as server:
        yield server


@pytest.fixture
def make_server() -> Iterator[Callable[..., TcpServer]]:
    """Factory for extra TCP servers; all are closed at teardown."""
    servers: list[TcpServer] = []

    def make(handler: Any) -> TcpServer:
        server = TcpServer(handler)
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.close()
