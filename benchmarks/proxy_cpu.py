"""The reference persistent proxy's own CPU per transaction (where its time goes), beside a
relay with no parsing, under sysbench: the proxy thread's user + system time from
``/proc/self/task/TID/stat`` divided by the transactions it relayed - a figure the machine's load
distorts far less than throughput. With ``--chunks`` it also counts the chunks whose tracking took
the one-call paths (:mod:`harness.persistproxy.fastpath`, taken whole) and the others, by their
message types.

Run: ``python benchmarks/proxy_cpu.py`` (≈3 min; ``--test``, ``--rounds``, ``--seconds``). Rows:
``direct`` (tps only), ``reference`` (the in-process proxy, one thread) and ``relay-floor-py``
(``benchmarks/relay_floor.py``: the same event loop, one callback and one write per chunk, nothing
else). The rows take turns in each round on one pair; nothing is asserted (figures, not targets)."""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import sysbench as sb  # noqa: E402  (benchmarks/, this script's folder)
from relay_floor import PythonTcpRelay  # noqa: E402

import harness.persistproxy.proxy as proxy_module  # noqa: E402
from harness.clients import persistent as adapters  # noqa: E402
from harness.persistproxy.fastpath import COMPILED as TRACKING_COMPILED  # noqa: E402
from harness.persistproxy.frames import COMPILED, DATA_ROW, NO_RUNS  # noqa: E402
from harness.topology import Pair  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(tid: int) -> float:
    """Seconds of CPU (user + system) thread ``tid`` of this process has used."""
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _count_chunks(counter: collections.Counter[tuple[str, bytes, str]]) -> None:
    """Count each chunk the proxy tracks, by direction, message types (a DataRow run is one 'D') and
    path: ``one-call`` (taken whole by :mod:`harness.persistproxy.fastpath`) or ``loop``."""
    walk, request, answer = proxy_module.frames, proxy_module.simple_request, proxy_module.simple_answer

    def counted_request(st: Any, buf: bytes) -> bool:
        took = request(st, buf)
        if took:
            counter["front", walk(buf, NO_RUNS)[0][:8], "one-call"] += 1
        return took

    def counted_answer(st: Any, data: bytes) -> int:
        end = answer(st, data)
        if end:
            counter["back", walk(data[:end], DATA_ROW)[0][:8], "one-call"] += 1
        return end

    def counted_walk(data: bytes, run_type: int) -> Any:
        kinds, ends = walk(data, run_type)
        counter["back" if run_type >= 0 else "front", kinds[:8], "loop"] += 1
        return kinds, ends

    proxy_module.frames = counted_walk  # type: ignore[assignment]
    proxy_module.simple_request = counted_request  # type: ignore[assignment]
    proxy_module.simple_answer = counted_answer  # type: ignore[assignment]


def main() -> int:
    """Print one line per row and round: tps, and the proxy thread's CPU per transaction."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test", default="oltp_read_write", help="sysbench test (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each run (default 8)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, the rows taking turns (default 3)")
    ap.add_argument("--chunks", action="store_true", help="also count the chunks by their message types")
    opts = ap.parse_args()
    if opts.rounds < 1 or opts.seconds <= 0:
        ap.error("--rounds must be >= 1 and --seconds > 0")
    if not Path(sb.SYSBENCH).exists():
        print("sysbench is not installed: apt-get install -y sysbench (scripts/setup.sh lists it)")
        return 2
    chunks: collections.Counter[tuple[str, bytes, str]] = collections.Counter()
    if opts.chunks:
        _count_chunks(chunks)
    run_opts = argparse.Namespace(seconds=opts.seconds, threads=20, tables=20, table_size=10_000)
    print(f"{opts.test}, 20 threads, {opts.seconds:g} s runs; framing walk: {'compiled' if COMPILED else 'Python'}, "
          f"one-call tracking: {'compiled' if TRACKING_COMPILED else 'Python'}")
    with Pair(mode="async", links="direct") as pair:
        creds = pair.engine.credentials
        sb._prepare(pair.principal.server_address, creds, run_opts)
        reference = adapters.open_client(adapters.reference_client, pair=pair, drain_window=10.0,
                                         recovery_window=30.0)
        relay = PythonTcpRelay(pair.principal.server_address, pair.principal.dsn(), pair).start()
        try:
            rows = {"direct": (pair.principal.server_address, None),
                    "reference": (reference.address, reference.proxy._thread.native_id),
                    "relay-floor-py": (relay.address, relay._thread.native_id)}
            for r in range(opts.rounds):
                for name, (address, tid) in rows.items():
                    before, started = (thread_cpu(tid) if tid else 0.0), time.monotonic()
                    result = sb._run(tuple(address), creds, run_opts, "auto", test=opts.test)
                    used, wall = (thread_cpu(tid) - before if tid else 0.0), time.monotonic() - started
                    line = f"round {r + 1} {name:<15} {result['tps']:9.0f} tps"
                    if tid and result["tps"] > 0:
                        per_tx = used / (result["tps"] * opts.seconds) * 1e6
                        line += (f"   proxy thread {used:5.2f} s CPU = {per_tx:5.0f} µs/transaction, "
                                 f"{used / wall:.2f} core")
                    print(line, flush=True)
        finally:
            relay.stop()
            reference.stop()
    if opts.chunks:
        total = {d: sum(v for (dd, _, _), v in chunks.items() if dd == d) or 1 for d in ("front", "back")}
        print("chunks by message types and path (one-call: [P]B[D]ES and [1]2[T|n][D]CZ taken whole):")
        for (direction, kinds, path), count in chunks.most_common(12):
            share = count / total[direction]
            print(f"  {direction:<5} {kinds.decode('latin-1'):<10} {path:<8} {count:8d}  {share:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
