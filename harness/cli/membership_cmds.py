"""``failover-harness fault --run ID add-node`` / ``fault --run ID remove-node NODE``: node add and
node remove on a running topology, local or compose (PolarProxy's maintenance rows, RULEBOOK PER-1,
PER-9); what a run cannot do (docs/compose.md's capability table; a compose run without the fault
proxy cannot add a node) is refused in one line (exit 2) naming it and what to do instead.

``remove-node`` is refused before anything moves when the node may not go (unknown, the principal,
the last standby, the only running standby of a synchronous principal: one line naming the fix).
Otherwise every client attached to the run is coordinated first: a reference proxy started with
``persistent-proxy --run ID`` gets ``POST /remove-node`` on its admin API (it routes new work away
from the node and moves or closes the sessions there, PER-9/PER-10) before the node stops and is
dropped from the run. PgBouncer has no node concept (it points at the principal only): nothing is
asked of it. ``add-node`` needs no coordination: a proxy with read-only routing finds the new
standby in the run state."""

from __future__ import annotations

import argparse
from typing import Any

from harness.cli.attach_cmds import coordinate_run
from harness.errors import ConfigError
from harness.faults import Faults
from harness.topology import OperationResult, Topology

MEMBERSHIP_ACTIONS = ("add-node", "remove-node")


def apply_membership(topo: Topology, args: argparse.Namespace) -> tuple[OperationResult, list[dict[str, Any]]]:
    """Add or remove a node of the run; returns the operation's result and what each coordinated
    proxy did (``[{"name", "moved", "closed"}]``, for ``remove-node``). A run that cannot add or
    remove nodes is a ConfigError naming why and what to do instead, before anything moves."""
    problem = topo.membership_problem(args.action)
    if problem is not None:
        raise ConfigError(problem)
    faults = Faults(topo)
    if args.action == "add-node":
        if args.node:
            raise ConfigError(f"'fault add-node' takes no node name (the new node is named n<next>): "
                              f"'fault --run {args.run} add-node'")
        return faults.add_node().result, []
    if not args.node:
        raise ConfigError(f"'fault remove-node' needs a node name, e.g. 'fault --run {args.run} remove-node n3'")
    problem = topo.removal_problem(args.node)
    if problem is not None:
        raise ConfigError(f"cannot remove {args.node}: {problem}")
    coordinators = coordinate_run(faults, topo)  # PER-9/10: each proxy routes away first
    result = faults.remove_node(args.node).result
    done = []
    for c in coordinators:
        reply = getattr(c, "last_removal", None)
        if isinstance(reply, dict):
            done.append({"name": c.name, "moved": len(reply.get("moved") or []),
                         "closed": len(reply.get("closed") or [])})
    return result, done
