"""A process per core (docs/persistent-proxy.md, Worker processes): a supervisor running N :class:`PersistentProxy`
worker processes on the same listen address (PER-1..PER-10 hold in each worker for the sessions it serves).

* Listening: the supervisor creates the listening sockets (``listen`` and one per PER-10 endpoint)
  before it forks the workers; with ``listen_mode="reuseport"`` (default) each worker gets its own
  ``SO_REUSEPORT`` socket on the same port (the kernel spreads connections by a hash of the client
  address), with ``"shared"`` every worker accepts from the same socket (whoever wakes first; under
  load one worker may take nearly all: benchmarks/persistent_workers.py).
* CancelRequest: worker ``i`` of ``n`` hands out BackendKeyData pids with ``pid % n == i``
  (:meth:`PersistentProxy.new_cancel_key`); a worker receiving a cancel for another worker's key sends
  it on to that worker's private loopback cancel port (a listener that accepts CancelRequest only).
* Admin: every worker serves the usual admin API on a private loopback port with an internal token;
  :class:`SupervisorAdmin` serves the same API (paths, token, JSON shapes) and fans each request out
  to every worker in parallel, combining the answers (counters summed, lists joined, sessions tagged
  with their ``worker``).
* Life: a worker that dies is reported and the supervisor stops the others and exits non-zero (its
  sessions are gone: restarting it would hide that); SIGINT/SIGTERM of the supervisor stop every
  worker; a worker dies with its supervisor (``PR_SET_PDEATHSIG`` and a pipe it watches), so a
  SIGKILLed supervisor leaves no worker behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from harness.errors import ConfigError, ProxyWorkerError

from . import protocol as pq
from .admin import AdminServer, _error, _guard, is_loopback, new_token
from .backend import Address, send_cancel
from .loop import new_loop
from .proxy import PersistentProxy, ProxyConfig

log = logging.getLogger(__name__)

LISTEN_MODES = ("reuseport", "shared")
_PR_SET_PDEATHSIG = 1
_START_TIMEOUT = 30.0


def worker_count(text: str | int) -> int:
    """``auto`` (= ``os.cpu_count()``) or a whole number from 1 to 64 (the ``--workers`` value)."""
    if isinstance(text, str) and text.strip().lower() == "auto":
        return max(1, os.cpu_count() or 1)
    try:
        n = int(text)
    except (TypeError, ValueError):
        raise ConfigError(f"--workers must be a number from 1 to 64 or 'auto' (one per core), not {text!r}") from None
    if not 1 <= n <= 64:
        raise ConfigError(f"--workers must be from 1 to 64 or 'auto' (one per core), not {n}")
    return n


def _listener(address: Address, reuseport: bool, port: int | None = None) -> socket.socket:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((address[0], address[1] if port is None else port))
        sock.listen(512)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _die_with_parent(parent: int) -> None:
    """PR_SET_PDEATHSIG: SIGTERM this process when the supervisor dies (Linux); then check that it
    is not dead already (the race between fork and prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


@dataclass
class WorkerInfo:
    """One worker process as the supervisor knows it."""

    index: int
    pid: int
    admin: Address | None = None
    cancel: Address | None = None
    exit: str | None = None  # how it ended (None while it runs)


class Supervisor:
    """``Supervisor(config, 2).start()`` forks 2 workers, each a full :class:`PersistentProxy` of
    ``config`` on the same address (PER-1 throughput). Call :meth:`start` before any event loop runs in this
    process (it forks), then :meth:`stop`; :meth:`wait_death` reports a worker that died."""

    def __init__(self, config: ProxyConfig, workers: int, *, listen_mode: str = "reuseport") -> None:
        if listen_mode not in LISTEN_MODES:
            raise ConfigError(f"listen mode must be one of {', '.join(LISTEN_MODES)}, not {listen_mode!r}")
        if workers < 1:
            raise ConfigError(f"workers must be >= 1, not {workers}")
        self.config = config
        self.n = workers
        self.listen_mode = listen_mode
        self.token = new_token()  # the workers' internal admin token (never printed)
        self.workers: list[WorkerInfo] = []
        self.address: Address | None = None
        self.endpoint_addresses: list[tuple[str, Address]] = []
        self.stopping = False

    # ------------------------------------------------------------------ sockets
    def _bind(self) -> list[list[socket.socket]]:
        """The listening sockets per worker: [listen, endpoint...] (shared: the same objects)."""
        wanted = [self.config.listen, *(a for _, a in self.config.endpoints)]
        reuse = self.listen_mode == "reuseport"
        per_worker: list[list[socket.socket]] = [[] for _ in range(self.n)]
        made: list[socket.socket] = []
        try:
            for address in wanted:
                first = _listener(address, reuse)
                made.append(first)
                port = first.getsockname()[1]
                per_worker[0].append(first)
                for i in range(1, self.n):
                    if reuse:
                        other = _listener(address, True, port)
                        made.append(other)
                    else:
                        other = first
                    per_worker[i].append(other)
        except OSError:
            for s in made:
                s.close()
            raise
        bound = [s.getsockname() for s in per_worker[0]]
        self.address = (bound[0][0], bound[0][1])
        self.endpoint_addresses = [(kind, (b[0], b[1])) for (kind, _), b in
                                   zip(self.config.endpoints, bound[1:], strict=True)]
        return per_worker

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Address:
        """Bind, fork the workers, wait until each one serves (or raise ProxyWorkerError); returns the
        listen address. Raises OSError when an address cannot be bound."""
        per_worker = self._bind()
        cancels = [_listener(("127.0.0.1", 0), False) for _ in range(self.n)]
        cancel_addrs = [(s.getsockname()[0], s.getsockname()[1]) for s in cancels]
        life_r, life_w = os.pipe()  # EOF in the workers when the supervisor is gone
        parent = os.getpid()
        ready: list[int] = []
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            for i in range(self.n):
                ready_r, ready_w = os.pipe()
                pid = os.fork()
                if pid == 0:  # the worker: never returns
                    code = 1
                    try:
                        os.close(life_w)
                        os.close(ready_r)
                        for fd in ready:
                            os.close(fd)
                        mine = {id(s) for s in per_worker[i]}
                        for j, s in enumerate(cancels):
                            if j != i:
                                s.close()
                        for s in {id(s): s for g in per_worker for s in g if id(s) not in mine}.values():
                            s.close()  # reuseport: the other workers' sockets
                        _die_with_parent(parent)
                        code = _worker_main(i, self, per_worker[i], cancels[i], cancel_addrs, life_r, ready_w)
                    except BaseException:  # noqa: BLE001 - reported, then the worker exits
                        log.exception("persistent-proxy worker %d failed", i)
                    finally:
                        os._exit(code)
                os.close(ready_w)
                ready.append(ready_r)
                self.workers.append(WorkerInfo(i, pid, cancel=cancel_addrs[i]))
        finally:
            os.close(life_r)
            for s in {id(s): s for group in per_worker for s in group}.values():
                s.close()  # the workers hold them now
            for s in cancels:
                s.close()
        self._life = life_w
        try:
            self._await_ready(ready)
        except BaseException:
            self.stop_sync()
            raise
        finally:
            for fd in ready:
                os.close(fd)
        assert self.address is not None
        return self.address

    def _await_ready(self, fds: list[int]) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        buffers = {fd: b"" for fd in fds}
        pending = set(fds)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProxyWorkerError(f"persistent-proxy workers not ready within {_START_TIMEOUT:g} s")
            readable, _, _ = select.select(list(pending), [], [], left)
            for fd in readable:
                chunk = os.read(fd, 4096)
                i = fds.index(fd)
                if not chunk:
                    raise ProxyWorkerError(f"persistent-proxy worker {i} (pid {self.workers[i].pid}) exited while "
                                      "starting (its error is above)")
                buffers[fd] += chunk
                if b"\n" in buffers[fd]:
                    info = json.loads(buffers[fd].split(b"\n", 1)[0])
                    self.workers[i].admin = ("127.0.0.1", int(info["admin"]))
                    pending.discard(fd)

    def poll(self) -> WorkerInfo | None:
        """Reap exited workers; returns the first one that ended (with its ``exit``), if any."""
        dead = None
        for w in self.workers:
            if w.exit is not None:
                continue
            try:
                pid, status = os.waitpid(w.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = w.pid, 0
            if pid == 0:
                continue
            if os.WIFSIGNALED(status):
                w.exit = f"killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
            else:
                w.exit = f"exited with code {os.waitstatus_to_exitcode(status)}"
            dead = dead or w
        return dead

    async def wait_death(self) -> WorkerInfo:
        """Return when a worker ends while the supervisor is not stopping (reported, never silent)."""
        while True:
            dead = self.poll()
            if dead is not None and not self.stopping:
                return dead
            await asyncio.sleep(0.2)

    def stop_sync(self, timeout: float = 10.0) -> None:
        """SIGTERM every worker (each closes its sessions), SIGKILL those still there after
        ``timeout``, reap them all."""
        self.stopping = True
        for w in self.workers:
            if w.exit is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(w.exit is None for w in self.workers) and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.05)
        for w in self.workers:
            if w.exit is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(w.pid, 0)
                w.exit = "killed by signal SIGKILL (did not stop in time)"
        with contextlib.suppress(OSError, AttributeError):
            os.close(self._life)

    async def stop(self, timeout: float = 10.0) -> None:
        """:meth:`stop_sync` without blocking the loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.stop_sync, timeout)


# ---------------------------------------------------------------------- the worker process
class WorkerProxy(PersistentProxy):
    """A worker's proxy: its status also names the worker and counts the CancelRequests it
    received for another worker's session and sent on (``counters.cancels_forwarded``)."""

    def status(self) -> dict[str, Any]:
        """:meth:`PersistentProxy.status` with ``worker`` and ``counters.cancels_forwarded``."""
        out = super().status()
        out["worker"] = self.config.worker
        out["counters"]["cancels_forwarded"] = self.counters["cancels_forwarded"]
        return out


def _worker_main(index: int, sup: Supervisor, socks: list[socket.socket], cancel_sock: socket.socket,
                 cancel_addrs: list[Address], life_fd: int, ready_fd: int) -> int:
    """Serve one worker until SIGTERM/SIGINT or the supervisor's death; 0 on a clean stop."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    loop = new_loop()
    asyncio.set_event_loop(loop)

    async def forward(owner: int, pid: int, secret: int) -> None:
        proxy.counters["cancels_forwarded"] += 1
        await send_cancel(cancel_addrs[owner], pid, secret)

    config = replace(sup.config, worker=index, workers=sup.n, sockets=tuple(socks), cancel_forward=forward)
    proxy = WorkerProxy(config)

    async def main() -> None:
        await proxy.start()

        async def on_cancel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                data = await asyncio.wait_for(reader.readexactly(16), 5.0)
                length, code, pid, secret = struct.unpack("!iiii", data)
                if length == 16 and code == pq.CANCEL_REQUEST and pid % sup.n == index:
                    await proxy._cancel(pid, secret)
            writer.close()

        cancel_server = await asyncio.start_server(on_cancel, sock=cancel_sock)
        admin = AdminServer(proxy, "127.0.0.1", 0, token=sup.token)
        address = await admin.start()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_reader(life_fd, stop.set)  # EOF: the supervisor is gone
        os.write(ready_fd, (json.dumps({"admin": address[1], "pid": os.getpid()}) + "\n").encode())
        os.close(ready_fd)
        try:
            await stop.wait()
        finally:
            loop.remove_reader(life_fd)
            cancel_server.close()
            await admin.stop()
            await proxy.stop()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return 0


# ---------------------------------------------------------------------- the supervisor's admin API
def combine(replies: list[Any]) -> Any:
    """Combine the workers' JSON answers into one of the same shape: numbers summed (floats: the
    largest, e.g. seconds of a drain run in parallel), booleans or-ed, lists joined, objects
    combined key by key, anything else the first non-null value."""
    values = [r for r in replies if r is not None]
    if not values:
        return None
    if all(isinstance(v, bool) for v in values):
        return any(values)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return sum(values)
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return max(values)
    if all(isinstance(v, list) for v in values):
        return [x for v in values for x in v]
    if all(isinstance(v, dict) for v in values):
        keys: list[str] = []
        for v in values:
            keys += [k for k in v if k not in keys]
        return {k: combine([v.get(k) for v in values]) for k in keys}
    return values[0]


def combine_status(sup: Supervisor, replies: list[dict[str, Any]]) -> dict[str, Any]:
    """The supervisor's ``GET /status``: the workers' statuses combined (:func:`combine`), each
    session with its ``worker``, the supervisor's listen address, and ``workers`` / ``worker_processes``."""
    for w, reply in zip(sup.workers, replies, strict=True):
        for s in reply.get("sessions", []):
            s["worker"] = w.index
    out = combine(replies)
    assert sup.address is not None
    out["listen"] = f"{sup.address[0]}:{sup.address[1]}"
    out["workers"] = sup.n
    out["listen_mode"] = sup.listen_mode
    out.pop("worker", None)
    out["worker_processes"] = [{"worker": w.index, "pid": w.pid, "sessions": len(r.get("sessions", [])),
                                "cancels": r.get("counters", {}).get("cancels", 0),
                                "cancels_forwarded": r.get("counters", {}).get("cancels_forwarded", 0)}
                               for w, r in zip(sup.workers, replies, strict=True)]
    return out


def build_supervisor_app(sup: Supervisor, token: str) -> web.Application:
    """The admin API of a supervisor: the same paths, token and JSON shapes as :func:`build_app`,
    every request sent to every worker in parallel and the answers combined; the first answer that
    is not 200 (e.g. 400, 403) is passed on as it is."""

    async def fan_out(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"X-Failover-Harness-Token": sup.token}
        if request.content_type:
            headers["Content-Type"] = request.content_type
        gone = [w for w in sup.workers if w.exit is not None or w.admin is None]
        if gone:
            return _error(503, f"persistent-proxy worker {gone[0].index} {gone[0].exit or 'is not ready'}")

        async def one(session: ClientSession, w: WorkerInfo) -> tuple[int, str, str]:
            assert w.admin is not None
            url = f"http://{w.admin[0]}:{w.admin[1]}{request.path_qs}"
            async with session.request(request.method, url, data=body or None, headers=headers) as reply:
                return reply.status, reply.content_type, await reply.text()

        async with ClientSession(timeout=ClientTimeout(total=None, sock_connect=5)) as session:
            try:
                answers = await asyncio.gather(*(one(session, w) for w in sup.workers))
            except (OSError, TimeoutError) as exc:
                return _error(502, f"a persistent-proxy worker did not answer: {type(exc).__name__}: {exc}")
        for code, kind, text in answers:
            if code != 200:  # e.g. 400, 403, 404: every worker answers alike
                return web.Response(status=code, text=text, content_type=kind or "text/plain")
        try:
            replies = [json.loads(text) for _, _, text in answers]
        except ValueError as exc:
            return _error(502, f"a persistent-proxy worker answered no JSON: {exc}")
        if request.method == "GET" and request.path == "/status":
            return web.json_response(combine_status(sup, replies))
        return web.json_response(combine(replies))

    app = web.Application(middlewares=[_guard(token)], client_max_size=64 << 10)
    app.router.add_route("*", "/{tail:.*}", fan_out)
    return app


class SupervisorAdmin(AdminServer):
    """:class:`AdminServer` for a :class:`Supervisor` (same binding rules and token)."""

    def __init__(self, sup: Supervisor, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None,
                 allow_remote: bool = False) -> None:
        if not is_loopback(host) and not allow_remote:
            raise ConfigError(f"the admin API binds to the loopback (127.0.0.1) unless explicitly allowed, "
                              f"not {host!r}: pass allow_remote=True (CLI: --admin-allow-remote) to expose it")
        super().__init__(None, host, port, token=token, allow_remote=allow_remote)  # type: ignore[arg-type]
        self.supervisor = sup

    def app(self) -> web.Application:
        """The fan-out application."""
        return build_supervisor_app(self.supervisor, self.token)
