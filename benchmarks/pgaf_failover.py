"""pg_auto_failover benchmark (docs/ha-managers.md): ``--ups`` fresh ``pgaf-group3`` brought up
(seconds until one primary accepts writes and both secondaries stream), then on the last one,
``--repeat`` times, the primary's machine lost (pg_autoctl + PostgreSQL SIGKILLed): seconds until
another node accepts a write (HAM-3's documented bound from the settings: the monitor's detection +
primary_demote_timeout), then the node started again and left to rejoin. Printed as median and p95.

    python benchmarks/pgaf_failover.py [--ups 3] [--repeat 5] [--json FILE]

``--json`` writes the failover timings as a result file of docs/matrix-ham.md (scripts/ham_matrix.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

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
    ap.add_argument("--json", help="write the failover timings as a docs/matrix-ham.md result file")
    args = ap.parse_args()
    load0 = os.getloadavg()
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
        if args.json:
            Path(args.json).write_text(json.dumps(result_file(c, failover, load0), indent=1) + "\n")


def result_file(c: PgafCluster, failover: list[float], load0: tuple[float, ...]) -> dict[str, Any]:
    """The failover timings as a docs/matrix-ham.md result file (harness/report/ham_matrix.py), with HAM-3's
    bound from the settings and its tolerance (5 s + 1 s per keeper step: harness/rules/ham/checks.py)."""
    s = c.settings
    bound = s.failover_bound_s()
    timing = {"fault": "primary's machine lost (pg_autoctl + PostgreSQL SIGKILLed), group of 3",
              "what": "the fault -> another node accepts a write", "runs": len(failover),
              "median": round(statistics.median(failover), 2), "p95": round(_p95(failover), 2), "bound_s": bound,
              "bound": f"detection {s.detection_s():g} s + primary_demote_timeout "
                       f"{s.primary_demote_timeout_ms / 1000:g} s = {bound:g} s (HAM-3 tolerates +9 s)",
              "tolerance_s": 9}
    return {"manager": "pg_auto_failover", "source": f"benchmarks/pgaf_failover.py --repeat {len(failover)}",
            "measured": f"{time.strftime('%Y-%m-%d')}, load {load0[0]:.1f} at the start",
            "matrix": {"rows": [], "timings": [timing]}}


if __name__ == "__main__":
    main()
