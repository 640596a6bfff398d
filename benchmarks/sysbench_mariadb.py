"""sysbench ``oltp_read_write`` (Debian sysbench 1.0.20, mysql driver) on a MariaDB group of one
primary and two replicas (docs/mariadb.md; seed 002's measurement: 20 tables x 10,000 rows, 20 threads),
three runs side by side in the same process on the same group:

* ``direct``            - sysbench to the primary's own address;
* ``proxy``             - through the reference MySQL persistent proxy, no fault;
* ``proxy+switchovers`` - through the proxy while the group switches over ``--switchovers`` times
  (coordinated: drain, switchover, resume), with connections kept / errors / the lowest per-second tps.

Prints tps and p95 latency of each run and their ratio to ``direct``. The group runs without the fault
proxy (``links="direct"``) so the figures are sysbench's and the proxy's own. The proxy runs in this
process (as in the suites): its threads share this interpreter's lock.

Run: ``python benchmarks/sysbench_mariadb.py`` (≈2 min; ``--seconds``, ``--switchovers``, ``--threads``,
``--tables``, ``--table-size`` change it)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.clients.persistent.reference_mysql import MySQLReferenceClient  # noqa: E402
from harness.faults import Faults  # noqa: E402
from harness.history.core import History  # noqa: E402
from harness.topology.local import LocalGroup  # noqa: E402
from harness.topology.mariadb import MariaDBEngine  # noqa: E402
from harness.workload.sysbench import Sysbench, SysbenchResult  # noqa: E402


def _run(address: tuple[str, int], creds, args: argparse.Namespace, during=None,
         seconds: int | None = None) -> SysbenchResult:
    bench = Sysbench(address, creds.user, creds.password, creds.database, tables=args.tables,
                     table_size=args.table_size)
    try:
        proc = bench.start(seconds or args.seconds, threads=args.threads)
        if during is not None:
            during()
        return bench.finish(proc)
    finally:
        bench.close()


def main() -> int:
    """Run the three configurations and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--switchovers", type=int, default=5)
    p.add_argument("--threads", type=int, default=20)
    p.add_argument("--tables", type=int, default=20)
    p.add_argument("--table-size", type=int, default=10_000)
    args = p.parse_args()
    history = History()
    with LocalGroup(nodes=3, engine=MariaDBEngine(), mode="sync", links="direct", history=history) as group:
        creds = group.engine.credentials
        t0 = time.monotonic()
        Sysbench(group.principal.server_address, creds.user, creds.password, creds.database, tables=args.tables,
                 table_size=args.table_size).prepare(threads=4)
        print(f"prepared {args.tables} x {args.table_size} rows in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        rows: list[tuple[str, SysbenchResult, str]] = []
        rows.append(("direct", _run(group.principal.server_address, creds, args), ""))
        client = MySQLReferenceClient(group, history, drain_window=10.0, recovery_window=20.0)
        client.start()
        assert client.address is not None
        try:
            rows.append(("proxy", _run(client.address, creds, args), ""))
            faults = Faults(group, history)
            faults.coordinate(client)
            # long enough that every switchover happens while all threads run (≈4 s each under load)
            seconds = max(args.seconds, 12 + 5 * args.switchovers)

            def switch() -> None:
                time.sleep(6)
                for _ in range(args.switchovers):
                    faults.switchover()
                    time.sleep(1.5)

            res = _run(client.address, creds, args, during=switch, seconds=seconds)
            ends = history.events("persist.drain_end")
            kept = sum(int(e.get("kept", 0)) for e in ends)
            closed = sum(int(e.get("closed", 0)) for e in ends)
            rows.append(("proxy+switchovers", res,
                         f"{seconds} s, {len(ends)} switchovers, kept {kept}/{args.threads * len(ends)} "
                         f"(closed {closed}), lowest tps in a 1 s interval {res.min_interval_tps:.0f}"))
        finally:
            client.stop()
    base = rows[0][1]
    print(f"sysbench oltp_read_write, {args.tables} x {args.table_size} rows, {args.threads} threads, "
          f"{args.seconds} s per run, MariaDB {MariaDBEngine().server_version()} group of 3 (semi-sync)")
    print(f"{'run':<19} {'tps':>8} {'x direct':>9} {'p95 ms':>9} {'x direct':>9} {'errors':>7} {'reconn':>7}  notes")
    for name, r, note in rows:
        tps_ratio = r.tps / base.tps if base.tps else float("nan")
        p95_ratio = r.p95_ms / base.p95_ms if base.p95_ms else float("nan")
        print(f"{name:<19} {r.tps:>8.1f} {tps_ratio:>9.2f} {r.p95_ms:>9.1f} {p95_ratio:>9.2f} {r.errors:>7} "
              f"{r.reconnects:>7}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
