"""``failover-harness fault --run ID partition|latency|heal ...``: network faults that stay in place
until ``heal`` (the CLI has no block to undo them at)."""

from __future__ import annotations

import argparse
import time

from harness.errors import ConfigError
from harness.faults.vocabulary import Faults, milliseconds
from harness.topology import OperationResult, Topology

NETWORK_ACTIONS = ("partition", "latency", "heal")


def _ms(what: str, text: str) -> int:
    try:
        return milliseconds(what, float(text))
    except ValueError as exc:  # float() or the range check (ConfigError): argparse's one-line error
        reason = str(exc) if isinstance(exc, ConfigError) else f"{what} must be a number of milliseconds, not {text!r}"
        raise argparse.ArgumentTypeError(reason) from None


def latency_ms(text: str) -> int:
    """``fault latency NODE MS``: whole milliseconds, finite, 0 to one day - checked by argparse before
    the run is touched (a bad number is one line, never an overflow in the fault proxy)."""
    return _ms("latency", text)


def jitter_ms(text: str) -> int:
    """``--jitter MS``: like :func:`latency_ms`."""
    return _ms("jitter", text)


def apply_network_fault(topo: Topology, args: argparse.Namespace) -> OperationResult:
    """Apply a persistent network fault to a run, or heal every fault."""
    faults = Faults(topo)
    action = args.action
    if action not in NETWORK_ACTIONS:
        raise ConfigError(f"unknown fault {action!r}; use switchover, failover, rejoin, stop, start, kill, "
                          f"pause, resume, add-node, remove-node, partition, latency, heal or mark-state")
    if action == "heal":
        return faults.heal_all()
    if not args.node:
        raise ConfigError(f"'fault {action}' needs a node name, e.g. 'fault --run {args.run} {action} n1'")
    wall0, t0 = time.time(), time.monotonic()
    if action == "partition":
        faults.apply_persistent("partition", args.node, how=args.how)
    else:
        if args.value is None:
            raise ConfigError(f"'fault latency' needs milliseconds, e.g. 'fault --run {args.run} latency n1 200'")
        try:
            ms = float(args.value)
        except ValueError:
            raise ConfigError(f"latency must be a number of milliseconds, not {args.value!r}") from None
        if ms < 0:
            raise ConfigError("latency must be >= 0 ms")
        faults.apply_persistent("latency", args.node, ms=ms, jitter=args.jitter)
    seconds = time.monotonic() - t0
    return OperationResult(action, args.node, wall0, wall0 + seconds, seconds, topo.principal.name)
