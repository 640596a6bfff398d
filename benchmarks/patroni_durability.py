"""DUR-1 over Patroni failovers (docs/ha-managers.md "Durability over manager failovers"): one
``patroni-group3`` with the harness's timings, two key writers committing continuously through the
fault proxies (libpq multi-host, ``target_session_attrs=read-write``: whichever node leads), while
Patroni answers ``--rounds`` faults (:func:`harness.workload.manager_rounds.fault_plan`: machine loss
of the leader, switchover and manual failover through the REST API). Then one final read and

* synchronous mode (default): DUR-1 (no acknowledged write lost), HAM-1, HAM-3, HAM-4, HAM-6;
* ``--mode async``: the loss measured and judged against Patroni's documented bound
  (``maximum_lag_on_failover`` bytes + what was written in the last ``ttl`` seconds).

Prints one line per round and a summary; ``--json FILE`` writes the figures (read by
``scripts/ham_matrix.py``).

    python benchmarks/patroni_durability.py [--rounds 20] [--mode sync|async] [--pause 0.01]
        [--front multihost|haproxy] [--json FILE] [--history FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from harness.history.core import History
from harness.history.store import save_jsonl
from harness.rules.durability import check_no_acknowledged_write_lost
from harness.rules.durability_bound import check_async_loss_within_documented_bound
from harness.rules.ham import (
    check_failover_within_bound,
    check_former_leader_rejoins_new_timeline,
    check_health_endpoints_agree_with_servers,
    check_one_writer_at_a_time,
    check_sync_mode_keeps_acknowledged_commits,
)
from harness.topology.haproxy_front import HAProxyFront
from harness.topology.patroni import PatroniCluster
from harness.topology.patroni_conf import MAXIMUM_LAG_ON_FAILOVER
from harness.topology.patroni_settings import DEFAULT_TIMING
from harness.workload import KeyWriter, final_read
from harness.workload.keywriter import ensure_table
from harness.workload.manager_rounds import fault_plan, run_rounds


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def wal_position(dsn: str) -> int:
    """The leader's current WAL position in bytes (``pg_current_wal_lsn()``)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        return int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')").fetchone()[0])


def client_outages(events: list[Any]) -> dict[str, list[float]]:
    """Per round op: the longest wait between two consecutive acknowledged commits of the writers
    from the fault (``ham.op`` start) to the end of its round (``ham.round``) - the outage the
    client saw, through whatever front it uses."""
    out: dict[str, list[float]] = {}
    ordered = sorted(events, key=lambda e: e.index)
    acks = [e for e in ordered if e.type == "op.ok" and e.get("f") == "write"]
    rounds = [e for e in ordered if e.type == "ham.round"]
    for f in ordered:
        if not (f.type == "ham.op" and f.get("phase") == "start" and f.get("op") in ("kill", "switchover", "failover")):
            continue
        end = next((r for r in rounds if r.index > f.index), None)
        if end is None:
            continue
        before = [a for a in acks if a.index < f.index][-1:]
        times = [a.t for a in before + [a for a in acks if f.index < a.index < end.index]]
        if len(times) >= 2:
            out.setdefault(f.get("op"), []).append(max(b - a for a, b in zip(times, times[1:], strict=False)))
    return out


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"runs": 0}
    return {"runs": len(values), "median": round(statistics.median(values), 2), "p95": round(_p95(values), 2),
            "min": round(min(values), 2), "max": round(max(values), 2)}


def judge(events: list[Any], mode: str, ttl: float, per_write: float | None) -> list[Any]:
    """The run's verdicts: DUR-1 first, then HAM-1, HAM-3, HAM-5, HAM-4, HAM-6 and, in asynchronous
    mode, the loss against Patroni's documented bound."""
    verdicts = [check_no_acknowledged_write_lost(events, mode=mode), check_one_writer_at_a_time(events),
                check_failover_within_bound(events), check_health_endpoints_agree_with_servers(events),
                check_sync_mode_keeps_acknowledged_commits(events), check_former_leader_rejoins_new_timeline(events)]
    if mode == "async":
        verdicts.append(check_async_loss_within_documented_bound(
            events, ttl_s=ttl, max_lag_bytes=MAXIMUM_LAG_ON_FAILOVER, wal_bytes_per_write=per_write))
    return verdicts


def verdicts_json(verdicts: list[Any]) -> list[dict[str, Any]]:
    """The verdicts as the result file keeps them."""
    return [{"rule_id": v.rule_id, "status": v.status, "observed": v.observed,
             "details": {k: v.details[k] for k in ("faults", "allowance_writes", "lost_count") if k in v.details}}
            for v in verdicts]


def rejudge(history_path: str, json_path: str) -> None:
    """Judge a saved run again with today's checkers (``--rejudge HISTORY --json FILE``): the
    result file's verdicts and the client-seen outages (both read from the history) are replaced,
    its other measured figures kept."""
    from harness.history.store import read_jsonl

    out = json.loads(Path(json_path).read_text())
    _, events = read_jsonl(history_path)
    verdicts = judge(events, out["mode"], out["timing"]["ttl"], out.get("wal_bytes_per_write"))
    out["verdicts"] = verdicts_json(verdicts)
    out["client_outage_s"] = {op: _stats(v) for op, v in client_outages(events).items()}
    Path(json_path).write_text(json.dumps(out, indent=1) + "\n")
    for v in verdicts:
        print(v.summary[:600])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--mode", choices=["sync", "async"], default="sync")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--front", choices=["multihost", "haproxy"], default="multihost",
                    help="how the writers reach the leader: a libpq host list (target_session_attrs=read-write) "
                         "or HAProxy with GET /primary health checks")
    ap.add_argument("--history", help="save the whole history (JSON lines; several MB) to this file")
    ap.add_argument("--pause", type=float, default=0.01, help="seconds each writer waits between commits")
    ap.add_argument("--rejudge", metavar="HISTORY", help="judge a saved history (--history of an earlier run) "
                                                         "again and replace the verdicts of --json FILE")
    args = ap.parse_args()
    if args.rejudge:
        if not args.json:
            ap.error("--rejudge needs --json FILE (the earlier run's result file)")
        rejudge(args.rejudge, args.json)
        return
    plan = fault_plan(args.rounds)
    timing = dataclasses.replace(DEFAULT_TIMING, synchronous_mode=args.mode == "sync")
    history = History(meta={"benchmark": "patroni_durability", "mode": args.mode, "topology": {"mode": args.mode}})
    load0 = os.getloadavg()
    t_start = time.monotonic()
    with contextlib.ExitStack() as stack:
        c = stack.enter_context(PatroniCluster(nodes=3, timing=timing, history=history))
        dsn = stack.enter_context(HAProxyFront(c)).dsn if args.front == "haproxy" else c.dsn
        ensure_table(dsn())
        wal0 = wal_position(dsn())
        with c.observe(), KeyWriter(dsn, history, process="writer-1", pause=args.pause) as w1, \
                KeyWriter(dsn, history, process="writer-2", start=10_000_000, pause=args.pause) as w2:
            def progress(r: Any) -> None:
                print(f"round {r.number:2}: {r.op:10} {r.before} -> {r.after}: writes accepted again after "
                      f"{r.failover_s:.2f} s, whole after {r.whole_s:.2f} s; acknowledged so far "
                      f"{len(w1.acknowledged) + len(w2.acknowledged)}", flush=True)
            rounds = run_rounds(c, plan, history, progress)
            time.sleep(1.0)
        wal1 = wal_position(dsn())
        final_read(dsn(), history)
    acknowledged = len(w1.acknowledged) + len(w2.acknowledged)
    events = history.events()
    per_write = (wal1 - wal0) / acknowledged if acknowledged else None
    verdicts = judge(events, args.mode, timing.ttl, per_write)
    dur = verdicts[0]
    by_op: dict[str, list[float]] = {}
    for r in rounds:
        by_op.setdefault(r.op, []).append(r.failover_s)
    load1 = os.getloadavg()
    out = {"manager": "patroni", "benchmark": "patroni_durability", "mode": args.mode, "front": args.front,
           "rounds": len(rounds),
           "plan": plan, "timing": timing.to_dict(), "max_lag_bytes": MAXIMUM_LAG_ON_FAILOVER,
           "acknowledged": acknowledged, "lost": dur.details.get("lost_count"),
           "indeterminate": w1.indeterminate + w2.indeterminate, "failed": w1.failed + w2.failed,
           "wal_bytes": wal1 - wal0, "wal_bytes_per_write": round(per_write, 1) if per_write else None,
           "seconds": round(time.monotonic() - t_start, 1), "load_before": load0, "load_after": load1,
           "failover_s": {op: _stats(v) for op, v in by_op.items()},
           "client_outage_s": {op: _stats(v) for op, v in client_outages(events).items()},
           "rounds_detail": [r.to_dict() for r in rounds],
           "verdicts": verdicts_json(verdicts)}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    if args.history:
        save_jsonl(history, args.history)
    for v in verdicts:
        print(v.summary[:600])
    for op, stats in out["failover_s"].items():
        print(f"{op}: writes accepted again after median {stats['median']} s, p95 {stats['p95']} s over "
              f"{stats['runs']} rounds")
    print(f"acknowledged {acknowledged}, lost {out['lost']}, indeterminate {out['indeterminate']}; WAL "
          f"{out['wal_bytes_per_write']} bytes per write; load {load0[0]:.1f} -> {load1[0]:.1f}; {out['seconds']} s")


if __name__ == "__main__":
    main()
