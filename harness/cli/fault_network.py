"""``failover-harness fault --run ID partition|latency|heal ...``: network faults that stay in place
until ``heal`` (the CLI has no block to undo them at)."""

from __future__ import annotations

import argparse
import time

from harness.errors import ConfigError
from harness.faults.vocabulary import Faults, milliseconds
from harness.topology import OperationResult, Topology

NETWORK_ACTIONS = ("partition", "latency", "heal")


def latency_args(args: argparse.Namespace) -> tuple[int, int]:
    """``fault latency NODE MS [--jitter MS]`` as whole milliseconds, checked before the run is touched
    (finite, 0 to one day: a bad number is a one-line ConfigError, never an overflow in the proxy)."""
    if args.value is None:
        raise ConfigError(f"'fault latency' needs milliseconds, e.g. 'fault --run {args.run} latency n1 200'")
    try:
        ms = float(args.value)
    except ValueError:
        raise ConfigError(f"latency must be a number of milliseconds, not {args.value!r}; "
                          f"e.g. 'fault --run {args.run} latency n1 200'") from None
    return milliseconds("fault latency MS", ms), milliseconds("--jitter", args.jitter)


def apply_network_fault(topo: Topology, args: argparse.Namespace) -> OperationResult:
    """Apply a persistent network fault to a run, or heal every fault."""
    faults = Faults(topo)
    action = args.action
    if action not in NETWORK_ACTIONS:
        raise ConfigError(f"unknown fault {action!r}; use switchover, failover, rejoin, stop, start, kill, "
                          f"pause, resume, partition, latency or heal")
    if action == "heal":
        return faults.heal_all()
    if not args.node:
        raise ConfigError(f"'fault {action}' needs a node name, e.g. 'fault --run {args.run} {action} n1'")
    wall0, t0 = time.time(), time.monotonic()
    if action == "partition":
        faults.apply_persistent("partition", args.node, how=args.how)
    else:
        ms, jitter = latency_args(args)
        faults.apply_persistent("latency", args.node, ms=ms, jitter=jitter)
    seconds = time.monotonic() - t0
    return OperationResult(action, args.node, wall0, wall0 + seconds, seconds, topo.principal.name)
