"""Node add and node remove on a running topology, local or compose (PolarProxy's "node add/remove" maintenance,
RULEBOOK PER-1: 100 % of persistent connections kept; PER-9 for the removal of a read-only node).

* :func:`add_node`: a new standby ``n<k>`` (the next free number) given its own port and fault
  proxies, cloned from the principal (the backend's ``_provision_standby``: locally ``pg_basebackup``,
  the engine's ``reclone``; on compose a new container that clones through its replication proxy),
  started and streaming before it returns. Hot standby when the run's standbys are
  (``mirror_readable``).
* :func:`remove_node`: a standby stopped (fast), its container removed (compose), its fault proxies
  deleted, its port released, its folder deleted and the node dropped from the run state
  (``status`` no longer lists it). The
  principal's published partner (MIR-9) is re-read when it was that node.

:func:`removal_problem` says why a node may not be removed (unknown, the principal, the last standby,
the only running standby of a synchronous principal), so that the CLI refuses it before anything
is coordinated. Called by :meth:`LocalTopology.add_node` / :meth:`LocalTopology.remove_node` under
the run's lock; knows nothing about rules or faults."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import InvalidOperation, UnknownNodeError
from harness.ports import allocate_port, hand_over, holder, release_port
from harness.topology.capabilities import engine_operation_refusal
from harness.topology.process import signal_group
from harness.topology.run import release_shared_memory, save_state
from harness.topology.state import KILLED, PAUSED, PRINCIPAL, RUNNING, STANDBY, NodeState, RunState

if TYPE_CHECKING:
    from harness.topology.local import LocalTopology

_NAME = re.compile(r"n([0-9]+)")


def next_name(state: RunState) -> str:
    """``n<k>`` with ``k`` one more than the highest node number the run has or had: a removed node's
    name is never reused (a history's ``node.ports`` and faults name nodes by name)."""
    names = [n.name for n in state.nodes] + list(state.removed_nodes)
    numbers = [int(m.group(1)) for name in names if (m := _NAME.fullmatch(name))]
    return f"n{max(numbers, default=0) + 1}"


def unsupported(state: RunState, op: str) -> str | None:
    """Why run ``state`` cannot ``op`` (``add-node`` / ``remove-node``) at all, with what to do
    instead; None where its backend can (the capability table, :mod:`harness.topology.capabilities`)."""
    why = engine_operation_refusal(state.backend, state.engine or "postgres", op.replace("-", "_"))
    if why is None:
        return None
    return f"{op} on the {state.backend!r} backend (run {state.run}): {why}"


def _refuse_unsupported(state: RunState, op: str) -> None:
    problem = unsupported(state, op)
    if problem is not None:
        raise InvalidOperation(problem)


def removal_problem(state: RunState, name: str) -> str | None:
    """Why node ``name`` may not be removed from the run, with how to fix it; None when it may (the
    local backend, a standby, at least one other standby left, and a synchronous principal keeps a
    running one)."""
    problem = unsupported(state, "remove-node")
    if problem is not None:
        return problem
    try:
        node = state.node(name)
    except UnknownNodeError as exc:
        return f"{exc}: name one of those (see 'failover-harness status --run {state.run}')"
    run = state.run
    if node.role == PRINCIPAL:
        return (f"{name} is the principal: switch over first ('failover-harness fault --run {run} switchover'), "
                "then remove it, or remove a standby")
    others = [n for n in state.nodes if n.role != PRINCIPAL and n.name != name]
    if not others:
        return (f"{name} is the last standby: the principal would be left alone; add a node first "
                f"('failover-harness fault --run {run} add-node')")
    live = [n for n in others if n.state in (RUNNING, PAUSED)]
    if state.mode == "sync" and node.state in (RUNNING, PAUSED) and not live:
        down = ", ".join(n.name for n in others)
        return (f"{name} is the only running standby of the synchronous principal: without it every commit "
                f"waits forever; start {down} first ('failover-harness fault --run {run} start NODE') or add a "
                "node ('fault --run ID add-node')")
    return None


def add_node(topo: LocalTopology) -> str:
    """Add a standby cloned from the principal, started and streaming (PER-1 "node add"); returns its
    name. Records ``node.add`` (with ``node``, ``port``, ``seconds``) besides ``node.start``."""
    state = topo._state
    _refuse_unsupported(state, "add-node")
    principal = next(n for n in state.nodes if n.role == PRINCIPAL)
    topo._require(principal.name, RUNNING)
    t0 = time.monotonic()
    name = next_name(state)
    port = allocate_port()
    keeper = holder(state.ports[0]) if state.ports else None  # a detached run's reaper holds its ports
    if keeper is not None and keeper != os.getpid():
        hand_over([port], keeper)
    folder = topo.path / name
    node = NodeState(name=name, role=STANDBY, port=port, client_port=port, datadir=str(folder / "data"))
    state.nodes.append(node)
    state.ports.append(port)
    save_state(topo.path, state)  # from here on 'down' knows the node (and cleans it up after a crash)
    try:
        folder.mkdir(mode=0o755)
        topo.run_as.chown(folder)
        node_added = getattr(topo.links, "node_added", None)
        if node_added is not None:  # its proxies first: a container clones through its replication proxy
            node_added(state, name)
        node.client_host, node.client_port = topo.links.client_address(state, name)
        save_state(topo.path, state)
        topo._provision_standby(name, principal.name)
        topo._start_locked(name, wait=True)
    except BaseException:
        with contextlib.suppress(Exception):
            _forget(topo, name)
        raise
    topo.n_nodes = len(state.nodes)
    topo._emit("node.add", t=t0, node=name, role=STANDBY, port=port, seconds=time.monotonic() - t0)
    return name


def remove_node(topo: LocalTopology, name: str) -> str:
    """Stop standby ``name`` and drop it from the run (PER-9 "read-only node removal", PER-1 "node
    remove"); refused with the reason of :func:`removal_problem`. Records ``node.stop`` and
    ``node.remove``."""
    state = topo._state
    _refuse_unsupported(state, "remove-node")
    problem = removal_problem(state, name)
    if problem is not None:
        raise InvalidOperation(problem)
    t0 = time.monotonic()
    s = topo._node_state(name)
    if s.state == PAUSED and s.pid:
        signal_group(s.pid, signal.SIGCONT)  # a stopped postmaster cannot shut down
        s.state = RUNNING
    if s.state == RUNNING:
        topo._stop_server(name, "fast")
    state.removed_nodes.append(name)
    _forget(topo, name, killed=s.state == KILLED)
    topo.n_nodes = len(state.nodes)
    principal = next(n for n in state.nodes if n.role == PRINCIPAL)
    if principal.state == RUNNING:  # it may have published the removed node as its partner (MIR-9)
        topo._reload(principal.name)
        topo._wait_partner_published(principal.name)
    topo._emit("node.remove", t=t0, node=name, seconds=time.monotonic() - t0)
    return name


def _forget(topo: LocalTopology, name: str, killed: bool = False) -> None:
    """Drop a stopped node from the run: its proxies, its port, its folder, its state entry."""
    state = topo._state
    s = state.node(name)
    if s.pid:  # a half-added node that did start
        with contextlib.suppress(Exception):
            topo._stop_server(name, "immediate")
    with contextlib.suppress(Exception):  # a container's: removed (nothing on local)
        topo._discard(name)
    node_removed = getattr(topo.links, "node_removed", None)
    if node_removed is not None:
        with contextlib.suppress(Exception):  # the node goes even when its proxies are gone already
            node_removed(state, name)
    if killed:
        release_shared_memory(Path(s.datadir))
    state.nodes = [n for n in state.nodes if n.name != name]
    if s.port in state.ports:
        state.ports.remove(s.port)
    release_port(s.port)
    save_state(topo.path, state)
    shutil.rmtree(topo.path / name, ignore_errors=True)
