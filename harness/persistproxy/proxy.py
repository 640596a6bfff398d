"""The persistent-connection proxy's server (RULEBOOK PER-1..PER-10): a PostgreSQL wire-protocol proxy
in asyncio that keeps each client's front connection open across a switchover or failover of the
principal, re-attaching the session to the new principal and replaying its state.

:class:`PersistentProxy` owns the listeners, the drain/resume machinery and the counters; each front
connection is a :class:`~harness.persistproxy.session.Session` (startup, authentication, attaching
and re-attaching its back connection) relaying through
:class:`~harness.persistproxy.datapath.SessionDataPath`. This module is over 600 lines because the
proxy's switchover machinery (drain, hold, resume, node changes) is one state machine over all
sessions."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError
from harness.redact import protect_logger

from . import protocol as pq
from .backend import (
    Address,
    BackConn,
    BackendError,
    connect_backend,
    probe_candidates,
    send_cancel,
)
from .closing import ADMIN_SHUTDOWN, CANNOT_CONNECT_NOW, CONNECTION_FAILURE, PROTOCOL_VIOLATION, SessionClosed
from .pre_attach import WarmSet
from .scram import ScramVerifier
from .session import CLUSTER, READONLY_ENDPOINTS, Session

__all__ = ["ADMIN_SHUTDOWN", "CANNOT_CONNECT_NOW", "CLUSTER", "CONNECTION_FAILURE", "PROTOCOL_VIOLATION",
           "READONLY_ENDPOINTS", "PersistentProxy", "ProxyConfig", "Session", "SessionClosed"]

log = protect_logger(logging.getLogger(__name__))  # log lines hold no password

EventCallback = Callable[..., Any]

_MIN_MESSAGE_SIZE = 64 << 10

_SNAPSHOT_SQL = (
    "SELECT (SELECT count(*) FROM pg_catalog.pg_class "
    "WHERE relnamespace = pg_catalog.pg_my_temp_schema()), "
    "(SELECT count(*) FROM pg_catalog.pg_cursors); "
    "SELECT name, setting FROM pg_catalog.pg_settings WHERE source = 'session'"
)


@dataclass
class ProxyConfig:
    """Configuration of a :class:`PersistentProxy`.

    ``user``/``password``: credentials the proxy logs in with on the principal (back side).
    ``front_users``: name -> password accepted from front clients (default ``{user: password}``).
    ``front_auth``: ``scram`` (SCRAM-SHA-256), ``password`` (cleartext) or ``trust``.
    ``resolver``: callable (sync or async) returning the current principal ``(host, port)``; without
    it, ``candidates`` are probed with ``SELECT pg_is_in_recovery()`` (one candidate is used as is).
    ``drain_window`` (PER-4) and ``recovery_window`` (PER-3) default to 60 s.
    ``on_event``: called as ``on_event(type, **fields)`` (``History.record`` fits).
    ``database``: database of the proxy's own probe logins (sessions use their own).
    ``auto_resume``: after a drain, resume by itself once the resolver names a new principal.
    ``max_message_size``: the largest frontend message a session may announce (default 64 MiB); a
    larger one is answered with a FATAL 08P01 naming the limit and closes that session only.
    ``allowed_principals``: addresses, besides ``candidates``, that the admin ``POST /resume`` may
    name (e.g. every node of the topology), or a callable returning them, asked at every check (the
    topology's nodes as they are now: a node added later may be resumed on, a removed one no longer);
    any other address is refused with 403, and so is every one but ``candidates`` when it raises.
    ``readonly_resolver``: callable (sync or async) returning the read-only nodes now, each as
    ``(host, port)`` or ``(host, port, node)`` where ``node`` names the node for good (a name never
    given to another node): a node removed at an address is never picked again, but another node
    listed later at the same address is (PER-9); without names the address stays excluded.
    ``lazy_prepare``: after a re-attach, send each protocol-level prepared statement's Parse only
    just before the client's first message that names it (Bind, Describe; all of them before SQL
    that may name them: EXECUTE, DEALLOCATE, ``pg_prepared_statements``), instead of all of them in
    the replay (the switchover stall, docs/persistent-proxy.md: sysbench prepares ~180 statements per session). Off:
    all at once.
    ``pre_attach``: let :meth:`PersistentProxy.prepare` open the sessions' next back connections on
    the node about to be promoted while the switchover runs (one extra login per session there,
    briefly; the switchover stall, docs/persistent-proxy.md). Off: every session re-attaches after the promotion.
    ``release_after_logins``: at a resume, the held statements go on once every kept session's
    login on the new principal is done (each still waits for its own session's replay), or after
    this many seconds at most (the switchover stall: a session released while the others still log in
    runs its workload against their logins for the same cores). 0: each as soon as its own session
    is re-attached.
    """

    user: str
    password: str | None = None
    listen: Address = ("127.0.0.1", 0)
    front_users: dict[str, str] | None = None
    front_auth: str = "scram"
    resolver: Callable[[], Any] | None = None
    candidates: Sequence[Address] = ()
    drain_window: float = 60.0
    recovery_window: float = 60.0
    connect_timeout: float = 5.0
    retry_interval: float = 0.1
    on_event: EventCallback | None = None
    snapshot_at_drain: bool = True
    pre_attach: bool = True
    lazy_prepare: bool = True
    release_after_logins: float = 0.3
    database: str = "postgres"  # database used by the proxy's own probes
    auth_timeout: float = 60.0  # startup + authentication of a front client
    eager_reattach: bool = True  # unplanned failover: re-attach idle sessions at once
    auto_resume: bool = False
    max_message_size: int = pq.DEFAULT_MAX_MESSAGE_SIZE
    allowed_principals: Sequence[Address] | Callable[[], Sequence[Address]] = ()
    readonly_resolver: Callable[[], Any] | None = None  # PER-9: the read-only nodes now
    endpoints: Sequence[tuple[str, Address]] = ()  # PER-10: extra listeners (kind, address)
    removal_window: float = 60.0  # PER-9: how long a query running on a removed node may take
    # a process per core (harness.persistproxy.workers; docs/persistent-proxy.md, Worker processes):
    # this proxy is worker ``worker`` of ``workers``; ``sockets`` are listening sockets made by the
    # supervisor (listen, then one per endpoint) used instead of binding;
    # ``cancel_forward(owner, pid, secret)`` hands a CancelRequest
    # whose key another worker issued to that worker.
    worker: int = 0
    workers: int = 1
    sockets: Sequence[Any] = ()
    cancel_forward: Callable[[int, int, int], Any] | None = None

    def __post_init__(self) -> None:
        if self.front_auth not in ("scram", "password", "trust"):
            raise ConfigError(f"front_auth must be scram, password or trust, not {self.front_auth!r}")
        if self.resolver is None and not self.candidates:
            raise ConfigError("give a resolver or at least one candidate backend address")
        if (isinstance(self.max_message_size, bool) or not isinstance(self.max_message_size, int)
                or not _MIN_MESSAGE_SIZE <= self.max_message_size <= pq.MAX_MESSAGE_LEN):
            raise ConfigError(f"max_message_size must be an integer number of bytes from {_MIN_MESSAGE_SIZE} "
                              f"to {pq.MAX_MESSAGE_LEN} (1 GiB), not {self.max_message_size!r}")
        for kind, _ in self.endpoints:
            if kind not in READONLY_ENDPOINTS:
                raise ConfigError(f"endpoint kind must be one of {', '.join(READONLY_ENDPOINTS)}, not {kind!r}")
        if self.endpoints and self.readonly_resolver is None:
            raise ConfigError("read-only endpoints need a readonly_resolver (the read-only nodes' addresses)")
        if not 0 <= self.worker < self.workers:
            raise ConfigError(f"worker must be from 0 to workers - 1 ({self.workers - 1}), not {self.worker}")
        if self.sockets and len(self.sockets) != 1 + len(self.endpoints):
            raise ConfigError("sockets must hold one listening socket for listen and one per endpoint")
        if self.front_users is None:
            self.front_users = {self.user: self.password or ""}


async def _is_principal(address: Address, cfg: ProxyConfig) -> bool:
    """Whether the server at ``address`` accepts a login and is out of recovery (PER-1 resume)."""
    probe = await connect_backend(address, cfg.user, cfg.password, {"database": cfg.database}, cfg.connect_timeout)
    try:
        rows = await asyncio.wait_for(probe.simple_query("SELECT pg_catalog.pg_is_in_recovery()"),
                                      cfg.connect_timeout)
    finally:
        probe.close()
    return rows[0][0][0] == "f"


class PersistentProxy:
    """Reference implementation of PolarProxy persistent connections for PostgreSQL (PER-1..8).

    Use from asyncio: ``await proxy.start()``, ``await proxy.drain()``, ``await proxy.resume()``,
    ``proxy.status()``, ``await proxy.stop()``. See :class:`ThreadedPersistentProxy` for threads."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self._server: asyncio.AbstractServer | None = None
        self.sessions: dict[int, Session] = {}
        self._next_id = config.worker + 1  # session IDs unique across the workers of a supervisor
        self._holding = False
        self._gate: asyncio.Event | None = None
        self._drained_at: float | None = None
        self._recovery_task: asyncio.Task[None] | None = None
        self._verifiers: dict[str, ScramVerifier] = {}
        self._kept: set[int] = set()
        #: per address, the one probe loop the re-attaches that found it in recovery wait on (resume)
        self._recovery_waits: dict[Address, asyncio.Task[bool]] = {}
        self.counters: Counter[str] = Counter()
        self.closed_by_reason: Counter[str] = Counter()
        self.address: Address | None = None
        self._principal: Address | None = None
        self._lock: asyncio.Lock | None = None
        self._extra_servers: list[asyncio.AbstractServer] = []
        #: the read-only endpoints' bound addresses, ``[(kind, (host, port))]`` (PER-10)
        self.endpoint_addresses: list[tuple[str, Address]] = []
        # read-only nodes removed (PER-9): address -> the name of the node removed there (None: unknown,
        # then nothing at that address is picked again); never picked again, another node there is
        self._removed: dict[Address, str | None] = {}
        self.warm = WarmSet()  # back connections opened ahead on the node about to be promoted
        self._warm_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> Address:
        """Start listening; returns the bound ``(host, port)``."""
        self._gate = asyncio.Event()
        self._gate.set()
        self._lock = asyncio.Lock()
        socks = list(self.config.sockets)
        where: dict[str, Any] = {"sock": socks[0]} if socks else {"host": self.config.listen[0],
                                                                 "port": self.config.listen[1]}
        self._server = await asyncio.start_server(self._accept, **where, backlog=512)
        sock = self._server.sockets[0].getsockname()
        self.address = (sock[0], sock[1])
        for i, (kind, listen) in enumerate(self.config.endpoints):
            where = {"sock": socks[1 + i]} if socks else {"host": listen[0], "port": listen[1]}
            server = await asyncio.start_server(functools.partial(self._accept, endpoint=kind), **where, backlog=512)
            self._extra_servers.append(server)
            bound = server.sockets[0].getsockname()
            self.endpoint_addresses.append((kind, (bound[0], bound[1])))
        return self.address

    async def stop(self) -> None:
        """Stop listening and close every session."""
        if self._server is not None:
            self._server.close()
        for server in self._extra_servers:
            server.close()
        for s in list(self.sessions.values()):
            s._teardown()
        self.warm.discard()
        if self._recovery_task is not None:
            self._recovery_task.cancel()
        tasks = [s.task for s in self.sessions.values() if s.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      endpoint: str = CLUSTER) -> None:
        sid = self._next_id
        self._next_id += self.config.workers
        session = Session(self, sid, reader, writer, endpoint)
        self.sessions[sid] = session
        self.counters["sessions"] += 1
        await session.run()

    def _forget(self, session: Session) -> None:
        self.sessions.pop(session.id, None)
        self._kept.discard(session.id)

    # ------------------------------------------------------------------ helpers
    def _emit(self, type_: str, **fields: Any) -> None:
        cb = self.config.on_event
        if cb is None:
            return
        try:
            cb(type_, **fields)
        except Exception:  # an observer must not break the data path
            log.exception("event callback failed for %s", type_)

    def _verifier(self, user: str) -> ScramVerifier:
        users = self.config.front_users or {}
        if user not in users:  # a throw-away secret: the exchange fails like a wrong password
            return ScramVerifier(secrets.token_hex(16))
        if user not in self._verifiers:
            self._verifiers[user] = ScramVerifier(users[user])
        return self._verifiers[user]

    def _count_closed(self, session: Session, reason: str, rule: str) -> None:
        self.counters["closed"] += 1
        self.closed_by_reason[f"{rule} {reason}"] += 1
        self._kept.discard(session.id)
        self._emit("persist.closed", session=session.id, reason=reason, rule=rule)

    def _count_kept(self, session: Session) -> None:
        self.counters["kept"] += 1
        self._kept.add(session.id)
        self._emit("persist.kept", session=session.id)

    def _recovery_deadline(self, start: float | None = None) -> float:
        if start is None:
            start = self._drained_at if self._drained_at is not None else time.monotonic()
        return start + self.config.recovery_window

    async def resolve(self) -> Address:
        """The current principal: the resolver's answer, or the first candidate that is not in
        recovery (PER-1). Raises :class:`BackendError` when none is found."""
        cfg = self.config
        if cfg.resolver is not None:
            try:
                result = cfg.resolver()
                if inspect.isawaitable(result):
                    result = await result
            except BackendError:
                raise
            except Exception as exc:
                raise BackendError(f"resolver failed: {exc}") from exc
            address = (str(result[0]), int(result[1]))
        elif len(cfg.candidates) == 1:
            address = tuple(cfg.candidates[0])  # type: ignore[assignment]
        else:
            address = await probe_candidates(cfg.candidates, cfg.user, cfg.password, cfg.database,
                                             cfg.connect_timeout)
        self._principal = address
        return address

    async def resolve_for(self, session: Session) -> Address:
        """Where ``session`` goes: the principal for the cluster endpoint (PER-1), else the read-only
        node with the fewest sessions attached that has not been removed (PER-9, PER-10)."""
        if session.endpoint == CLUSTER:
            return await self.resolve()
        return await self.pick_readonly(exclude=session)

    async def _listed_readonly(self) -> list[tuple[Address, str | None]]:
        """The ``readonly_resolver``'s answer as ``[(address, node name or None)]``."""
        resolver = self.config.readonly_resolver
        if resolver is None:
            raise BackendError("no read-only nodes configured (readonly_resolver)")
        try:
            result = resolver()
            if inspect.isawaitable(result):
                result = await result
            return [((str(entry[0]), int(entry[1])), str(entry[2]) if len(entry) > 2 and entry[2] is not None
                     else None) for entry in result]
        except Exception as exc:
            raise BackendError(f"readonly_resolver failed: {exc}") from exc

    async def readonly_nodes(self) -> list[Address]:
        """The read-only nodes now (``readonly_resolver``), without the removed ones (PER-9). A node
        listed at a removed node's address under another name is a new node there: the removal
        entry goes and the new node is routed to (a node added later that got a freed address)."""
        out = []
        for address, name in await self._listed_readonly():
            if address in self._removed:
                gone = self._removed[address]
                if gone is None or name is None or name == gone:
                    continue
                del self._removed[address]
                self._emit("persist.readmitted", address=f"{address[0]}:{address[1]}", node=name, removed=gone)
            out.append(address)
        return out

    async def pick_readonly(self, exclude: Session | None = None) -> Address:
        """The least-loaded read-only node (sessions attached to it), not removed (PER-9/PER-10)."""
        nodes = await self.readonly_nodes()
        if not nodes:
            raise BackendError("no read-only node left to route to", CONNECTION_FAILURE)
        load = Counter(s.back.address for s in self.sessions.values()
                       if s is not exclude and s.back is not None and not s.closed)
        return min(nodes, key=lambda a: (load[a], nodes.index(a)))

    async def remove_node(self, address: Address, window: float | None = None,
                          node: str | None = None) -> dict[str, Any]:
        """Remove a read-only node (PER-9, PER-10): it is picked for nothing from now on; every session
        attached to it is handled as soon as it is idle (a running query gets up to ``window``,
        default ``removal_window`` = 60 s): through a ``custom-active`` (or cluster) endpoint it is
        moved to another node with its state replayed (kept), through ``custom-connection`` it is
        disconnected (57P01). A session still busy at the end of the window is closed (PER-9).
        ``node`` names the node removed (default: the name the ``readonly_resolver`` lists at
        ``address``): another node listed there later is routed to again."""
        address = (str(address[0]), int(address[1]))
        window = self.config.removal_window if window is None else float(window)
        self._removed[address] = node  # routed away at once (PER-9), named below when the caller did not
        if node is None and self.config.readonly_resolver is not None:
            with contextlib.suppress(BackendError):
                node = next((name for a, name in await self._listed_readonly() if a == address), None)
            self._removed[address] = node
        t0 = time.monotonic()
        self._emit("persist.remove_start", address=f"{address[0]}:{address[1]}", node=node, window=window)
        waiting = [s for s in self.sessions.values()
                   if s.ready and not s.closed and s.back is not None and s.back.address == address]
        moved: list[int] = []
        closed: list[dict[str, Any]] = []
        while waiting:
            still = []
            for s in waiting:
                if s.closed or s.back is None or s.back.address != address:
                    continue
                assert s.state is not None
                if not s.state.is_idle() and time.monotonic() - t0 < window:
                    still.append(s)
                    continue
                if not s.state.is_idle():
                    reason, rule = "query still running on a removed read-only node", "PER-9"
                elif s.endpoint == "custom-connection":
                    reason, rule = "its read-only node was removed (connection-based endpoint)", "PER-10"
                else:
                    s.detach_back()
                    s.reattach_task = asyncio.create_task(s._reattach_now())
                    moved.append(s.id)
                    self._emit("persist.moved", session=s.id, endpoint=s.endpoint)
                    continue
                await s.fail(ADMIN_SHUTDOWN, f"persistent connection closed: {reason} ({rule})", rule=rule,
                             reason=reason)
                closed.append({"session": s.id, "reason": reason, "rule": rule})
            waiting = still
            if waiting:
                await asyncio.sleep(0.005)
        seconds = time.monotonic() - t0
        self._emit("persist.remove_end", address=f"{address[0]}:{address[1]}", moved=len(moved),
                   closed=len(closed), seconds=seconds)
        return {"moved": moved, "closed": closed, "seconds": seconds}

    def allowed_principals(self) -> list[Address]:
        """The addresses an admin ``POST /resume`` may name: the configured ``candidates`` and
        ``allowed_principals`` - asked now when it is a callable (the topology's nodes as they are:
        one added later is allowed), only the candidates when that fails (no password in any output: the proxy logs
        in there with its real credentials, so the list never widens beyond the nodes)."""
        extra: Any = self.config.allowed_principals
        if callable(extra):
            try:
                extra = list(extra())
            except Exception as exc:  # fail closed: an unreadable topology allows no node of it
                log.warning("allowed_principals failed, allowing the candidates only: %s", exc)
                extra = []
        out: list[Address] = []
        for host, port in [*self.config.candidates, *extra]:
            if (str(host), int(port)) not in out:
                out.append((str(host), int(port)))
        return out

    def allows_principal(self, address: Address) -> bool:
        """Whether ``address`` is one of :meth:`allowed_principals` (host compared case-insensitively)."""
        host, port = str(address[0]).lower(), int(address[1])
        return any(h.lower() == host and p == port for h, p in self.allowed_principals())

    async def _wait_gate(self, session: Session) -> None:
        assert self._gate is not None
        if not self._holding:
            return
        session.held = True
        try:
            await self._gate.wait()
        finally:
            session.held = False
        if session.closed:
            raise SessionClosed()

    def new_cancel_key(self) -> tuple[int, int]:
        """The BackendKeyData ``(pid, secret)`` handed to a new session: random, with
        ``pid % workers == worker`` so that any worker can route a CancelRequest to its owner."""
        n = self.config.workers
        return secrets.randbelow((1 << 31) // n) * n + self.config.worker, secrets.randbits(31)

    async def _cancel(self, pid: int, secret: int) -> None:
        cfg = self.config
        if cfg.workers > 1 and pid % cfg.workers != cfg.worker and cfg.cancel_forward is not None:
            result = cfg.cancel_forward(pid % cfg.workers, pid, secret)  # another worker's session
            if inspect.isawaitable(result):
                await result
            return
        for s in list(self.sessions.values()):
            if s.key == (pid, secret) and s.back is not None:
                self.counters["cancels"] += 1
                await send_cancel(s.back.address, s.back.pid, s.back.secret)
                return

    # ------------------------------------------------------------------ switchover API
    async def drain(self, timeout: float | None = None) -> dict[str, Any]:
        """Start a planned switchover (PER-4): hold new statements of idle sessions, wait up to
        ``timeout`` (default ``drain_window``, 60 s) for every session to become idle, then drop
        the back connections of the sessions that can be kept (PER-1) and close the others with
        their reason: temporary tables (PER-5), partial result (PER-6), open transaction (PER-7),
        cursor or COPY (PER-8), request still running (PER-4). Returns the kept and closed lists."""
        assert self._gate is not None and self._lock is not None
        window = self.config.drain_window if timeout is None else float(timeout)
        async with self._lock:
            if self._holding:  # already drained, waiting for resume: nothing more to do
                return {"kept": sorted(self._kept), "closed": [], "seconds": 0.0, "already_draining": True}
            t0 = time.monotonic()
            self._holding = True
            self._gate.clear()
            if self._recovery_task is not None:
                self._recovery_task.cancel()
            self.counters["drains"] += 1
            if self._warm_timer is not None:
                self._warm_timer.cancel()
            self._emit("persist.drain_start", sessions=len(self.sessions), window=window)
            deadline = t0 + window
            # a session that is idle stays idle while the gate holds its next statement: its snapshot
            # is taken at once, beside the wait for the busy ones (not all of them after it)
            snapshots: dict[int, asyncio.Task[tuple[str, str] | None]] = {}
            while True:
                busy = False
                for s in list(self.sessions.values()):
                    if not s.ready or s.closed or s.back is None or s.state is None:
                        continue
                    if not s.state.is_idle():
                        busy = True
                    elif (self.config.snapshot_at_drain and s.id not in snapshots
                          and s.state.blocker() is None):
                        s.detached = True
                        snapshots[s.id] = asyncio.ensure_future(self._snapshot(s))
                if not busy or time.monotonic() >= deadline:
                    break
                await asyncio.sleep(0.002)
            idle_at = time.monotonic()
            kept: list[int] = []
            closed: list[dict[str, Any]] = []
            candidates = [s for s in list(self.sessions.values())
                          if s.ready and not s.closed and s.state is not None]
            blockers = [s.state.blocker() for s in candidates]  # type: ignore[union-attr]
            for s in candidates:
                s.detached = True
            found = dict(zip(snapshots, await asyncio.gather(*snapshots.values()), strict=True))
            for i, s in enumerate(candidates):
                if blockers[i] is None and s.id in found:
                    blockers[i] = found[s.id]
            for s, blocker in zip(candidates, blockers, strict=True):
                if s.closed:
                    continue
                if blocker is not None:
                    reason, rule = blocker
                    await s.fail(ADMIN_SHUTDOWN,
                                 f"persistent connection not kept across switchover: {reason} ({rule})",
                                 rule=rule, reason=reason)
                    closed.append({"session": s.id, "reason": reason, "rule": rule})
                    continue
                if s.back is not None:
                    s.back.close()
                    s.back = None
                if s.back_task is not None:
                    s.back_task.cancel()
                kept.append(s.id)
                self._count_kept(s)
            self._warm_replay(kept)
            self._drained_at = time.monotonic()
            seconds = self._drained_at - t0
            self._emit("persist.drain_end", kept=len(kept), closed=len(closed), seconds=seconds,
                       idle_seconds=idle_at - t0)
            self._recovery_task = asyncio.create_task(self._recovery_timer())
            return {"kept": kept, "closed": closed, "seconds": seconds}

    async def _snapshot(self, s: Session) -> tuple[str, str] | None:
        """Ask the old principal what the tracker may have missed: temporary objects (PER-5),
        open cursors (PER-8) and settings changed outside SET (kept for replay, PER-2)."""
        back, state = s.back, s.state
        if back is not None:  # stop relaying: the proxy reads this connection itself now
            s._stop_back_relay(back)
        if back is None or state is None or s.closed:  # the client left meanwhile
            return None
        try:
            results = await asyncio.wait_for(back.simple_query(_SNAPSHOT_SQL, state.codec),
                                             self.config.connect_timeout)
        except (TimeoutError, BackendError, OSError):
            return None  # old principal already gone: rely on the tracked state
        counts = results[0][0]
        if int(counts[0] or 0) > 0:
            return "session holds temporary tables", "PER-5"
        if int(counts[1] or 0) > 0:
            return "session has an open cursor", "PER-8"
        tracked = state.committed.gucs
        state.snapshot_gucs = {
            name: value or "" for name, value in results[1]
            if name is not None and name.lower() not in tracked
            and name.lower() not in ("role", "session_authorization", "client_encoding")
            and not name.startswith("transaction_")
        }
        return None

    async def _recovery_timer(self) -> None:
        """PER-3 timer; with ``auto_resume`` it also resumes as soon as the resolver names a
        principal other than the one drained from and that principal accepts a login."""
        cfg = self.config
        deadline = self._recovery_deadline()
        old = self._principal
        try:
            while time.monotonic() < deadline:
                await asyncio.sleep(min(cfg.retry_interval, max(0.0, deadline - time.monotonic())))
                if not cfg.auto_resume or not self._holding:
                    continue
                try:
                    current = await self.resolve()
                except BackendError:
                    continue
                if current != old:
                    await self.resume()
                    return
        except asyncio.CancelledError:
            return
        if self._holding:
            await self._give_up("no principal within the recovery window")

    async def _give_up(self, why: str) -> list[dict[str, Any]]:
        """No principal within the recovery window (PER-3): close every kept session; returns them
        as :meth:`resume` lists its closed sessions."""
        closed = []
        for sid in list(self._kept):
            s = self.sessions.get(sid)
            if s is not None and s.back is None and not s.closed:
                await s.fail(CONNECTION_FAILURE,
                             "persistent connection closed: no principal accepted the session within the "
                             f"recovery window of {self.config.recovery_window:g} s (PER-3)",
                             rule="PER-3", reason=why)
                closed.append({"session": sid, "reason": "no principal within the recovery window", "rule": "PER-3"})
        self._holding = False
        self._drained_at = None
        self.warm.discard()
        assert self._gate is not None
        self._gate.set()
        return closed

    async def principal_at_login(self, back: BackConn, address: Address, deadline: float) -> bool:
        """Whether the server ``back`` just logged in to is out of recovery (PER-1 resume without a
        probe login, the switchover stall): its ``in_hot_standby`` report (PostgreSQL 14 and later), else
        one query on ``back``. A server still in recovery is then waited for by one shared probe
        loop per address (not by every session's logins) until it is promoted or ``deadline``; False
        tells the caller to log in again."""
        reported = back.params.get("in_hot_standby")
        if reported is None:
            rows = await asyncio.wait_for(back.simple_query("SELECT pg_catalog.pg_is_in_recovery()"),
                                          self.config.connect_timeout)
            reported = "on" if rows[0][0][0] == "t" else "off"
        if reported == "off":
            return True
        await self.wait_principal(address, deadline)
        return False

    async def wait_principal(self, address: Address, deadline: float) -> None:
        """Wait until ``address`` is out of recovery or ``deadline`` passes, on the one probe loop
        of this resume for that address (started here if there is none)."""
        wait = self._recovery_waits.get(address)
        if wait is None or (wait.done() and not wait.cancelled() and not wait.result()):
            wait = self._recovery_waits[address] = asyncio.ensure_future(self._until_principal(address, deadline))
        await asyncio.shield(wait)

    async def _until_principal(self, address: Address, deadline: float) -> bool:
        """Probe ``address`` every ``retry_interval`` until it is out of recovery (True) or
        ``deadline`` passes (False)."""
        cfg = self.config
        while True:
            with contextlib.suppress(BackendError, OSError, TimeoutError):
                if await _is_principal(address, cfg):
                    return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(cfg.retry_interval)

    async def resume(self, address: Address | None = None) -> dict[str, Any]:
        """End a switchover: find the new principal (``address``, else the resolver/probe, retried
        until the recovery window ends, PER-3), re-attach every kept session and replay its state
        (PER-1, PER-2), then release the held statements. Sessions that cannot be re-attached are
        closed with the reason; if no principal answers in time every kept session is closed
        (PER-3)."""
        assert self._gate is not None and self._lock is not None
        async with self._lock:
            if not self._holding:
                return {"resumed": 0, "closed": [], "principal": None}
            t0 = time.monotonic()
            if self._recovery_task is not None and self._recovery_task is not asyncio.current_task():
                self._recovery_task.cancel()
            deadline = self._recovery_deadline()
            principal: Address | None = None
            last: Exception | None = None
            cfg = self.config
            at_login = False  # each re-attach's own login shows the principal: no probe login first
            while principal is None:
                try:
                    target = address or await self.resolve()
                    writable = await self.warm.is_principal(target)  # no login when pre-attached
                    if writable is None and address is not None:
                        principal, at_login = target, True
                        break
                    if writable is None:
                        writable = await _is_principal(target, cfg)
                    if not writable:
                        raise BackendError(f"{target[0]}:{target[1]} is still in recovery (not a principal)")
                    principal = target
                except (BackendError, OSError, TimeoutError) as exc:
                    last = exc
                    if time.monotonic() >= deadline:
                        break
                    await asyncio.sleep(cfg.retry_interval)
            if principal is None:
                closed = await self._give_up(f"no principal within the recovery window: {last}")
                return {"resumed": 0, "closed": closed, "principal": None, "error": str(last)}
            found_at = time.monotonic()
            kept = [self.sessions[sid] for sid in list(self._kept) if sid in self.sessions]
            logging_in = len(kept)
            logins_done = asyncio.Event()

            def logged_in() -> None:
                nonlocal logging_in
                logging_in -= 1
                if logging_in <= 0:
                    logins_done.set()

            if not kept:
                logins_done.set()
            attaching = asyncio.gather(*(s.reattach(deadline, principal, check=at_login, on_login=logged_in)
                                         if s.endpoint == CLUSTER else s.reattach(deadline, on_login=logged_in)
                                         for s in kept),
                                       return_exceptions=True)
            # release the held statements once every login is done (bounded): each still waits for
            # its own session's replay (it takes the session's back_lock first), not for every
            # session's; released earlier, sessions run their workload against the others' logins
            # for the same cores (PER-1 stall: the last re-attach took up to 0.56 s so, 0.14 s not)
            if cfg.release_after_logins > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(logins_done.wait(), cfg.release_after_logins)
            released_at = time.monotonic()
            self._holding = False
            self._gate.set()
            results = await attaching
            closed = []
            for s, res in zip(kept, results, strict=True):
                if isinstance(res, BaseException):
                    if res.__class__ is BackendError and getattr(res, "code", "") == "REPLAY":
                        reason, rule = "state replay failed", "PER-2"
                    else:
                        reason, rule = "no principal within the recovery window", "PER-3"
                    await s.fail(CONNECTION_FAILURE,
                                 f"persistent connection not kept across switchover: {reason} ({rule})",
                                 rule=rule, reason=reason, detail=str(res))
                    closed.append({"session": s.id, "reason": reason, "rule": rule})
            self._kept.clear()
            self._drained_at = None
            for wait in self._recovery_waits.values():  # nobody waits on them any more
                wait.cancel()
            self._recovery_waits.clear()
            warm = self.warm.summary()
            self.warm.discard()
            self._emit("persist.resume_end", principal=f"{principal[0]}:{principal[1]}",
                       resumed=len(kept) - len(closed), closed=len(closed), seconds=time.monotonic() - t0,
                       found_seconds=found_at - t0, released_seconds=released_at - t0)
            return {"resumed": len(kept) - len(closed), "closed": closed,
                    "principal": f"{principal[0]}:{principal[1]}", **warm}

    async def prepare(self, address: Address) -> dict[str, Any]:
        """Pre-attach for a planned switchover to ``address`` - the hot standby about to be promoted
        (the switchover stall, :mod:`.pre_attach`): log in there once per session now, in the background (the
        clients still run), and replay each kept session's state there (PER-2) as soon as the drain
        has fixed it, so that :meth:`resume` on that address only swaps the connections in. Called
        before :meth:`drain` (or after it: then the replays start at once). Sessions of read-only
        endpoints and sessions that LISTEN (refused during recovery) are left to the usual
        re-attach, and so is every session whose pre-attach fails. Connections not taken are closed
        at the resume, the give-up (PER-3), the proxy's stop, or when no drain follows within the
        drain window plus 30 s. Returns at once: ``{"warming": n, "address": "host:port"}``."""
        assert self._lock is not None
        target = (str(address[0]), int(address[1]))
        where = f"{target[0]}:{target[1]}"
        if not self.config.pre_attach:
            return {"warming": 0, "address": where, "reason": "pre-attach is off"}
        async with self._lock:
            cfg = self.config
            openers = {}
            for s in list(self.sessions.values()):
                if (s.ready and not s.closed and s.state is not None and s.endpoint == CLUSTER
                        and not s.state.committed.listens and (not self._holding or s.id in self._kept)):
                    openers[s.id] = functools.partial(connect_backend, target, cfg.user, cfg.password,
                                                      s.state.startup, cfg.connect_timeout)
            self.warm.start(target, openers, functools.partial(
                connect_backend, target, cfg.user, cfg.password, {"database": cfg.database}, cfg.connect_timeout))
            if self._warm_timer is not None:
                self._warm_timer.cancel()
            if self._holding:
                self._warm_replay(self._kept)
            else:
                self._warm_timer = asyncio.get_running_loop().call_later(
                    cfg.drain_window + 30.0, lambda: None if self._holding else self.warm.discard())
            self._emit("persist.prepare", address=where, sessions=len(openers))
            return {"warming": len(openers), "address": where}

    def _warm_replay(self, kept: Any) -> None:
        if self.warm.target is not None:
            self.warm.replay({sid: self.sessions[sid]._replay for sid in kept if sid in self.sessions})

    async def switchover(self, action: Callable[[], Any], timeout: float | None = None) -> dict[str, Any]:
        """``drain()``, run ``action`` (the topology's switchover; sync callables run in a thread),
        then ``resume()`` (PER-1, PER-4)."""
        drained = await self.drain(timeout)
        result = action()
        if inspect.isawaitable(result):
            await result
        resumed = await self.resume()
        return {"drain": drained, "resume": resumed}

    def status(self) -> dict[str, Any]:
        """Sessions with their state sizes and flags, and counters (kept, closed by reason,
        reconnects, replays) - the admin ``status`` (PER-1..8 evidence)."""
        sessions = []
        for s in self.sessions.values():
            entry: dict[str, Any] = {
                "session": s.id, "client": s.client, "user": s.user, "database": s.database,
                "ready": s.ready, "held": s.held, "kept": s.id in self._kept,
                "back": f"{s.back.address[0]}:{s.back.address[1]}" if s.back else None,
            }
            if s.state is not None:
                entry.update(s.state.summary())
            sessions.append(entry)
        return {
            "listen": f"{self.address[0]}:{self.address[1]}" if self.address else None,
            "principal": f"{self._principal[0]}:{self._principal[1]}" if self._principal else None,
            "draining": self._holding,
            "sessions": sessions,
            "counters": {
                "sessions_opened": self.counters["sessions"],
                "kept": self.counters["kept"],
                "closed": self.counters["closed"],
                "closed_by_reason": dict(self.closed_by_reason),
                "reconnects": self.counters["reconnects"],
                "replays": self.counters["replays"],
                "pre_attached": self.counters["pre_attached"],
                "lazy_prepares": self.counters["lazy_prepares"],
                "drains": self.counters["drains"],
                "back_lost": self.counters["back_lost"],
                "cancels": self.counters["cancels"],
            },
            "drain_window": self.config.drain_window,
            "recovery_window": self.config.recovery_window,
        }
