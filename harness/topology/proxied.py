"""Fault-proxy wiring (the Links of a proxied topology): every node's client-facing address and every
replication link of a topology is a Toxiproxy proxy, so that faults hit the network path and any link can
be cut.

* ``fh-<run>-<node>``: clients -> that node's server. It keeps meaning "that node" across role
  changes (a client that cached an address keeps reaching the same server, as with real hosts).
* ``fh-<run>-repl-<node>``: that node, while a standby -> the current principal's server. Role
  changes re-point it (an upstream change drops the old stream, which is what a real role swap does).

The proxy server is the one :func:`harness.toxiproxy.server_choice.start_fault_proxy` picks (TOXIPROXY_URL >
toxiproxy-server on PATH > embedded). A detached run (``up --detach``) needs a server that outlives
the command: there the embedded server runs as its own background process, recorded in the run.

What the proxies cannot see - a connect refused because a proxy is disabled (``partition
how=refuse``) - a packet capture on the loopback interface sees (:mod:`harness.capture`): a
subscriber gets its ``conn.refused`` events beside the proxy's ``conn.*`` ones, and one
``harness.capture`` event saying whether the capture runs (``FAILOVER_HARNESS_CAPTURE=off`` turns it
off).

Where the proxy's events come from its log (the Toxiproxy container of the compose backend: each line
stamped when the engine's log copier read it, 10-20 ms late under load), the same capture stamps each
accepted client connect instead: ``conn.accepted.t`` becomes the kernel's time of the client's SYN,
which the listener answered (OBS-1; docs/compose.md, "Connection events"). An accept whose SYN the
capture did not see keeps the log's stamp."""

from __future__ import annotations

import contextlib
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.capture import CaptureTarget, Observation, RefusedConnectCapture
from harness.errors import CaptureUnavailable, ConfigError, ProxyError
from harness.topology.links import Address, DirectLinks, Links
from harness.topology.process import start_ticks
from harness.topology.state import LinksState, ProcessRecord, ProxyNames, RunState
from harness.toxiproxy.client import ToxiproxyClient
from harness.toxiproxy.models import ConnEvent, split_hostport
from harness.toxiproxy.server_choice import FaultProxyHandle, start_fault_proxy

CAPTURE_ENV = "FAILOVER_HARNESS_CAPTURE"
#: Proxy kinds whose ``conn.accepted`` events the capture re-stamps with the client's SYN time (their
#: events come from a log read late; see the module docstring).
SYN_STAMPED = ("compose",)
#: How much earlier than the log's stamp a SYN may be and still be taken for that accept.
SYN_WINDOW = 1.0


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
        self._targets: list[CaptureTarget] = []
        self._captures: list[_CaptureFeed] = []

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
            self._remember_targets(state)
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
        if self._process and all(p.pid != self._process.pid for p in state.processes):
            state.processes.append(self._process)
        self._remember_targets(state)

    def _remember_targets(self, state: RunState) -> None:
        """The client-facing listen addresses the refused-connect capture watches."""
        self._targets = [CaptureTarget(p.client_listen, p.client, node) for node, p in state.links.proxies.items()]

    def client_address(self, state: RunState, node: str) -> Address:
        """The client-facing proxy's listen address."""
        return split_hostport(state.links.proxies[node].client_listen)

    def replication_address(self, state: RunState, standby: str, principal: str) -> Address:
        """The standby's replication proxy (whose upstream is the principal)."""
        return split_hostport(state.links.proxies[standby].replication_listen)

    def roles_changed(self, state: RunState) -> None:
        """Point every replication proxy at the principal's server, and every client-facing proxy at
        its node's server (which moves when its port was taken at start-up, harness.ports)."""
        upstream = f"127.0.0.1:{state.principal().port}"
        for node in state.nodes:
            wanted = {state.links.proxies[node.name].replication: upstream,
                      state.links.proxies[node.name].client: f"127.0.0.1:{node.port}"}
            for name, target in wanted.items():
                if self.client.get_proxy(name).upstream != target:
                    self.client.update_proxy(name, upstream=target)

    def node_added(self, state: RunState, node: str) -> None:
        """Create the client-facing and replication proxies of a node added to the running topology
        (node add). Every running refused-connect capture of these links watches its client-facing
        address from now on, as it does the nodes' it started with (OBS-1; a ``harness.capture``
        event names the new target)."""
        self._run_id = state.run
        n = state.node(node)
        front = self.client.create_proxy(self.client_proxy(node), upstream=f"127.0.0.1:{n.port}",
                                          listen="127.0.0.1:0", node=node)
        repl = self.client.create_proxy(self.replication_proxy(node), upstream=f"127.0.0.1:{state.principal().port}",
                                        listen="127.0.0.1:0", node=f"{node}:replication")
        self._created += [front.name, repl.name]
        state.links.proxies[node] = ProxyNames(front.name, front.listen, repl.name, repl.listen)
        if node not in self._nodes:
            self._nodes.append(node)
        target = CaptureTarget(front.listen, front.name, node)
        self._targets = [*(t for t in self._targets if t.node != node), target]
        for feed in list(self._captures):
            feed.add_target(target)

    def node_removed(self, state: RunState, node: str) -> None:
        """Delete the proxies of a node removed from the topology (node remove)."""
        names = state.links.proxies.pop(node, None)
        self._nodes = [n for n in self._nodes if n != node]
        for gone in [t for t in self._targets if t.node == node]:
            for feed in list(self._captures):
                feed.remove_target(gone.listen)
        self._targets = [t for t in self._targets if t.node != node]
        if names is None:
            return
        for name in (names.client, names.replication):
            with contextlib.suppress(ProxyError):
                self.client.delete_proxy(name)
            if name in self._created:
                self._created.remove(name)

    def teardown(self) -> None:
        """Delete this run's proxies (also those of nodes another process added: ``fh-<run>-*``)
        and stop the proxy server if this process started it."""
        for feed in self._captures:
            feed.stop()
        self._captures.clear()
        try:
            if self._created and self._run_id is not None:  # this process set the run's proxies up
                prefix = f"fh-{self._run_id}-"
                with contextlib.suppress(ProxyError):
                    self._created += [n for n in self.client.proxies() if n.startswith(prefix)
                                      and n not in self._created]
            for name in self._created:
                with contextlib.suppress(ProxyError):
                    self.client.delete_proxy(name)
        finally:
            if self._owner is not None:
                self._owner.close()
                self._owner = None

    def subscribe(self, callback: Callable[[ConnEvent | Observation], None]) -> Callable[[], None]:
        """Connection events of the proxy server (none where the server has no event stream), plus the
        refused connects at the client-facing listen addresses (``conn.refused``) and one
        ``harness.capture`` event saying whether that capture runs, all to ``callback``."""
        feeds: list[_CaptureFeed] = []
        deliver = callback
        if self.proxy_kind in SYN_STAMPED:
            def deliver(event: ConnEvent | Observation) -> None:
                if feeds and isinstance(event, ConnEvent) and event.type == "conn.accepted":
                    event = feeds[0].syn_stamped(event)
                callback(event)
        unsubscribe = self.handle.subscribe(deliver) if self.handle is not None else (lambda: None)
        feed = _CaptureFeed(self._targets, callback)
        feeds.append(feed)
        self._captures.append(feed)

        def stop() -> None:
            unsubscribe()
            feed.stop()
            if feed in self._captures:
                self._captures.remove(feed)

        return stop

    def settle(self, timeout: float = 2.0) -> None:
        """Deliver every connection event the fault proxy observed so far (a real server's events
        trail its log) and every refused connect (a capture found incomplete is reported to its
        subscriber as ``harness.capture`` with ``available: false``)."""
        if self.handle is not None:
            self.handle.settle(timeout)
        for feed in list(self._captures):
            feed.settle(timeout)


class _CaptureFeed:
    """One subscriber's refused-connect capture and its ``harness.capture`` status events."""

    def __init__(self, targets: list[CaptureTarget], callback: Callable[[Observation], None]) -> None:
        self._callback = callback
        self._capture: RefusedConnectCapture | None = None
        self._targets = [{"listen": t.listen, "proxy": t.proxy, "node": t.node} for t in targets]
        capture = RefusedConnectCapture(targets, callback)
        try:
            if os.environ.get(CAPTURE_ENV, "").strip().lower() in ("0", "off", "no", "false"):
                raise CaptureUnavailable(f"turned off by {CAPTURE_ENV}={os.environ[CAPTURE_ENV]}")
            if not targets:
                raise CaptureUnavailable("no client-facing proxy to watch")
            self._capture = capture.start()
        except CaptureUnavailable as exc:
            self._status(False, str(exc), capture.method)
            return
        self._status(True, None, capture.method, probe=capture.probe)

    def _status(self, available: bool, reason: str | None, method: str, **extra: object) -> None:
        fields = {"available": available, "method": method, "reason": reason, "targets": self._targets, **extra}
        self._callback(Observation(time.monotonic(), "harness.capture", fields))

    def add_target(self, target: CaptureTarget) -> None:
        """Watch a node added to the topology too, announced by a ``harness.capture`` event with
        ``available: true`` and that one target (nothing when this capture does not run: its
        ``available: false`` event stands for the new node as well)."""
        if self._capture is None:
            return
        self._capture.add_target(target)
        watched = {"listen": target.listen, "proxy": target.proxy, "node": target.node}
        self._targets = [*self._targets, watched]  # a later 'available: false' ends its watch too (a new
        # list: the events recorded so far hold the old one)
        self._callback(Observation(time.monotonic(), "harness.capture", {
            "available": True, "method": self._capture.method, "reason": None, "targets": [watched], "added": True}))

    def syn_stamped(self, event: ConnEvent) -> ConnEvent:
        """``event`` (a ``conn.accepted`` derived from the proxy's log) stamped with the capture time
        of the client's SYN to that listen address, when the capture saw it no later than the log's
        stamp and at most :data:`SYN_WINDOW` seconds before; else ``event`` as it is. A SYN not seen
        yet is waited for once (the capture drains what the kernel queued: :meth:`settle`)."""
        if self._capture is None:
            return event
        try:
            client = split_hostport(str(event.fields.get("client", "")))
            listen = split_hostport(str(event.fields.get("listen", "")))
        except (ValueError, ConfigError):
            return event
        syn = self._capture.syn_time(client, listen)
        if syn is None and self._capture.settle(0.5) is None:
            syn = self._capture.syn_time(client, listen)
        if syn is None or not event.t - SYN_WINDOW <= syn <= event.t:
            return event
        return ConnEvent(event.seq, syn, event.type, event.fields)

    def remove_target(self, listen: str) -> None:
        """Stop watching a removed node's listen address (its port may serve another proxy later)."""
        if self._capture is not None:
            self._capture.remove_target(listen)

    def settle(self, timeout: float) -> None:
        if self._capture is None:
            return
        reason = self._capture.settle(timeout)
        if reason is not None:  # incomplete from here on: say so once and stop watching
            self._status(False, reason, self._capture.method)
            self.stop()

    def stop(self) -> None:
        if self._capture is not None:
            self._capture.stop()
            self._capture = None


def start_proxied_links(detached: bool = False, kind: str | None = None, run_dir: Path | None = None,
                        register: Callable[[ProcessRecord], None] | None = None) -> ProxiedLinks:
    """Pick and start the fault proxy server for a new run and return links through it.

    In-process runs use :func:`start_fault_proxy` (embedded server in a thread, a spawned binary,
    or ``TOXIPROXY_URL``). A detached run without ``TOXIPROXY_URL`` gets the embedded server as a
    background process (``failover-harness toxiproxy-server``) that ``down`` stops. ``register`` is
    called with every process started here the moment it exists (before it answers), and the
    background server carries ``run_dir`` on its command line and exits once that run is gone, so a
    failed or crashed ``up`` leaves no fault proxy behind (docs/topology.md, "Bringing a topology up")."""
    if detached and not os.environ.get("TOXIPROXY_URL") and kind in (None, "embedded"):
        return _background_embedded_server(run_dir=run_dir, register=register)
    stack = contextlib.ExitStack()
    on_spawn = None if register is None else (lambda pid: register(ProcessRecord(
        "toxiproxy-server", pid, None, start_ticks(pid))))
    try:
        handle = stack.enter_context(start_fault_proxy(kind=kind, on_spawn=on_spawn))
    except BaseException:
        stack.close()
        raise
    return ProxiedLinks(handle.client, handle.kind, handle.version, handle=handle, owner=stack,
                        description=handle.describe())


def _background_embedded_server(timeout: float = 30, run_dir: Path | None = None,
                                register: Callable[[ProcessRecord], None] | None = None) -> ProxiedLinks:
    """The embedded server as a background process for a detached run. It binds its API port itself
    (``--port 0``) and says which one on its first output line, so no other process can take the
    port between choosing and binding it (docs/topology.md, "Where things live"). It is registered
    (``register``) before it is waited for, and killed here when it does not answer within ``timeout``."""
    argv = [sys.executable, "-m", "harness.cli", "toxiproxy-server", "--host", "127.0.0.1", "--port", "0"]
    if run_dir is not None:
        argv += ["--run-dir", str(run_dir)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True, text=True)
    assert proc.stdout is not None
    record = ProcessRecord("toxiproxy-server", proc.pid, proc.pid, start_ticks(proc.pid))
    try:
        if register is not None:
            register(record)
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        client = ToxiproxyClient(match.group(1) if match else "http://127.0.0.1:0", timeout=5)
        deadline = time.monotonic() + timeout
        while match is None or not client.is_available():
            if match is None or proc.poll() is not None or time.monotonic() > deadline:
                raise ProxyError(f"the embedded toxiproxy server did not start within {timeout:.0f} s (exit code "
                                 f"{proc.poll()}; it said {line.strip()[:200]!r})")
            time.sleep(0.02)
        version = client.version()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()  # it prints nothing else on stdout
    return ProxiedLinks(client, "embedded", version, process=record,
                        description=f"embedded Toxiproxy-compatible server {version} at "
                                    f"{client.url} (background process {proc.pid})")


def links_from_state(state: RunState) -> ProxiedLinks:
    """Links of an existing proxied run (for ``fault --run ID`` from another process)."""
    links = state.links
    if not links.url:
        raise ProxyError(f"run {state.run} records no fault-proxy URL")
    client = ToxiproxyClient(links.url, timeout=5)
    return ProxiedLinks(client, links.proxy_kind or "external", links.version or "?", description=links.description)


def make_links(spec: Links | str | None, detached: bool = False, run_dir: Path | None = None,
               register: Callable[[ProcessRecord], None] | None = None) -> Links:
    """``"proxy"`` (default): every address behind the fault proxy (started here, each process
    passed to ``register`` as it starts: :func:`start_proxied_links`); ``"direct"`` or None: no proxy;
    or a ready-made :class:`Links`, returned as it is."""
    if spec is None or spec == "direct":
        return DirectLinks()
    if spec == "proxy":
        return start_proxied_links(detached=detached, run_dir=run_dir, register=register)
    if isinstance(spec, str) or not isinstance(spec, Links):
        raise ConfigError(f"links must be 'proxy', 'direct' or a Links object, not {spec!r}")
    return spec


def links_of_run(state: RunState) -> Links:
    """The links of an existing run (to drive it from another process: ``fault --run ID``)."""
    if state.links.kind == "direct":
        return DirectLinks()
    return links_from_state(state)
