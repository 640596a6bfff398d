"""Fault-proxy overhead: round-trip latency and throughput, direct vs through the proxy.

Run: ``python benchmarks/proxy.py`` (about 13 s; ``--seconds`` changes the per-case time).
The echo server and the load generators run in their own processes; the embedded proxy runs in
this process exactly as the harness uses it. With ``TOXIPROXY_URL`` set, that server is measured
too, and a zero-copy ``os.splice`` relay is measured as the floor any user-space proxy pays.
Targets: p50 added latency <= 0.3 ms; throughput at 8 connections >= 0.7x direct.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


def main() -> int:
    """Run every case and print the table; exit 1 if a target is not met."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="duration of each measurement")
    args = ap.parse_args()
    ctx = mp.get_context("fork")
    q: mp.Queue = ctx.Queue()
    echo = ctx.Process(target=echo_server, args=(q,), daemon=True)
    echo.start()
    echo_port = q.get(timeout=5)
    relay = ctx.Process(target=splice_relay, args=(echo_port, q), daemon=True)
    relay.start()
    targets: list[tuple[str, int]] = [("direct", echo_port), ("splice-ref", q.get(timeout=5))]
    results: dict[tuple[str, int], dict[str, float]] = {}
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
            for name, port in targets:
                for conns in (1, 8):
                    results[(name, conns)] = measure(pool, port, conns, args.seconds)
    finally:
        if external is not None:
            external.delete_proxy("bench_proxy_py")
            external.close()
        embedded.stop()
        for proc in (echo, relay):
            proc.kill()
            proc.join()

    print(f"fault proxy overhead ({os.cpu_count()} cores, {MSG} B ping-pong, {BULK // 1024} KiB bulk, "
          f"{args.seconds:g} s per case)")
    print(f"{'path':<11}{'conns':>6}{'p50 ms':>9}{'p99 ms':>9}{'added p50':>11}{'MB/s':>9}"
          f"{'x direct':>10}")
    ok = True
    for name, _ in targets:
        for conns in (1, 8):
            r, d = results[(name, conns)], results[("direct", conns)]
            added = r["p50"] - d["p50"]
            ratio = r["mbps"] / d["mbps"]
            print(f"{name:<11}{conns:>6}{r['p50']:>9.3f}{r['p99']:>9.3f}{added:>+11.3f}"
                  f"{r['mbps']:>9.0f}{ratio:>9.2f}x")
    print("splice-ref = zero-copy os.splice relay in its own process: the floor for any user-space "
          "proxy on this machine (reference only, not a target)")
    for name, _ in targets[2:]:
        added = results[(name, 1)]["p50"] - results[("direct", 1)]["p50"]
        ratio = results[(name, 8)]["mbps"] / results[("direct", 8)]["mbps"]
        lat_ok, tput_ok = added <= TARGET_ADDED_P50_MS, ratio >= TARGET_THROUGHPUT_RATIO
        ok = ok and lat_ok and tput_ok
        print(f"{name}: p50 added {added:.3f} ms (target <= {TARGET_ADDED_P50_MS} ms: "
              f"{'met' if lat_ok else 'NOT met'}); throughput at 8 conns {ratio:.2f}x direct "
              f"(target >= {TARGET_THROUGHPUT_RATIO}x: {'met' if tput_ok else 'NOT met'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
