"""Timing precision of the refused-connect capture (``conn.refused``, harness.capture; OBS-1).

Run as root: ``python benchmarks/capture.py`` (about 10 s; ``--opens`` changes the count).
Two measurements, each on the history's clock (time.monotonic):

1. plain sockets to a closed loopback port: the capture's SYN time minus the caller's timestamp
   just before ``connect()``, and the caller's timestamp just after ECONNREFUSED minus the RST time;
2. the reference mirroring client on a real pair whose first partner's proxy refuses
   (``partition how=refuse``): ``conn.refused.t`` minus the client's ``attempt.start.t``, and the
   client's ``attempt.end.t`` minus the RST time (``conn.refused.t + seconds``).

Prints min / median / p95 / max in microseconds. The checkers' timing tolerance is ±20 ms.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.capture import CaptureTarget, RefusedConnectCapture  # noqa: E402


def _summary(name: str, values: list[float]) -> str:
    us = sorted(v * 1e6 for v in values)
    p95 = us[min(len(us) - 1, int(0.95 * len(us)))]
    return (f"{name:58} n={len(us):4}  min {us[0]:8.1f}  median {statistics.median(us):8.1f}  "
            f"p95 {p95:8.1f}  max {us[-1]:8.1f} µs")


def plain_sockets(n: int) -> list[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    seen = []
    tries = []
    with RefusedConnectCapture([CaptureTarget(f"127.0.0.1:{port}", "bench")], seen.append) as cap:
        for _ in range(n):
            with socket.socket() as c:
                before = time.monotonic()
                try:
                    c.connect(("127.0.0.1", port))
                except ConnectionRefusedError:
                    tries.append((before, time.monotonic()))
            time.sleep(0.002)
        if cap.settle() is not None:
            raise SystemExit("capture incomplete")
    syn = [o.t - b for o, (b, _) in zip(seen, tries, strict=True)]
    rst = [a - (o.t + o.fields["seconds"]) for o, (_, a) in zip(seen, tries, strict=True)]
    return [_summary("plain connect(): SYN − timestamp before connect()", syn),
            _summary("plain connect(): timestamp after ECONNREFUSED − RST", rst)]


def reference_client(n: int) -> list[str]:
    from harness.clients.mirroring import ReferenceMirroringClient
    from harness.faults import Faults
    from harness.history import History
    from harness.topology import Pair
    from harness.workload.mirroring import connstring

    history = History()
    with Pair(mode="async", mirror_readable=False, history=history) as pair:
        text = connstring(pair, "n2", "n1", login_timeout=2.0)
        with Faults(pair, history).partition("n2", how="refuse"):
            for k in range(n):
                ReferenceMirroringClient(history=history, process=f"c{k}").open(text).close()
        refused = history.events("conn.refused")
        starts = {(e.get("process"), e.get("attempt")): e for e in history.events("attempt.start")}
        syn, rst = [], []
        for end in history.events("attempt.end"):
            start = starts[(end.get("process"), end.get("attempt"))]
            inside = [e for e in refused if start.t - 0.01 <= e.t <= end.t + 0.01]
            if end.get("outcome") != "refused" or len(inside) != 1:
                continue  # (the client records no socket address for a connect refused at once)
            syn.append(inside[0].t - start.t)
            rst.append(end.t - (inside[0].t + inside[0].get("seconds")))
    return [_summary("reference client: conn.refused.t − attempt.start.t", syn),
            _summary("reference client: attempt.end.t − RST", rst)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opens", type=int, default=200)
    args = parser.parse_args()
    for line in plain_sockets(args.opens) + reference_client(args.opens):
        print(line)


if __name__ == "__main__":
    main()
