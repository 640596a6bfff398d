"""The fault vocabulary (Jepsen's *nemesis*). Every fault records ``fault.start`` / ``fault.end`` in the
history. There are two kinds:

* **Scoped faults** (``partition``, ``latency``, ``bandwidth``, ``slow_close``, ``limit_data``,
  ``cut_replication``, ``stop``, ``kill``, ``pause``) are context managers: applied on entry, undone
  on exit. With ``after=`` (seconds before it starts) and/or ``duration=`` (how long it holds) the
  same fault runs in the background instead (a :class:`ScheduledFault`).
* **Instant role operations** (``switchover``, ``failover``, ``rejoin``) happen when called and
  return a :class:`Completed` holding the topology's :class:`OperationResult` (entering it as a
  context manager does nothing more); ``switchover``/``failover`` also take ``after=``.

Call role operations through :class:`Faults`, not on the topology, so that they are recorded.

Network faults act on the fault proxy in front of a node (:class:`harness.topology.ProxiedLinks`):

* ``partition(node, how="blackhole")``: a ``timeout`` toxic with timeout 0 on both streams - the
  client's TCP connect succeeds but nothing ever answers (how SQL Server retry times are observed).
* ``partition(node, how="refuse")``: the proxy is disabled - connects get ECONNREFUSED at once. No
  proxy sees them; the refused-connect capture does (``conn.refused``), and the fault's ``params``
  name the ``proxy`` and its ``listen`` address so that a checker knows whose connects were refused.
* ``partition(node, how="reset")``: a ``reset_peer`` toxic - the first bytes get a TCP RST.

Server faults (stop, kill, pause) and role operations (switchover, failover) act on the topology.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.errors import ConfigError, HarnessError, InvalidOperation
from harness.faults.coordination import SwitchoverCoordinator, check_coordinator, json_safe, run_coordinated
from harness.ports import Address
from harness.topology import OperationResult, ProxiedLinks, Topology

#: What a scoped fault returns: a context manager, or the same fault scheduled in the background.
Scoped = contextlib.AbstractContextManager[Any]

_ids = itertools.count(1)
STREAMS = ("upstream", "downstream")

#: The longest delay a fault takes (one day, in ms): longer is not a test, and huge or non-finite
#: values overflow the timers of the proxy and of this process.
MAX_MS = 86_400_000
#: The largest byte count or rate a fault takes (exact as a float, within Toxiproxy's int64).
MAX_COUNT = 2**53


def _number(what: str, value: Any, maximum: float, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 <= value <= maximum:
        raise ConfigError(f"{what} must be a finite number of {unit}, >= 0 and <= {maximum:.0f}, not {value!r}")
    return float(value)


def milliseconds(what: str, value: Any) -> int:
    """A fault's delay in whole ms as Toxiproxy takes it: finite, 0 to :data:`MAX_MS` (a bad value is a
    ConfigError naming it, never an overflow in the proxy)."""
    return int(_number(what, value, MAX_MS, "milliseconds (one day at most)"))


def count(what: str, value: Any) -> int:
    """A byte count or rate for a toxic: finite, 0 to :data:`MAX_COUNT`."""
    return int(_number(what, value, MAX_COUNT, "bytes" if "bytes" in what else "KB/s"))


def seconds(what: str, value: Any) -> float:
    """A schedule time (``after=`` / ``duration=``) in seconds: finite, 0 to one day."""
    return _number(what, value, MAX_MS / 1000, "seconds (one day at most)")


class ScheduledFault:
    """A fault running in a background thread: waits ``after`` seconds, applies the fault, holds it
    ``duration`` seconds (or until :meth:`stop`), then undoes it. Use as a context manager or call
    :meth:`join`; errors inside the thread are re-raised there."""

    def __init__(self, name: str, factory: Callable[[], contextlib.AbstractContextManager], after: float,
                 duration: float | None) -> None:
        self.name = name
        self._factory = factory
        self._after = after
        self._duration = duration
        self._stop = threading.Event()
        self.started = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"fault-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self._stop.wait(self._after):
                return
            with self._factory():
                self.started.set()
                self._stop.wait(self._duration)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller in join()
            self.error = exc
        finally:
            self.started.set()

    def stop(self) -> None:
        """End the fault now (or cancel it if it has not started)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the fault to end; re-raise an error it hit."""
        if self._duration is None:
            self.stop()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise HarnessError(f"fault {self.name} did not end within {timeout} s")
        if self.error is not None:
            raise self.error

    def __enter__(self) -> ScheduledFault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.join(timeout=600)


class Completed(contextlib.AbstractContextManager):
    """An instantaneous fault that already happened: ``result`` says what it did and how long it
    took; entering/leaving it as a context manager does nothing more."""

    def __init__(self, result: OperationResult) -> None:
        self.result = result

    def __exit__(self, *exc: object) -> None:
        return None


class Faults:
    """Faults for one topology, recorded into ``history`` (may be None)."""

    def __init__(self, topology: Topology, history: Any = None, cluster: Any = None) -> None:
        self.topology = topology
        self.history = history
        self.cluster = cluster  # an ICM cluster stand-in in front of the topology (harness.topology.icm)
        self._coordinators: list[SwitchoverCoordinator] = []

    # ---------------------------------------------------------------------------- plumbing
    @property
    def _links(self) -> ProxiedLinks:
        links = self.topology.links
        if not isinstance(links, ProxiedLinks):
            raise ConfigError("network faults need the fault proxy in front of the nodes; this topology was "
                              "started without it (use the default links, or 'up' without --no-proxy)")
        return links

    def _proxy(self, node: str) -> str:
        links = self._links  # ConfigError first when there is no fault proxy at all
        if self.cluster is not None and node in self.cluster.port_names():  # an ICM server port: s1:http
            return str(self.cluster.proxy_name(node))
        self.topology.node(node)  # UnknownNodeError naming the nodes
        return links.client_proxy(node)

    def _record(self, type_: str, **fields: Any) -> None:
        if self.history is not None:
            self.history.record(type_, **fields)

    @contextlib.contextmanager
    def _recorded(self, fault: str, node: str | None, params: dict[str, Any]) -> Iterator[int]:
        fid = next(_ids)
        t0 = time.monotonic()
        self._record("fault.start", fault=fault, id=fid, node=node, params=params)
        error = None
        try:
            yield fid
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._record("fault.end", fault=fault, id=fid, node=node, seconds=time.monotonic() - t0, error=error)

    def _maybe_scheduled(self, name: str, factory: Callable[[], Scoped],
                         after: float | None, duration: float | None) -> Scoped:
        if after is None and duration is None:
            return factory()
        after = seconds(f"{name}: after=", after or 0)
        duration = None if duration is None else seconds(f"{name}: duration=", duration)
        return ScheduledFault(name, factory, after, duration)

    def _add_toxics(self, fault: str, fid: int | str, node: str, toxics: list[dict[str, Any]]) -> Callable[[], None]:
        """Add ``toxics`` to the node's client proxy; returns the function that removes them."""
        proxy = self._proxy(node)
        client = self._links.client
        added: list[str] = []

        def undo() -> None:
            for name in added:
                with contextlib.suppress(HarnessError):
                    client.delete_toxic(proxy, name)

        try:
            for spec in toxics:
                name = f"fh-{fault}-{fid}-{spec['stream']}"
                client.add_toxic(proxy, spec["type"], name=name, stream=spec["stream"],
                                 toxicity=spec.get("toxicity", 1.0), attributes=spec["attributes"])
                added.append(name)
        except BaseException:
            undo()
            raise
        return undo

    @contextlib.contextmanager
    def _toxics(self, fault: str, node: str, toxics: list[dict[str, Any]], params: dict[str, Any]) -> Iterator[None]:
        with self._recorded(fault, node, params) as fid:
            undo = self._add_toxics(fault, fid, node, toxics)
            try:
                yield
            finally:
                undo()

    def apply_persistent(self, fault: str, node: str, **params: Any) -> None:
        """Apply a network fault with no end (the CLI's ``fault partition|latency``); it stays until
        :meth:`heal_all`. ``fault`` is ``partition`` (``how=``) or ``latency`` (``ms=``, ``jitter=``)."""
        fid = f"cli{int(time.time() * 1000) % 10**9}"
        if fault == "partition":
            how = params.get("how", "blackhole")
            if how == "refuse":
                self._links.client.disable_proxy(self._proxy(node))
                params = {**params, **self._refused_at(node)}
            else:
                self._add_toxics("partition", fid, node, self._partition_toxics(how))
        elif fault == "latency":
            attributes = {"latency": milliseconds("latency", params["ms"]),
                          "jitter": milliseconds("latency jitter", params.get("jitter", 0))}
            self._add_toxics("latency", fid, node, [
                {"type": "latency", "stream": s, "attributes": attributes} for s in STREAMS])
        else:
            raise ConfigError(f"no persistent form of fault {fault!r}")
        self._record("fault.start", fault=fault, id=fid, node=node, params=params)

    def _refused_at(self, node: str) -> dict[str, str]:
        """What a ``refuse`` partition of ``node`` disables: its client ``proxy`` and ``listen`` address
        (recorded in the fault's params: the MIR checkers tie refused connects to a partner by them)."""
        if self.cluster is not None and node in self.cluster.port_names():
            server, _, scheme = node.partition(":")
            host, port = self.cluster.address(server, scheme)
        else:
            host, port = self.topology.node(node).client_address
        return {"proxy": self._proxy(node), "listen": f"{host}:{port}"}

    @staticmethod
    def _partition_toxics(how: str) -> list[dict[str, Any]]:
        if how == "blackhole":
            return [{"type": "timeout", "stream": s, "attributes": {"timeout": 0}} for s in STREAMS]
        return [{"type": "reset_peer", "stream": "upstream", "attributes": {"timeout": 0}}]

    @staticmethod
    def _streams(stream: str) -> tuple[str, ...]:
        if stream == "both":
            return STREAMS
        if stream not in STREAMS:
            raise ConfigError(f"stream must be 'upstream', 'downstream' or 'both', not {stream!r}")
        return (stream,)

    # ---------------------------------------------------------------------------- network
    def partition(self, node: str, how: str = "blackhole", after: float | None = None,
                  duration: float | None = None) -> Scoped:
        """Cut clients off ``node``: ``blackhole`` (connects hang), ``refuse`` (ECONNREFUSED) or
        ``reset`` (TCP RST on first data)."""
        if how not in ("blackhole", "refuse", "reset"):
            raise ConfigError(f"partition how= must be blackhole, refuse or reset, not {how!r}")
        return self._maybe_scheduled(f"partition-{how}-{node}", lambda: self._partition(node, how), after, duration)

    @contextlib.contextmanager
    def _partition(self, node: str, how: str) -> Iterator[None]:
        if how == "refuse":
            proxy = self._proxy(node)
            client = self._links.client
            with self._recorded("partition", node, {"how": how, **self._refused_at(node)}):
                client.disable_proxy(proxy)
                try:
                    yield
                finally:
                    self.topology.settle_observations()  # every refused connect is in the history
                    client.enable_proxy(proxy)
            return
        with self._toxics("partition", node, self._partition_toxics(how), {"how": how}):
            yield

    def cut_replication(self, standby: str | None = None, after: float | None = None,
                        duration: float | None = None) -> Scoped:
        """Cut a standby (default: every standby) from the principal (its replication proxy is
        disabled); commits on a sync pair then wait for it to come back."""
        return self._maybe_scheduled("cut-replication", lambda: self._cut_replication(standby), after, duration)

    @contextlib.contextmanager
    def _cut_replication(self, standby: str | None) -> Iterator[None]:
        links = self._links
        names = [standby] if standby else [n.name for n in self.topology.standbys]
        for n in names:
            self.topology.node(n)  # UnknownNodeError naming the nodes
        proxies = [links.replication_proxy(n) for n in names]
        with self._recorded("cut_replication", standby, {"standbys": names}):
            for p in proxies:
                links.client.disable_proxy(p)
            try:
                yield
            finally:
                for p in proxies:
                    links.client.enable_proxy(p)

    def latency(self, node: str, ms: float, jitter: float = 0, stream: str = "downstream",
                after: float | None = None, duration: float | None = None) -> Scoped:
        """Delay data to/from ``node`` by ``ms`` ± ``jitter`` milliseconds."""
        attributes = {"latency": milliseconds("latency ms", ms), "jitter": milliseconds("latency jitter", jitter)}
        toxics = [{"type": "latency", "stream": s, "attributes": attributes} for s in self._streams(stream)]
        params = {"ms": ms, "jitter": jitter, "stream": stream}
        return self._maybe_scheduled(f"latency-{node}", lambda: self._toxics("latency", node, toxics, params),
                                     after, duration)

    def bandwidth(self, node: str, kbps: float, stream: str = "downstream", after: float | None = None,
                  duration: float | None = None) -> Scoped:
        """Throttle data to/from ``node`` to ``kbps`` KB/s (1 KB = 1000 bytes; 0 stalls)."""
        rate = count("bandwidth kbps", kbps)
        toxics = [{"type": "bandwidth", "stream": s, "attributes": {"rate": rate}} for s in self._streams(stream)]
        return self._maybe_scheduled(f"bandwidth-{node}",
                                     lambda: self._toxics("bandwidth", node, toxics, {"kbps": kbps, "stream": stream}),
                                     after, duration)

    def slow_close(self, node: str, delay_ms: float, stream: str = "downstream", after: float | None = None,
                   duration: float | None = None) -> Scoped:
        """Delay the close of connections to ``node`` by ``delay_ms``."""
        delay = milliseconds("slow_close delay_ms", delay_ms)
        toxics = [{"type": "slow_close", "stream": s, "attributes": {"delay": delay}} for s in self._streams(stream)]
        return self._maybe_scheduled(f"slow-close-{node}",
                                     lambda: self._toxics("slow_close", node, toxics, {"delay_ms": delay_ms}),
                                     after, duration)

    def limit_data(self, node: str, nbytes: int, stream: str = "downstream", after: float | None = None,
                   duration: float | None = None) -> Scoped:
        """Close connections to ``node`` after ``nbytes`` bytes in ``stream``."""
        limit = count("limit_data nbytes", nbytes)
        toxics = [{"type": "limit_data", "stream": s, "attributes": {"bytes": limit}} for s in self._streams(stream)]
        return self._maybe_scheduled(f"limit-data-{node}",
                                     lambda: self._toxics("limit_data", node, toxics, {"bytes": nbytes}),
                                     after, duration)

    # ---------------------------------------------------------------------------- servers
    def stop(self, node: str, mode: str = "fast", after: float | None = None, duration: float | None = None) -> Scoped:
        """Stop ``node`` for the block (started again on exit)."""
        return self._maybe_scheduled(f"stop-{node}", lambda: self._server_fault("stop", node, mode=mode),
                                     after, duration)

    def kill(self, node: str, after: float | None = None, duration: float | None = None) -> Scoped:
        """kill -9 ``node`` for the block (restarted, with crash recovery, on exit); an ICM server
        (``s1``) fails at once, its connections dropped, and starts again on exit (ICM-7)."""
        if self.cluster is not None and node in self.cluster.servers:
            return self._maybe_scheduled(f"kill-{node}", lambda: self._icm_server_fault(node), after, duration)
        return self._maybe_scheduled(f"kill-{node}", lambda: self._server_fault("kill", node), after, duration)

    def pause(self, node: str, scope: str = "postmaster", after: float | None = None,
              duration: float | None = None) -> Scoped:
        """SIGSTOP ``node`` (postmaster or all processes) for the block."""
        return self._maybe_scheduled(f"pause-{node}", lambda: self._server_fault("pause", node, scope=scope),
                                     after, duration)

    @contextlib.contextmanager
    def _server_fault(self, fault: str, node: str, **kwargs: Any) -> Iterator[OperationResult]:
        topo = self.topology
        topo.node(node)
        with self._recorded(fault, node, kwargs):
            result = getattr(topo, fault)(node, **kwargs)
            try:
                yield result
            finally:
                topo.refresh()
                state = topo.node(node).state
                if fault == "pause" and state == "paused":
                    topo.resume(node)
                elif fault in ("stop", "kill") and state in ("stopped", "killed"):
                    topo.start(node)

    @contextlib.contextmanager
    def _icm_server_fault(self, server: str) -> Iterator[None]:
        with self._recorded("kill", server, {"icm_server": server}):
            self.cluster.kill_server(server)
            try:
                yield
            finally:
                if not self.cluster.is_up(server):
                    self.cluster.start_server(server)

    def mark_state(self, server: str, database: str, mark: str = "out-of-service", after: float | None = None,
                   duration: float | None = None) -> Scoped:
        """ICM-1: mark ``server``'s replica of ``database`` *Out of Service* (``mark="out-of-service"``) or
        *Pending Delete* (``"pending-delete"``) in the ICM cluster's directory for the block (cleared on
        exit). Needs the ICM cluster stand-in (``Faults(..., cluster=...)``)."""
        if self.cluster is None:
            raise ConfigError("mark-state needs an ICM cluster in front of the topology (suites/icm's faults fixture)")
        return self._maybe_scheduled(f"mark-state-{server}-{database}",
                                     lambda: self._mark_state(server, database, mark), after, duration)

    @contextlib.contextmanager
    def _mark_state(self, server: str, database: str, mark: str) -> Iterator[None]:
        with self._recorded("mark_state", server, {"database": database, "mark": mark}):
            self.cluster.mark(server, database, mark)
            try:
                yield
            finally:
                self.cluster.mark(server, database, None)

    # ---------------------------------------------------------------------------- roles
    def switchover(self, target: str | None = None, after: float | None = None) -> Completed | ScheduledFault:
        """Planned role swap. Without ``after`` it happens at once and the returned
        :class:`Completed` holds the result (usable as a no-op context manager); with ``after`` it
        runs in the background (:class:`ScheduledFault`)."""
        if after is not None:
            return self._maybe_scheduled("switchover", lambda: self._role_op("switchover", target), after, 0)
        with self._role_op("switchover", target) as result:
            return Completed(result)

    def failover(self, target: str | None = None, after: float | None = None) -> Completed | ScheduledFault:
        """kill -9 the principal and promote the mirror (the old principal stays down until
        :meth:`rejoin`); immediate or scheduled like :meth:`switchover`."""
        if after is not None:
            return self._maybe_scheduled("failover", lambda: self._role_op("failover", target), after, 0)
        with self._role_op("failover", target) as result:
            return Completed(result)

    def rejoin(self, node: str | None = None) -> Completed:
        """Bring a down former principal (or standby) back as a standby of the principal: an instant
        role operation, recorded like the others."""
        with self._role_op("rejoin", node) as result:
            return Completed(result)

    def add_node(self) -> Completed:
        """Add a standby to the topology (node add, PER-1: every persistent connection kept): cloned
        from the principal, started and streaming when this returns. An instant operation recorded
        as fault ``add_node`` (the topology's ``node.add`` names the new node). Nothing is coordinated: a client
        with read-only routing finds the new node through the topology (PER-9/10 routing), also at
        the address of a node removed before. A topology that cannot add nodes (a compose run without
        the fault proxy) is a ConfigError naming what to do instead, before anything is recorded."""
        check = getattr(self.topology, "membership_problem", None)
        problem = check("add-node") if check is not None else None
        if problem is not None:
            raise ConfigError(f"add_node: {problem}")
        with self._recorded("add_node", None, {"nodes_before": [n.name for n in self.topology.nodes]}):
            return Completed(self.topology.add_node())

    def remove_node(self, node: str) -> Completed:
        """Remove a read-only node (PER-9, PER-10; PER-1 "node remove"): every coordinator that has
        ``before_remove_node(address)`` is told first (it routes new work away, lets running queries
        finish within its window, moves or closes the sessions there; ``coord.*`` events), then the
        node is stopped and dropped from the topology. Refused before anything is told (ConfigError
        naming the fix) for the principal, the last standby, or the only running standby of a
        synchronous principal. An instant operation recorded as fault ``remove_node``."""
        self.topology.refresh()
        if self.topology.node(node).role == "principal":
            raise ConfigError(f"remove_node: {node} is the principal; remove a read-only node (a standby)")
        problem = self.topology.removal_problem(node)
        if problem is not None:
            raise ConfigError(f"remove_node: {problem}")
        with self._recorded("remove_node", node, {}) as fid:
            address = tuple(self.topology.node(node).client_address)
            for client in [c for c in self._coordinators if hasattr(c, "before_remove_node")]:
                name = getattr(client, "name", type(client).__name__)
                self._record("coord.before", fault_id=fid, client=name)
                result = client.before_remove_node(address)
                self._record("coord.before_done", fault_id=fid, client=name, result=json_safe(result))
            return Completed(self.topology.remove_node(node))

    def coordinate(self, client: Any) -> Callable[[], None]:
        """Tell ``client`` (a :class:`harness.faults.coordination.SwitchoverCoordinator`) about every
        later ``switchover``: ``before_switchover()`` first, ``after_switchover(new principal's
        client address)`` after (``coord.*`` events). Returns a function that stops it."""
        coordinators = self._coordinators
        coordinators.append(check_coordinator(client))
        return lambda: coordinators.remove(client) if client in coordinators else None

    def _next_principal(self, target: str | None) -> Address | None:
        """The client address of the node a switchover to ``target`` will promote (default: the
        mirror, as the topology picks it), for the coordinators' ``prepare_switchover``; None when
        there is no such node."""
        try:
            node = self.topology.node(target) if target else self.topology.mirror
            return tuple(node.client_address)  # type: ignore[return-value]
        except Exception:  # noqa: BLE001 - only a hint: the switchover itself reports a bad target
            return None

    @contextlib.contextmanager
    def _role_op(self, fault: str, target: str | None) -> Iterator[OperationResult]:
        with self._recorded(fault, target, {"principal_before": self.topology.principal.name}) as fid:
            if fault == "switchover" and self._coordinators:
                yield run_coordinated(list(self._coordinators),
                                      lambda on_writable: self.topology.switchover(target, on_writable=on_writable),
                                      lambda: self.topology.principal.client_address, self._record, fid,
                                      early=True, next_address=lambda: self._next_principal(target),
                                      before_drain=lambda: self.topology.prepare_switchover(target),
                                      # a sync pair's resumed commits wait for the old principal's
                                      # rejoin (DUR-1): there it starts at once, beside the resumes
                                      resume_first=getattr(self.topology, "mode", None) != "sync")
                return
            if fault == "switchover":
                self.topology.prepare_switchover(target)
            yield getattr(self.topology, fault)(target)

    # ---------------------------------------------------------------------------- heal
    def heal_all(self) -> OperationResult:
        """Remove every toxic, enable every proxy of this run, resume paused nodes."""
        wall0, t0 = time.time(), time.monotonic()
        with self._recorded("heal", None, {}):
            links = self.topology.links
            if isinstance(links, ProxiedLinks):
                for name in links.proxy_names():
                    proxy = links.client.get_proxy(name)
                    for toxic in proxy.toxics:
                        links.client.delete_toxic(name, toxic.name)
                    if not proxy.enabled:
                        links.client.enable_proxy(name)
            self.topology.refresh()
            for node in self.topology.nodes:
                if node.state == "paused":
                    with contextlib.suppress(InvalidOperation):
                        self.topology.resume(node.name)
        seconds = time.monotonic() - t0
        return OperationResult("heal", None, wall0, wall0 + seconds, seconds, self.topology.principal.name)
