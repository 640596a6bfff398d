"""Patroni failover benchmark (docs/ha-managers.md): on one ``patroni-group3`` with the harness's
timings, ``--repeat`` times each

* the leader's machine lost (Patroni + PostgreSQL SIGKILLed): seconds until another node accepts
  a write (HAM-3's documented bound: ttl + loop_wait), then the node is started again and rejoins;
* the leader cut from etcd: seconds until it stops accepting writes (HAM-2: between retry_timeout
  and ttl), then healed and left to rejoin;

printed as median and p95 beside the bound computed from the settings.

    python benchmarks/patroni_failover.py [--repeat 10] [--skip-dcs] [--json FILE]

``--json`` writes the timings as a result file of docs/matrix-ham.md (scripts/ham_matrix.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

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
    ap.add_argument("--json", help="write the timings as a docs/matrix-ham.md result file")
    args = ap.parse_args()
    load0 = os.getloadavg()
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
    if args.json:
        Path(args.json).write_text(json.dumps(result_file(t.to_dict(), failover, demote, load0), indent=1) + "\n")


def result_file(t: dict, failover: list[float], demote: list[float], load0: tuple[float, ...]) -> dict:
    """The timings as a docs/matrix-ham.md result file (harness/report/ham_matrix.py)."""
    mode = "sync" if t["synchronous_mode"] else "async"
    timings = [{"fault": f"leader's machine lost (Patroni + PostgreSQL SIGKILLed), {mode} mode",
                "what": "the fault -> another node accepts a write", "runs": len(failover),
                "median": round(statistics.median(failover), 2), "p95": round(_p95(failover), 2),
                "bound_s": t["ttl"] + t["loop_wait"],
                "bound": f"ttl + loop_wait = {t['ttl'] + t['loop_wait']} s (HAM-3 tolerates +5 s)", "tolerance_s": 5}]
    if demote:
        timings.append({"fault": f"leader cut from etcd, {mode} mode", "what": "the cut -> the leader stops "
                        "accepting writes", "runs": len(demote), "median": round(statistics.median(demote), 2),
                        "p95": round(_p95(demote), 2), "bound_s": t["ttl"],
                        "bound": f"between retry_timeout = {t['retry_timeout']} s and ttl = {t['ttl']} s (HAM-2)"})
    load1 = os.getloadavg()
    return {"manager": "patroni", "source": "benchmarks/patroni_failover.py",
            "measured": f"patroni-group3, load average {load0[0]:.1f} -> {load1[0]:.1f} (2 cores, shared)",
            "matrix": {"rows": [], "timings": timings}}


if __name__ == "__main__":
    main()
