"""Rounds of manager failovers under a write load (DUR-1 under an HA manager, HAM-3/HAM-4/HAM-6;
docs/ha-managers.md "Durability over manager failovers").

A *round* is one fault the manager must answer, then the wait until the topology is whole again
(one leader accepting writes, every other node a streaming replica of its timeline and, in
synchronous mode, a synchronous standby named), so the next round starts from the same shape:

* ``switchover`` - planned, through the manager (Patroni ``POST /switchover``);
* ``failover`` - manual, through the manager (Patroni ``POST /failover`` to the synchronous standby);
* ``kill`` - the leader's machine lost (manager and server SIGKILLed), then started again.

Each round is recorded as ``ham.round`` (op, leader before and after, seconds until another node
accepted writes, seconds until whole again). The cluster is any object with the
:class:`harness.topology.patroni.PatroniCluster` operations (the pg_auto_failover topology may
offer the same)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import ConfigError, TopologyError

#: The faults a round can make, in the order :func:`fault_plan` cycles through them.
ROUND_OPS = ("kill", "switchover", "kill", "failover")
#: How long the topology may take to be whole again after a round.
WHOLE_TIMEOUT_S = 180.0


def fault_plan(rounds: int, ops: Sequence[str] = ROUND_OPS) -> list[str]:
    """The round ops for ``rounds`` rounds: ``ops`` repeated (default: half machine losses, a quarter
    each planned switchovers and manual failovers - DUR-1 over a mix of manager failovers)."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"rounds must be a positive integer, not {rounds!r}")
    unknown = sorted(set(ops) - {"kill", "switchover", "failover"})
    if unknown or not ops:
        raise ConfigError(f"unknown round op(s) {unknown or ops!r}; use kill, switchover, failover")
    return [ops[i % len(ops)] for i in range(rounds)]


@dataclass(frozen=True)
class RoundResult:
    """What one round did (DUR-1 / HAM-3 evidence): the op, the leader before and after, and how long it took."""

    number: int
    op: str
    before: str
    after: str
    failover_s: float  # from the fault until another node accepted writes (the manager's part)
    whole_s: float  # from the fault until every node streamed again (and a sync standby was named)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``ham.round`` fields, benchmark output; DUR-1, HAM-3)."""
        return asdict(self)


def wait_whole(cluster: Any, timeout: float = WHOLE_TIMEOUT_S) -> str:
    """Wait until one node accepts writes, every other node streams its timeline (``pg_rewind``
    done: HAM-6) and, in synchronous mode, the manager names a synchronous standby; return the
    leader (TopologyError naming the node that is not back)."""
    deadline = time.monotonic() + timeout
    leader = cluster.wait_one_leader(timeout=timeout)
    timeline = cluster.probe(leader).timeline or 0
    for name in cluster.names:
        if name == leader:
            continue
        while True:
            p = cluster.probe(name)
            if p.streaming and (p.timeline or 0) >= timeline:
                break
            if time.monotonic() > deadline:
                raise TopologyError(f"{name} does not stream timeline {timeline} of {leader} after "
                                    f"{timeout:.0f} s ({p.summary()})")
            time.sleep(0.3)
    if cluster.timing.synchronous_mode:
        cluster.wait_sync_standby(timeout=max(5.0, deadline - time.monotonic()))
    return leader


def run_round(cluster: Any, number: int, op: str, history: Any = None) -> RoundResult:
    """One round of DUR-1 under the manager (see the module docstring): make ``op`` happen through the manager, wait
    until the
    topology is whole again, record ``ham.round`` and return what it did."""
    before = wait_whole(cluster)
    t0 = time.monotonic()
    if op == "switchover":
        result = cluster.switchover()
    elif op == "failover":
        result = cluster.failover()
    elif op == "kill":
        result = cluster.kill(before)
    else:
        raise ConfigError(f"unknown round op {op!r}; use kill, switchover, failover")
    failover_s = float(result.get("seconds") or time.monotonic() - t0)
    if op == "kill":
        cluster.start(before)
    after = wait_whole(cluster)
    out = RoundResult(number, op, before, after, round(failover_s, 3), round(time.monotonic() - t0, 3))
    if history is not None:
        history.record("ham.round", **out.to_dict())
    return out


def run_rounds(cluster: Any, plan: Sequence[str], history: Any = None,
               progress: Callable[[RoundResult], None] | None = None) -> list[RoundResult]:
    """Every round of ``plan`` in turn (DUR-1, HAM-3/HAM-6 evidence; :func:`run_round`), ``progress`` called after
    each."""
    results = []
    for number, op in enumerate(plan, start=1):
        results.append(run_round(cluster, number, op, history))
        if progress is not None:
            progress(results[-1])
    return results
