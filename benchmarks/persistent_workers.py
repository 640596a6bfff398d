"""How ``persistent-proxy --workers N`` spreads sysbench's connections over its workers:
the shared listening socket against one ``SO_REUSEPORT`` socket per worker, side by side on the same
pair, and the tps of each beside direct.

Run: ``python benchmarks/persistent_workers.py`` (≈1-2 min; ``--repeats``, ``--seconds``, ``--threads``,
``--workers`` change it). Per repeat and listen mode a fresh proxy (CLI, subprocess) runs sysbench
``oltp_point_select`` for ``--seconds``; half-way, the supervisor's ``GET /status`` says how many of
the sessions each worker holds. Needs ``sysbench``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.clients.persistent.reference_process import ReferenceProcessClient  # noqa: E402
from harness.topology import Pair  # noqa: E402
from harness.workload.sysbench import Sysbench  # noqa: E402

MODES = ("shared", "reuseport")


def _sysbench(address: tuple[str, int], creds: Any, args: argparse.Namespace) -> Sysbench:
    return Sysbench(address, creds.user, creds.password, creds.database, tables=args.tables,
                    table_size=args.table_size, driver="pgsql", test="oltp_point_select")


def _run(address: tuple[str, int], creds: Any, args: argparse.Namespace, probe: Any = None) -> tuple[float, Any]:
    seen: list[Any] = []
    with _sysbench(address, creds, args) as bench:
        proc = bench.start(args.seconds, threads=args.threads)
        if probe is not None:
            t = threading.Thread(target=lambda: (time.sleep(args.seconds / 2), seen.append(probe())), daemon=True)
            t.start()
        result = bench.finish(proc, timeout=args.seconds + 120)
    return result.tps, (seen[0] if seen else None)


def main() -> int:
    """Print, per listen mode, the sessions per worker of every repeat and the median tps ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--threads", type=int, default=20)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--table-size", type=int, default=10_000)
    args = ap.parse_args()
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    splits: dict[str, list[list[int]]] = {m: [] for m in MODES}
    ratios: dict[str, list[float]] = {m: [] for m in MODES}
    with Pair(mode="async", links="direct") as pair:
        creds = pair.engine.credentials
        direct = tuple(pair.principal.server_address)
        with _sysbench(direct, creds, args) as bench:  # type: ignore[arg-type]
            bench.cleanup()
            bench.prepare()
        for _ in range(args.repeats):
            direct_tps, _ = _run(direct, creds, args)  # type: ignore[arg-type]
            for mode in MODES:
                proxy = ReferenceProcessClient(pair, workers=args.workers, listen_mode=mode)
                proxy.start()
                try:
                    tps, status = _run(tuple(proxy.address), creds, args, probe=proxy.status)  # type: ignore[arg-type]
                finally:
                    proxy.stop()
                split = sorted((w["sessions"] for w in status["worker_processes"]), reverse=True) if status else []
                splits[mode].append(split)
                ratios[mode].append(tps / direct_tps)
    print(f"\nsysbench oltp_point_select, {args.threads} threads, {args.seconds:g} s, --workers {args.workers}, "
          f"{os.cpu_count()} cores; load average 1/5/15 min {load0} at the start, "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    for mode in MODES:
        shown = "  ".join("/".join(map(str, s)) for s in splits[mode])
        print(f"{mode:<10} sessions per worker (each repeat, largest first): {shown:<30} "
              f"tps x direct (median of {args.repeats}): {statistics.median(ratios[mode]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
