"""Fault-proxy wiring: every node's client-facing address and every replication link of a topology
is a Toxiproxy proxy, so that faults hit the network path and any link can be cut.

* ``fh-<run>-<node>``: clients -> that node's server. It keeps meaning "that node" across role
  changes (a client that cached an address keeps reaching the same server, as with real hosts).
* ``fh-<run>-repl-<node>``: that node, while a standby -> the current principal's server. Role
  changes re-point it (an upstream change drops the old stream, which is what a real role swap does).

The proxy server is the one :func:`harness.toxiproxy.select.start_fault_proxy` picks (TOXIPROXY_URL >
toxiproxy-server on PATH > embedded). A detached run (``up --detach``) needs a server that outlives
the command: there the embedded server runs as its own background process, recorded in the run."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.errors import ProxyError
from harness.ports import allocate_port
from harness.toxiproxy.client import ToxiproxyClient
from harness.toxiproxy.models import ConnEvent, split_hostport
from harness.toxiproxy.select import FaultProxyHandle, start_fault_proxy

if TYPE_CHECKING:
    from harness.topology.local import LocalTopology

Address = tuple[str, int]


class ProxiedLinks:
    """Links through a Toxiproxy(-compatible) server (see module docstring)."""

    kind = "toxiproxy"

    def __init__(self, client: ToxiproxyClient, proxy_kind: str, version: str,
                 handle: FaultProxyHandle | None = None, owner: contextlib.ExitStack | None = None,
                 process: dict[str, Any] | None = None, description: str = "") -> None:
        self.client = client
        self.proxy_kind = proxy_kind
        self.version = version
        self.handle = handle
        self.description = description or f"{proxy_kind} toxiproxy {version} at {client.url}"
        self._owner = owner
        self._process = process
        self._topology: LocalTopology | None = None
        self._created: list[str] = []

    # ------------------------------------------------------------------ names and addresses
    def proxy_name(self, node: str) -> str:
        """Name of the client-facing proxy of ``node``."""
        assert self._topology is not None
        return f"fh-{self._topology.run_id}-{node}"

    def replication_proxy_name(self, node: str) -> str:
        """Name of the proxy ``node`` streams WAL through while it is a standby."""
        assert self._topology is not None
        return f"fh-{self._topology.run_id}-repl-{node}"

    def setup(self, topology: LocalTopology) -> None:
        """Create the client-facing and replication proxies (or, when attaching to an existing run,
        just remember the topology)."""
        self._topology = topology
        state = topology._state
        links_state = state.setdefault("links", {})
        if links_state.get("proxies"):
            return  # attached: the proxies exist already
        principal = next(n for n in state["nodes"] if n["role"] == "principal")
        names: dict[str, dict[str, str]] = {}
        for node in state["nodes"]:
            name = node["name"]
            front = self.client.create_proxy(self.proxy_name(name), upstream=f"127.0.0.1:{node['port']}",
                                              listen="127.0.0.1:0", node=name)
            repl = self.client.create_proxy(self.replication_proxy_name(name),
                                            upstream=f"127.0.0.1:{principal['port']}", listen="127.0.0.1:0",
                                            node=f"{name}:replication")
            self._created += [front.name, repl.name]
            names[name] = {"client": front.name, "client_listen": front.listen,
                           "replication": repl.name, "replication_listen": repl.listen}
        links_state.update({"kind": self.kind, "url": self.client.url, "proxy_kind": self.proxy_kind,
                            "version": self.version, "description": self.description, "proxies": names})
        if self._process:
            state.setdefault("processes", []).append(self._process)

    def _entry(self, node: str) -> dict[str, str]:
        assert self._topology is not None
        return self._topology._state["links"]["proxies"][node]

    def client_address(self, node: str) -> Address:
        """The client-facing proxy's listen address."""
        return split_hostport(self._entry(node)["client_listen"])

    def replication_address(self, standby: str, principal: str) -> Address:
        """The standby's replication proxy (whose upstream is the principal)."""
        return split_hostport(self._entry(standby)["replication_listen"])

    def roles_changed(self, topology: LocalTopology) -> None:
        """Point every replication proxy at the new principal's server."""
        principal = next(n for n in topology._state["nodes"] if n["role"] == "principal")
        upstream = f"127.0.0.1:{principal['port']}"
        for node in topology._state["nodes"]:
            name = self._entry(node["name"])["replication"]
            if self.client.get_proxy(name).upstream != upstream:
                self.client.update_proxy(name, upstream=upstream)

    def all_proxy_names(self) -> list[str]:
        """Every proxy of this run."""
        assert self._topology is not None
        proxies = self._topology._state["links"].get("proxies", {})
        return [p[k] for p in proxies.values() for k in ("client", "replication")]

    def teardown(self) -> None:
        """Delete this run's proxies and stop the proxy server if this process started it."""
        try:
            for name in self._created:
                with contextlib.suppress(ProxyError):
                    self.client.delete_proxy(name)
        finally:
            if self._owner is not None:
                self._owner.close()
                self._owner = None

    def subscribe(self, callback: Callable[[ConnEvent], None]) -> Callable[[], None]:
        """Connection events of the proxy server (a no-op where the server has none)."""
        if self.handle is None:
            return lambda: None
        return self.handle.subscribe(callback)


def start_proxied_links(detached: bool = False, kind: str | None = None) -> ProxiedLinks:
    """Pick and start the fault proxy server for a new run and return links through it.

    In-process runs use :func:`start_fault_proxy` (embedded server in a thread, a spawned binary,
    or ``TOXIPROXY_URL``). A detached run without ``TOXIPROXY_URL`` gets the embedded server as a
    background process (``failover-harness toxiproxy-server``) that ``down`` stops."""
    import os

    if detached and not os.environ.get("TOXIPROXY_URL") and kind in (None, "embedded"):
        port = allocate_port()
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "toxiproxy-server", "--host", "127.0.0.1",
                                 "--port", str(port)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        client = ToxiproxyClient(f"http://127.0.0.1:{port}", timeout=5)
        deadline = time.monotonic() + 15
        while not client.is_available():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise ProxyError(f"the embedded toxiproxy server did not start on port {port} "
                                 f"(exit code {proc.poll()})")
            time.sleep(0.02)
        return ProxiedLinks(client, "embedded", client.version(),
                            process={"name": "toxiproxy-server", "pid": proc.pid, "pgid": proc.pid},
                            description=f"embedded Toxiproxy-compatible server {client.version()} at "
                                        f"{client.url} (background process {proc.pid})")
    stack = contextlib.ExitStack()
    try:
        handle = stack.enter_context(start_fault_proxy(kind=kind))
    except BaseException:
        stack.close()
        raise
    return ProxiedLinks(handle.client, handle.kind, handle.version, handle=handle, owner=stack,
                        description=handle.describe())


def links_from_state(state: dict[str, Any]) -> ProxiedLinks:
    """Links of an existing proxied run (for ``fault --run ID`` from another process)."""
    links = state["links"]
    client = ToxiproxyClient(links["url"], timeout=5)
    return ProxiedLinks(client, links.get("proxy_kind", "external"), links.get("version", "?"),
                        description=links.get("description", ""))
