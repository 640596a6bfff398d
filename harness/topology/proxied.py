"""Fault-proxy wiring (the Links of a proxied topology): every node's client-facing address and every
replication link of a topology is a Toxiproxy proxy, so that faults hit the network path and any link can
be cut.

* ``fh-<run>-<node>``: clients -> that node's server. It keeps meaning "that node" across role
  changes (a client that cached an address keeps reaching the same server, as with real hosts).
* ``fh-<run>-repl-<node>``: that node, while a standby -> the current principal's server. Role
  changes re-point it (an upstream change drops the old stream, which is what a real role swap does).

The proxy server is the one :func:`harness.toxiproxy.select.start_fault_proxy` picks (TOXIPROXY_URL >
toxiproxy-server on PATH > embedded). A detached run (``up --detach``) needs a server that outlives
the command: there the embedded server runs as its own background process, recorded in the run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable

from harness.errors import ConfigError, ProxyError
from harness.ports import allocate_port
from harness.topology.links import Address, DirectLinks, Links
from harness.topology.state import LinksState, ProcessRecord, ProxyNames, RunState
from harness.toxiproxy.client import ToxiproxyClient
from harness.toxiproxy.models import ConnEvent, split_hostport
from harness.toxiproxy.select import FaultProxyHandle, start_fault_proxy


class ProxiedLinks:
    """Links through a Toxiproxy(-compatible) server (see module docstring). Besides the
    :class:`~harness.topology.links.Links` methods it names each node's proxies for the fault
    vocabulary: :meth:`client_proxy`, :meth:`replication_proxy`, :meth:`proxy_names`, and offers the
    server's API as :attr:`client`."""

    kind = "toxiproxy"

    def __init__(self, client: ToxiproxyClient, proxy_kind: str, version: str,
                 handle: FaultProxyHandle | None = None, owner: contextlib.ExitStack | None = None,
                 process: ProcessRecord | None = None, description: str = "") -> None:
        self.client = client
        self.proxy_kind = proxy_kind
        self.version = version
        self.handle = handle
        self.description = description or f"{proxy_kind} toxiproxy {version} at {client.url}"
        self._owner = owner
        self._process = process
        self._run_id: str | None = None
        self._nodes: list[str] = []
        self._created: list[str] = []

    # ------------------------------------------------------------------ names and addresses
    def client_proxy(self, node: str) -> str:
        """Name of the client-facing proxy of ``node``."""
        return f"fh-{self._run()}-{node}"

    def replication_proxy(self, node: str) -> str:
        """Name of the proxy ``node`` streams WAL through while it is a standby."""
        return f"fh-{self._run()}-repl-{node}"

    def proxy_names(self) -> list[str]:
        """Every proxy of this run (client-facing and replication, node by node)."""
        return [name for n in self._nodes for name in (self.client_proxy(n), self.replication_proxy(n))]

    def _run(self) -> str:
        if self._run_id is None:
            raise ProxyError("these links are not set up for a run yet")
        return self._run_id

    def setup(self, state: RunState) -> None:
        """Create the client-facing and replication proxies (or, when attaching to an existing run,
        just remember it)."""
        self._run_id = state.run
        self._nodes = [n.name for n in state.nodes]
        if state.links.proxies:
            return  # attached: the proxies exist already
        principal = state.principal()
        names: dict[str, ProxyNames] = {}
        for node in state.nodes:
            front = self.client.create_proxy(self.client_proxy(node.name), upstream=f"127.0.0.1:{node.port}",
                                              listen="127.0.0.1:0", node=node.name)
            repl = self.client.create_proxy(self.replication_proxy(node.name),
                                            upstream=f"127.0.0.1:{principal.port}", listen="127.0.0.1:0",
                                            node=f"{node.name}:replication")
            self._created += [front.name, repl.name]
            names[node.name] = ProxyNames(front.name, front.listen, repl.name, repl.listen)
        state.links = LinksState(kind=self.kind, url=self.client.url, proxy_kind=self.proxy_kind,
                                 version=self.version, description=self.description, proxies=names)
        if self._process:
            state.processes.append(self._process)

    def client_address(self, state: RunState, node: str) -> Address:
        """The client-facing proxy's listen address."""
        return split_hostport(state.links.proxies[node].client_listen)

    def replication_address(self, state: RunState, standby: str, principal: str) -> Address:
        """The standby's replication proxy (whose upstream is the principal)."""
        return split_hostport(state.links.proxies[standby].replication_listen)

    def roles_changed(self, state: RunState) -> None:
        """Point every replication proxy at the new principal's server."""
        upstream = f"127.0.0.1:{state.principal().port}"
        for node in state.nodes:
            name = state.links.proxies[node.name].replication
            if self.client.get_proxy(name).upstream != upstream:
                self.client.update_proxy(name, upstream=upstream)

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
                            process=ProcessRecord("toxiproxy-server", proc.pid, proc.pid),
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


def links_from_state(state: RunState) -> ProxiedLinks:
    """Links of an existing proxied run (for ``fault --run ID`` from another process)."""
    links = state.links
    if not links.url:
        raise ProxyError(f"run {state.run} records no fault-proxy URL")
    client = ToxiproxyClient(links.url, timeout=5)
    return ProxiedLinks(client, links.proxy_kind or "external", links.version or "?", description=links.description)


def make_links(spec: Links | str | None, detached: bool = False) -> Links:
    """``"proxy"`` (default): every address behind the fault proxy (started here); ``"direct"`` or
    None: no proxy; or a ready-made :class:`Links`, returned as it is."""
    if spec is None or spec == "direct":
        return DirectLinks()
    if spec == "proxy":
        return start_proxied_links(detached=detached)
    if isinstance(spec, str) or not isinstance(spec, Links):
        raise ConfigError(f"links must be 'proxy', 'direct' or a Links object, not {spec!r}")
    return spec


def links_of_run(state: RunState) -> Links:
    """The links of an existing run (to drive it from another process: ``fault --run ID``)."""
    if state.links.kind == "direct":
        return DirectLinks()
    return links_from_state(state)
