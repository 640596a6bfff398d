"""pg_auto_failover benchmark (docs/ha-managers.md): ``--ups`` fresh ``pgaf-group3`` brought up
(seconds until one primary accepts writes and both secondaries stream), then on the last one,
``--repeat`` times, the primary's machine lost (pg_autoctl + PostgreSQL SIGKILLed): seconds until
another node accepts a write (HAM-3's documented bound from the settings: the monitor's detection +
primary_demote_timeout), then the node started again and left to rejoin. Printed as median and p95.

    python benchmarks/pgaf_failover.py [--ups 3] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from harness.topology.pgaf import STANDBY_STATES, PgafCluster


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _rejoined(c: PgafCluster, node: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = c.probe(node)
        if p.streaming and p.monitor_state in STANDBY_STATES and p.monitor_goal == p.monitor_state:
            return
        time.sleep(0.3)
    raise TimeoutError(f"{node} did not rejoin within {timeout} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ups", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    ups: list[float] = []
    for i in range(max(1, args.ups)):
        t0 = time.monotonic()
        c = PgafCluster(nodes=3).up()
        ups.append(time.monotonic() - t0)
        print(f"up {i + 1}: {ups[-1]:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
        if i < args.ups - 1:
            c.down()
    try:
        s = c.settings
        failover: list[float] = []
        for i in range(args.repeat):
            leader = c.wait_one_leader(timeout=60)
            for n in c.names:
                if n != leader:
                    _rejoined(c, n)
            t0 = time.monotonic()
            c.kill(leader, wait=False)
            c.wait_one_leader(timeout=c.failover_budget(), exclude=leader)
            failover.append(time.monotonic() - t0)
            print(f"kill {i + 1}: {leader} lost, new primary writable after {failover[-1]:.2f} s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
            c.start(leader)
            _rejoined(c, leader)
    finally:
        c.down()
    print(f"up pgaf-group3: median {statistics.median(ups):.2f} s, max {max(ups):.2f} s over {len(ups)} runs")
    if failover:
        print(f"failover after the primary's loss: median {statistics.median(failover):.2f} s, p95 "
              f"{_p95(failover):.2f} s over {len(failover)} runs; documented bound {s.failover_bound_s():g} s "
              f"(detection {s.detection_s():g} s + primary_demote_timeout {s.primary_demote_timeout_ms / 1000:g} s)")


if __name__ == "__main__":
    main()
