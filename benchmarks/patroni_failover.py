"""Patroni failover benchmark (docs/ha-managers.md): on one ``patroni-group3`` with the harness's
timings, ``--repeat`` times each

* the leader's machine lost (Patroni + PostgreSQL SIGKILLed): seconds until another node accepts
  a write (HAM-3's documented bound: ttl + loop_wait), then the node is started again and rejoins;
* the leader cut from etcd: seconds until it stops accepting writes (HAM-2: between retry_timeout
  and ttl), then healed and left to rejoin;

printed as median and p95 beside the bound computed from the settings.

    python benchmarks/patroni_failover.py [--repeat 10] [--skip-dcs]
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness.topology.patroni import PatroniCluster


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _until(check, timeout: float, poll: float = 0.1) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"not within {timeout} s")
        time.sleep(poll)
    return time.monotonic() - t0


def _rejoin(c: PatroniCluster, node: str) -> None:
    """Until ``node`` streams the current leader's timeline (not just the old one for a moment)."""
    timeline = c.probe(c.wait_one_leader(timeout=60)).timeline or 0

    def back() -> bool:
        p = c.probe(node)
        return bool(p.streaming) and (p.timeline or 0) >= timeline
    _until(back, 120, 0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--skip-dcs", action="store_true")
    args = ap.parse_args()
    with PatroniCluster(nodes=3) as c:
        t = c.timing
        failover: list[float] = []
        for i in range(args.repeat):
            leader = c.wait_one_leader(timeout=60)
            c.wait_sync_standby(timeout=60)  # in synchronous_mode Patroni promotes only that one
            t0 = time.monotonic()
            c.kill(leader, wait=False)
            c.wait_one_leader(timeout=c.failover_budget(), exclude=leader)
            failover.append(time.monotonic() - t0)
            print(f"kill {i + 1}: {leader} lost, new leader after {failover[-1]:.2f} s", flush=True)
            c.start(leader)
            _rejoin(c, leader)
        demote: list[float] = []
        for i in range(0 if args.skip_dcs else args.repeat):
            leader = c.wait_one_leader(timeout=60)
            c.wait_sync_standby(timeout=60)
            t0 = time.monotonic()
            c.cut(leader, "dcs")
            demote.append(_until(lambda n=leader: c.probe(n).write != "ok", t.ttl + 30, 0.05))
            print(f"dcs cut {i + 1}: {leader} stopped accepting writes after {demote[-1]:.2f} s", flush=True)
            c.wait_one_leader(timeout=c.failover_budget(), exclude=leader)
            c.heal(leader, "dcs")
            _rejoin(c, leader)
        print(f"settings: ttl {t.ttl} s, loop_wait {t.loop_wait} s, retry_timeout {t.retry_timeout} s, "
              f"synchronous_mode {t.synchronous_mode}")
        print(f"failover after the leader's loss: median {statistics.median(failover):.2f} s, p95 "
              f"{_p95(failover):.2f} s over {len(failover)} runs; bound ttl + loop_wait = {t.ttl + t.loop_wait} s")
        if demote:
            print(f"demotion after a DCS cut: median {statistics.median(demote):.2f} s, p95 {_p95(demote):.2f} s "
                  f"over {len(demote)} runs; bound [{t.retry_timeout}, {t.ttl}] s")


if __name__ == "__main__":
    main()
