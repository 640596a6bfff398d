"""Resident memory of the reference persistent proxy while clients send very large messages
(bounded memory): the proxy runs in a process of its own (``--serve``), three raw clients log in through it
to a throw-away PostgreSQL 15 (``tests/support/pgserver.py``) and at the same time each

* ``announce``: announces a 1 GiB Query and streams ``--mib`` MiB of it (the proxy should refuse the
  announcement at once), then
* ``copy``: sends one CopyData message of ``--mib`` MiB inside ``COPY ... FROM STDIN`` (the proxy
  should relay it as a stream; ``--max-message-size`` is raised above the message for this).

Printed per scenario: the proxy's resident set before, its peak (VmHWM) after, and the seconds.

Then memory per session, the reference proxy against PgBouncer (``--sessions``, default 40: PgBouncer's
pool size here, so session pooling serves every one), each in processes of its own in front of one
pair (``harness.topology.Pair``, async, no fault proxy): the resident set of the proxy's processes
(the reference as the CLI runs it, ``persistent-proxy --workers 1``: supervisor and worker) with no
session, with the sessions idle (logged in, ``SET application_name``, one query done), *kept* (the
reference drained - every session held with its state, no back connection - and PgBouncer paused),
and *active* (every session running queries of 20 x 8 kB rows at once for ``--active-seconds``; the
peak of samples every 20 ms). Per session = (that figure - the one with no session) / sessions. The
server's backends are not counted: one per session for the reference and for session pooling, as
many as run at once for transaction pooling.
Run: ``python benchmarks/persistent_memory.py`` (≈10-20 s, then ≈1 min for the
second part). It uses whatever ``harness`` is on the
path, so the same script measures an older checkout too (``PYTHONPATH=OLD python ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.persistproxy import PersistentProxy, ProxyConfig  # noqa: E402
from harness.persistproxy import protocol as pq  # noqa: E402

CHUNK = b"a" * (1 << 20)


def serve(spec: str) -> None:
    """Child mode: run the proxy with ``spec`` (JSON ProxyConfig fields), print its port, serve."""
    fields = json.loads(spec)
    fields["candidates"] = [tuple(c) for c in fields["candidates"]]
    if "max_message_size" not in inspect.signature(ProxyConfig).parameters:
        fields.pop("max_message_size", None)  # an older proxy without the limit

    async def main() -> None:
        proxy = PersistentProxy(ProxyConfig(**fields))
        host, port = await proxy.start()
        print(port, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _login(port: int) -> socket.socket:
    from tests.support.rawpg import login

    return login(("127.0.0.1", port), "apptrust", timeout=60)


def _drain_replies(s: socket.socket, until: bytes, count: int = 1) -> bytes:
    buf = b""
    while buf.count(until) < count:
        try:
            got = s.recv(65536)
        except (ConnectionError, TimeoutError):
            break
        if not got:
            break
        buf += got
    return buf


def _announce(port: int, mib: int, out: list[str]) -> None:
    s = _login(port)
    try:
        s.sendall(b"Q" + struct.pack("!i", 1 << 30))
        for _ in range(mib):
            s.sendall(CHUNK)
        out.append("sent")
    except (BrokenPipeError, ConnectionResetError):
        out.append("refused")
    finally:
        s.settimeout(2)  # a proxy that buffers waits for the rest of the 1 GiB: do not wait with it
        reply = _drain_replies(s, b"\0\0", 1)
        out.append("08P01" if b"08P01" in reply else "no error")
        s.close()


def _copy(port: int, mib: int, out: list[str]) -> None:
    s = _login(port)
    try:
        s.sendall(pq.query("CREATE TEMP TABLE big (v text); COPY big FROM STDIN"))
        _drain_replies(s, b"G\0\0\0")
        size = mib << 20
        s.sendall(b"d" + struct.pack("!i", size + 4))
        for _ in range(mib - 1):
            s.sendall(CHUNK)
        s.sendall(CHUNK[:-1] + b"\n" + pq.msg(b"c"))
        reply = _drain_replies(s, pq.ready_for_query(b"I"))
        out.append("COPY 1" if b"COPY 1" in reply else f"failed: {reply[-200:]!r}")
    finally:
        s.close()


def _scenario(name: str, target: object, port: int, pid: int, mib: int, clients: int) -> None:
    before = _kib(pid, "VmRSS")
    results: list[str] = []
    t0 = time.monotonic()
    threads = [threading.Thread(target=target, args=(port, mib, results)) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - t0
    print(f"{name:9} {clients} x {mib} MiB: proxy RSS before {before / 1024:6.0f} MiB, peak "
          f"{_kib(pid, 'VmHWM') / 1024:6.0f} MiB, {seconds:5.1f} s, clients: {sorted(set(results))}", flush=True)


def _tree_rss_kib(root: int) -> int:
    """VmRSS of ``root`` and every descendant process, in KiB."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            total += _kib(pid, "VmRSS")
        except OSError:
            continue
        todo.extend(children.get(pid, []))
    return total


def _per_session(sessions: int, active_seconds: float) -> None:
    """Bytes per idle, kept and active session: the reference proxy (CLI, one worker) against
    PgBouncer in both pooling modes, in front of one pair (PER-1 context: what keeping a session costs)."""
    import psycopg

    from harness.clients import persistent as adapters
    from harness.clients.persistent.reference_process import reference_workers
    from harness.topology import Pair

    rows = []
    with Pair(mode="async", links="direct") as pair:
        principal = pair.principal.client_address
        for name, factory in [("reference-1w", functools.partial(reference_workers, workers=1)),
                              ("pgbouncer-transaction", adapters.pgbouncer_transaction),
                              ("pgbouncer-session", adapters.pgbouncer_session)]:
            client = adapters.open_client(factory, pair=pair, drain_window=1.0, recovery_window=10.0)
            try:
                root = client._proc.pid if name.startswith("reference") else client.pid
                time.sleep(0.3)
                base = _tree_rss_kib(root)
                conns = [psycopg.connect(client.dsn(), autocommit=True, prepare_threshold=None)
                         for _ in range(sessions)]
                for i, conn in enumerate(conns):
                    conn.execute(f"SET application_name = 'mem-{i}'")
                    conn.execute("SELECT 1")
                time.sleep(0.3)
                idle = _tree_rss_kib(root)
                client.before_switchover()
                kept = _tree_rss_kib(root)
                client.after_switchover(principal)
                peak = [idle]
                stop = threading.Event()

                def work(conn: Any, stop: threading.Event = stop) -> None:
                    while not stop.is_set():
                        conn.execute("SELECT repeat('x', 8192) FROM generate_series(1, 20)").fetchall()

                threads = [threading.Thread(target=work, args=(c,)) for c in conns]
                for t in threads:
                    t.start()
                end = time.monotonic() + active_seconds
                while time.monotonic() < end:
                    peak.append(_tree_rss_kib(root))
                    time.sleep(0.02)
                stop.set()
                for t in threads:
                    t.join()
                for conn in conns:
                    conn.close()
                rows.append((name, base, idle, kept, max(peak)))
            finally:
                client.stop()
    print(f"\nmemory per session, {sessions} sessions (KiB of the proxy's processes; per session in bytes; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    print(f"{'client':<24}{'none KiB':>10}{'idle B/s':>11}{'kept B/s':>11}{'active B/s':>12}")
    for name, base, idle, kept, active in rows:
        def per(kib: int, base: int = base) -> str:
            return f"{(kib - base) * 1024 / sessions:,.0f}"
        print(f"{name:<24}{base:>10,}{per(idle):>11}{per(kept):>11}{per(active):>12}")
    print("kept = the reference drained (held, no back connection), PgBouncer paused (PAUSE; session pooling "
          "never completes it with clients connected); active = the peak while every session runs queries")


def main() -> None:
    """Start a server and the proxy, run both scenarios, print the numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--mib", type=int, default=200, help="MiB each client sends (default 200)")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=40, help="sessions of the per-session part (default 40)")
    parser.add_argument("--active-seconds", type=float, default=3.0, help="length of the active phase (default 3)")
    parser.add_argument("--only-per-session", action="store_true", help="skip the large-message scenarios")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.only_per_session:
        _per_session(args.sessions, args.active_seconds)
        return
    from tests.support.pgserver import LocalServer

    server = LocalServer("mem").start()
    try:
        for name, target, limit in [("announce", _announce, 64 << 20), ("copy", _copy, (args.mib + 1) << 20)]:
            spec = {"user": "apptrust", "front_auth": "trust", "front_users": {"apptrust": ""},
                    "candidates": [list(server.server_address)], "max_message_size": limit}
            child = subprocess.Popen([sys.executable, __file__, "--serve", json.dumps(spec)], stdout=subprocess.PIPE,
                                     text=True)
            try:
                assert child.stdout is not None
                port = int(child.stdout.readline())
                _scenario(name, target, port, child.pid, args.mib, args.clients)
            finally:
                child.kill()
                child.wait()
    finally:
        server.stop(remove=True)
    _per_session(args.sessions, args.active_seconds)


if __name__ == "__main__":
    main()
