"""Fault-proxy overhead: round-trip latency and throughput, direct vs through the proxy.

Run: ``python benchmarks/proxy.py`` (about 1 min; ``--seconds`` changes the per-case time, ``--rounds``
the number of rounds, default 5, in which the paths take turns).
The echo server and the load generators run in their own processes; the embedded proxy runs in
this process exactly as the harness uses it. With ``TOXIPROXY_URL`` set, that server is measured
too, and a zero-copy ``os.splice`` relay is measured as the floor any user-space proxy pays.
Targets: p50 added latency <= 0.3 ms; throughput at 8 connections >= 0.7x direct, each judged by
the 90 % interval of its median over the rounds (:mod:`harness.report.targets`): ``met`` / ``NOT met``
only when the whole interval is on one side of the target, else ``not shown``. Exit 1 when a target
is shown missed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.report.targets import NOT_MET, judge, median_interval, verdict_text  # noqa: E402
from harness.toxiproxy import EmbeddedToxiproxy, ToxiproxyClient  # noqa: E402

MSG = 64
BULK = 64 * 1024
TARGET_ADDED_P50_MS = 0.3
TARGET_THROUGHPUT_RATIO = 0.7


# -- echo server (own process) ---------------------------------------------------------------------
def _echo_conn(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        try:
            while True:
                data = conn.recv(BULK)
                if not data:
                    return
                conn.sendall(data)
        except OSError:
            return


def echo_server(port_queue: mp.Queue) -> None:
    """Threaded echo server; reports its port on ``port_queue`` and runs until killed."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    port_queue.put(s.getsockname()[1])
    while True:
        conn, _ = s.accept()
        threading.Thread(target=_echo_conn, args=(conn,), daemon=True).start()


# -- reference relay (own process): the cheapest possible user-space TCP proxy -------------------
def _splice_pump(src: socket.socket, dst: socket.socket) -> None:
    r, w = os.pipe()
    try:
        while True:
            n = os.splice(src.fileno(), w, 1 << 20)
            if n == 0:
                break
            while n:
                n -= os.splice(r, dst.fileno(), n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def splice_relay(upstream_port: int, port_queue: mp.Queue) -> None:
    """Zero-copy relay (os.splice, a thread per direction): what any user-space proxy costs at
    least, since every byte still crosses two more loopback TCP hops. Runs until killed."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    port_queue.put(s.getsockname()[1])
    while True:
        client, _ = s.accept()
        upstream = socket.create_connection(("127.0.0.1", upstream_port))
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_splice_pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_splice_pump, args=(upstream, client), daemon=True).start()


# -- load generators (own processes) ---------------------------------------------------------------
def ping_pong(args: tuple[int, float]) -> list[float]:
    """Round trips of MSG bytes for ``seconds``; returns the RTTs in seconds."""
    port, seconds = args
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = b"p" * MSG
    rtts = []
    with s:
        for _ in range(50):  # warm-up
            s.sendall(payload)
            s.recv(MSG)
        end = time.perf_counter() + seconds
        while True:
            t0 = time.perf_counter()
            if t0 > end:
                break
            s.sendall(payload)
            got = 0
            while got < MSG:
                got += len(s.recv(MSG - got))
            rtts.append(time.perf_counter() - t0)
    return rtts


def bulk(args: tuple[int, float]) -> float:
    """Stream data through the echo path for ``seconds``; returns bytes/s received back."""
    port, seconds = args
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    chunk = b"b" * BULK
    stop = threading.Event()

    def writer() -> None:
        try:
            while not stop.is_set():
                s.sendall(chunk)
        except OSError:
            pass

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    received = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        received += len(s.recv(1 << 20))
    elapsed = time.perf_counter() - start
    stop.set()
    s.shutdown(socket.SHUT_RDWR)
    s.close()
    t.join(timeout=2)
    return received / elapsed


def measure(pool: mp.pool.Pool, port: int, conns: int, seconds: float) -> dict[str, float]:
    """p50/p99 RTT (ms) and total throughput (MB/s) with ``conns`` concurrent connections."""
    rtts = [r for part in pool.map(ping_pong, [(port, seconds)] * conns) for r in part]
    rtts.sort()
    tput = sum(pool.map(bulk, [(port, seconds)] * conns))
    return {"p50": rtts[len(rtts) // 2] * 1000, "p99": rtts[int(len(rtts) * 0.99)] * 1000,
            "mbps": tput / 1e6, "n": len(rtts)}


def run_rounds(pool: mp.pool.Pool, targets: list[tuple[str, int]], rounds: int,
               seconds: float) -> list[dict[tuple[str, int], dict[str, float]]]:
    """``rounds`` rounds in which every path is measured in turn at 1 and 8 connections: a path's
    ratio is taken to direct *in the same round*, so the machine's load of the moment weighs on both."""
    out = []
    for i in range(rounds):
        print(f"round {i + 1}/{rounds}: {', '.join(name for name, _ in targets)}", file=sys.stderr, flush=True)
        out.append({(name, conns): measure(pool, port, conns, seconds) for name, port in targets for conns in (1, 8)})
    return out


def per_round(results: list[dict[tuple[str, int], dict[str, float]]], name: str) -> tuple[list[float], list[float]]:
    """A path's added p50 (ms, 1 connection) and throughput ratio (8 connections) to direct, per round."""
    added = [r[(name, 1)]["p50"] - r[("direct", 1)]["p50"] for r in results]
    ratio = [r[(name, 8)]["mbps"] / r[("direct", 8)]["mbps"] for r in results]
    return added, ratio


def main() -> int:
    """Run every case, print the table and the verdicts; exit 1 if a target is shown missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="duration of each measurement")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds, the paths taking turns (default 5: the fewest that bound a median's 90%% interval)")
    args = ap.parse_args()
    if args.rounds < 1 or args.seconds <= 0:
        ap.error("--rounds must be at least 1 and --seconds above 0")
    ctx = mp.get_context("fork")
    q: mp.Queue = ctx.Queue()
    echo = ctx.Process(target=echo_server, args=(q,), daemon=True)
    echo.start()
    echo_port = q.get(timeout=5)
    relay = ctx.Process(target=splice_relay, args=(echo_port, q), daemon=True)
    relay.start()
    targets: list[tuple[str, int]] = [("direct", echo_port), ("splice-ref", q.get(timeout=5))]
    embedded = EmbeddedToxiproxy().start()
    external = None
    try:
        with ToxiproxyClient(embedded.url) as c:
            p = c.create_proxy("bench", f"127.0.0.1:{echo_port}")
            targets.append(("embedded", p.listen_port))
        url = os.environ.get("TOXIPROXY_URL")
        if url:
            external = ToxiproxyClient(url)
            external.create_proxy("bench_proxy_py", f"127.0.0.1:{echo_port}")
            targets.append(("real", external.get_proxy("bench_proxy_py").listen_port))
        with ctx.Pool(8) as pool:
            results = run_rounds(pool, targets, args.rounds, args.seconds)
    finally:
        if external is not None:
            external.delete_proxy("bench_proxy_py")
            external.close()
        embedded.stop()
        for proc in (echo, relay):
            proc.kill()
            proc.join()

    print(f"fault proxy overhead ({os.cpu_count()} cores, {MSG} B ping-pong, {BULK // 1024} KiB bulk, "
          f"{args.seconds:g} s per case, {args.rounds} rounds; medians, [90% interval] over the rounds)")
    print(f"{'path':<11}{'conns':>6}{'p50 ms':>9}{'p99 ms':>9}{'MB/s':>9}{'added p50 ms':>24}{'x direct':>22}")
    for name, _ in targets:
        added, ratio = per_round(results, name)
        for conns in (1, 8):
            med = {k: statistics.median(r[(name, conns)][k] for r in results) for k in ("p50", "p99", "mbps")}
            row = f"{name:<11}{conns:>6}{med['p50']:>9.3f}{med['p99']:>9.3f}{med['mbps']:>9.0f}"
            if name != "direct" and conns == 1:
                a = median_interval(added)
                row += f"{a.value:>+10.3f} [{a.span(digits=3):>11}]"
            elif name != "direct":
                r = median_interval(ratio)
                row += f"{'':>24}{r.value:>8.2f}x [{r.span('x'):>11}]"
            print(row)
    print("splice-ref = zero-copy os.splice relay in its own process: the floor for any user-space "
          "proxy on this machine (reference only, not a target)")
    missed = False
    for name, _ in targets[2:]:
        added, ratio = per_round(results, name)
        lat, tput = median_interval(added), median_interval(ratio)
        missed = missed or NOT_MET in (judge(lat, TARGET_ADDED_P50_MS, at_least=False),
                                       judge(tput, TARGET_THROUGHPUT_RATIO, at_least=True))
        print(f"{name}: p50 added {verdict_text(lat, TARGET_ADDED_P50_MS, at_least=False, unit=' ms', what='rounds')}")
        print(f"{name}: throughput at 8 conns "
              f"{verdict_text(tput, TARGET_THROUGHPUT_RATIO, at_least=True, unit='x', what='rounds')}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
