"""A long-lived helper process speaking JSON lines (docs/clients.md, "The JSON-lines helper
protocol"): the harness side. One helper per client; start-up is paid once (``started_in``).

Requests ``{"id", "op", ...}`` go to the helper's stdin, one per line; replies ``{"id", "ok", ...}``
come back on stdout, possibly out of order (the helper runs requests concurrently), and are matched
by ``id``. ``call(op, timeout=None, **fields)`` blocks until the reply (a pending open may block as
long as the driver does); a helper that died or answered garbage is a :class:`HelperError`, a
harness error - never the driver's verdict. The process is registered for cleanup (killed at
``close()``, and at interpreter exit)."""

from __future__ import annotations

import atexit
import itertools
import json
import subprocess
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from harness.errors import HarnessError


class HelperError(HarnessError):
    """A JSON-lines helper process failed (died, did not start, answered garbage)."""


class JsonLinesHelper:
    """One helper process: ``argv`` is started at once; ``hello`` is its first request."""

    def __init__(self, argv: Sequence[str], *, name: str, env: dict[str, str] | None = None,
                 cwd: str | None = None, start_timeout: float = 60.0) -> None:
        self.name = name
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, bufsize=1)
        except OSError as exc:
            raise HelperError(f"{name}: cannot start {argv[0]} ({exc})") from None
        atexit.register(self.close)
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._reader.start()
        self.hello = self.call("hello", timeout=start_timeout)
        self.started_in = time.monotonic() - t0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:
                continue  # a driver printing to stdout: not a reply
            with self._lock:
                fut = self._pending.pop(reply.get("id"), None)
            if fut is not None:
                fut.set_result(reply)
        err = self.proc.stderr.read()[-500:] if self.proc.stderr else ""
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        for fut in pending:
            fut.set_exception(HelperError(f"{self.name} exited ({self.proc.poll()}): {err.strip()}"))

    def call(self, op: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send one request and wait for its reply (``ok`` true or false: the caller decides)."""
        rid = next(self._ids)
        fut: Future[dict[str, Any]] = Future()
        with self._lock:
            if self.proc.poll() is not None:
                raise HelperError(f"{self.name} is not running (exit {self.proc.poll()})")
            self._pending[rid] = fut
        try:
            with self._write_lock:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"id": rid, "op": op, **fields}) + "\n")
                self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise HelperError(f"{self.name}: cannot write to the helper ({exc})") from None
        try:
            return fut.result(timeout)
        except TimeoutError:
            raise HelperError(f"{self.name}: no reply to {op} within {timeout} s") from None

    def close(self) -> None:
        """Stop the helper (quit, then kill)."""
        if self.proc.poll() is None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.close()
                self.proc.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)
