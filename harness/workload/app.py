"""The app profile's workload (APP rules, DUR-1): N worker threads drive short transactions - writes
of ever-increasing keys and reads - through the application pool under test, each recorded as an
operation with the connection the pool handed out; and the harness's own writable probe, which marks
when the principal accepts writes again after a fault (``app.writable``, APP-1's reference).

The pool is any object with ``settings`` (a dataclass: pool, max_size, overflow, validates,
recovery_s), ``request(f, key, process) -> conn address`` raising an exception carrying ``conn`` and
``outcome`` (``fail``/``info``), and ``close()`` - the protocol of :mod:`harness.clients.app`."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from typing import Any

import psycopg

_op_ids = itertools.count(1)
KEYS_PER_WORKER = 10_000_000


class AppWorkload:
    """Workers writing and reading through ``pool``; ``write_every``: every n-th request is a read."""

    def __init__(self, pool: Any, history: Any, *, workers: int = 4, pause: float = 0.02,
                 client_proxies: list[str] | None = None, read_every: int = 3) -> None:
        self.pool, self.history, self.workers = pool, history, workers
        self.pause, self.read_every = pause, read_every
        self.client_proxies = list(client_proxies or [])
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i + 1,), name=f"app-{i + 1}", daemon=True)
                         for i in range(workers)]
        self.counts = {"ok": 0, "fail": 0, "info": 0}
        self._lock = threading.Lock()
        self._go = threading.Event()
        self._go.set()
        self._idle = threading.Semaphore(0)

    def hold(self, timeout: float = 30) -> None:
        """Let every worker finish its request and wait (the application goes idle: its pool keeps
        its connections, as an application's does between bursts); recorded as ``app.hold``."""
        self._go.clear()
        for _ in self._threads:
            self._idle.acquire(timeout=timeout)
        self.history.record("app.hold")

    def resume(self) -> None:
        """Let the workers run again (``app.resume``)."""
        self.history.record("app.resume")
        self._go.set()

    def start(self) -> AppWorkload:
        """Record the pool's settings (``app.pool``) and start the workers."""
        settings = dataclasses.asdict(self.pool.settings)
        self.history.record("app.pool", **settings, workers=self.workers, client_proxies=self.client_proxies)
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float = 30) -> None:
        """Stop the workers (each finishes its request) and wait for them."""
        self._stop.set()
        self._go.set()
        for t in self._threads:
            t.join(timeout)

    def __enter__(self) -> AppWorkload:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, worker: int) -> None:
        process = f"app-{worker}"
        keys = itertools.count(worker * KEYS_PER_WORKER)
        for n in itertools.count(1):
            if not self._go.is_set():
                self._idle.release()
                while not self._go.wait(0.05):
                    if self._stop.is_set():
                        return
            if self._stop.is_set():
                return
            f = "read" if n % self.read_every == 0 else "write"
            key = next(keys) if f == "write" else worker * KEYS_PER_WORKER
            op_id = next(_op_ids)
            self.history.record("op.invoke", process=process, op_id=op_id, f=f, value=key)
            try:
                conn = self.pool.request(f, key, process)
            except Exception as exc:  # noqa: BLE001 - the adapter's RequestFailed, or anything it let through
                outcome = getattr(exc, "outcome", "info" if f == "write" else "fail")
                self.history.record(f"op.{outcome}", process=process, op_id=op_id, f=f, value=key,
                                    conn=getattr(exc, "conn", None), error=str(exc)[:300])
                with self._lock:
                    self.counts[outcome] += 1
                self._stop.wait(self.pause)
                continue
            self.history.record("op.ok", process=process, op_id=op_id, f=f, value=key, conn=conn)
            with self._lock:
                self.counts["ok"] += 1
            self._stop.wait(self.pause)


def probe_writable(dsn: str, history: Any, timeout: float = 30, interval: float = 0.05) -> float | None:
    """Write through ``dsn`` (the pool's own addresses) on a fresh connection until it succeeds and
    record ``app.writable`` at that moment (the reference of APP-1), with ``app.probe`` naming the
    local address used so APP-5 leaves the probe's connection out. Returns the time, None on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                history.record("app.probe", conn=_local(conn))
                conn.execute("CREATE TEMP TABLE IF NOT EXISTS fh_probe (x int); INSERT INTO fh_probe VALUES (1)")
                return history.record("app.writable", by="probe").t
        except psycopg.Error:
            time.sleep(interval)
    history.record("app.writable_timeout", seconds=timeout)
    return None


def _local(conn: psycopg.Connection) -> str | None:
    import os
    import socket

    try:
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            host, port = sock.getsockname()[:2]
            return f"{host}:{port}"
    except (OSError, ValueError):
        return None
