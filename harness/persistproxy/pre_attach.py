"""Pre-attach during a planned switchover (the switchover stall, docs/persistent-proxy.md; RULEBOOK PER-1, PER-2).

Between the drain and the resume the old principal is stopped and the chosen standby promoted. When
that standby is a hot standby (it accepts read-only logins), each kept session's next back
connection can be opened there *before* the promotion: a PostgreSQL session opened during recovery
stays open across ``pg_promote`` and its transactions are read-write from then on. Two steps:

1. the logins, as soon as the coordinator names the node (``prepare_switchover``, before the
   drain: the clients still run, and the server's SCRAM work is off the stall);
2. the replay of each kept session's state (settings, prepared statements; PER-2), as soon as the
   drain has fixed it - it runs while the old principal stops.

The resume then only swaps the ready connections in, so a client's stall is the drain plus the role
swap, not plus a login and a replay per session. A warm connection is only a head start, never
trusted blindly:

* it is used only when the resume names the address it was opened to, and only after a login-free
  check on a warm probe connection (``pg_is_in_recovery()`` is false there) - else it is closed and
  the session re-attaches the usual way (a cold re-attach);
* a session whose replay cannot run on a standby (``LISTEN``; a serializable default, which a hot
  standby refuses), or whose connection failed or received anything unasked meanwhile, re-attaches
  cold; so does every session when the node accepts no logins (``hot_standby=off``);
* every connection not taken is closed at the resume, the give-up (PER-3), the proxy's stop, or
  when no drain follows the logins in time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .backend import Address, BackConn, BackendError
from .relay import is_quiet

Opener = Callable[[], Awaitable[BackConn]]
Replayer = Callable[[BackConn], Awaitable[None]]


def _alive(back: BackConn) -> bool:
    return not back.buf and is_quiet(back.reader, back.writer)


def _close_result(task: asyncio.Future[BackConn | None]) -> None:
    if task.done() and not task.cancelled() and task.exception() is None:
        back = task.result()
        if back is not None:
            back.close()


async def _quietly(open_: Opener) -> BackConn | None:
    try:
        return await open_()
    except (BackendError, OSError, TimeoutError):
        return None


async def _after_probe(probe: asyncio.Future[BackConn | None], open_: Opener) -> BackConn | None:
    """``open_()`` once the probe login has succeeded; None at once when it failed (a standby with
    ``hot_standby=off`` refuses every login: one attempt, not one per session)."""
    if await asyncio.shield(probe) is None:
        return None
    return await _quietly(open_)


async def _then_replay(login: asyncio.Task[BackConn | None], replay: Replayer) -> BackConn | None:
    """The logged-in connection of ``login`` with ``replay`` run on it; None when either failed."""
    try:
        back = await login
    except asyncio.CancelledError:
        login.add_done_callback(_close_result)
        raise
    if back is None:
        return None
    try:
        await replay(back)
    except BaseException as exc:
        back.close()
        if isinstance(exc, BackendError | OSError | TimeoutError):
            return None
        raise
    return back


class WarmSet:
    """The back connections opened ahead on the node about to be promoted, one per session, plus
    one probe connection that answers whether that node is the principal yet. Two steps: the logins
    (:meth:`start`, while the clients still run) and the replay of each kept session's state
    (:meth:`replay`, once the drain has fixed it)."""

    def __init__(self) -> None:
        self.target: Address | None = None
        self._tasks: dict[int, asyncio.Task[BackConn | None]] = {}
        self._probe: asyncio.Task[BackConn | None] | None = None
        self.replaying = False
        self.used = 0
        self.failed = 0

    def start(self, target: Address, openers: dict[int, Opener], probe: Opener) -> None:
        """Log in (in the background) once per session id in ``openers`` and once for the probe, all
        at ``target``; connections of an earlier :meth:`start` are closed first."""
        self.discard()
        self.target = target
        self.used = self.failed = 0
        self._probe = asyncio.ensure_future(_quietly(probe))
        for sid, open_ in openers.items():  # each after the probe: a node that refuses it is not tried again
            self._tasks[sid] = asyncio.ensure_future(_after_probe(self._probe, open_))

    def replay(self, replayers: dict[int, Replayer]) -> None:
        """Replay each session's state on its warm connection once it is logged in; the
        connections of sessions not in ``replayers`` (closed by the drain, gone) are closed."""
        self.replaying = True
        for sid in list(self._tasks):
            login = self._tasks.pop(sid)
            if sid in replayers:
                self._tasks[sid] = asyncio.ensure_future(_then_replay(login, replayers[sid]))
            else:
                _drop(login)

    async def is_principal(self, address: Address) -> bool | None:
        """Whether ``address`` (the warm target) is out of recovery, asked on the warm probe
        connection: True / False, or None when there is no usable probe for that address (the
        caller then logs in to ask, as without a warm set)."""
        if self.target != address or self._probe is None:
            return None
        probe = await self._probe
        if probe is None or not _alive(probe):
            return None
        try:
            rows = await asyncio.wait_for(probe.simple_query("SELECT pg_catalog.pg_is_in_recovery()"), 5)
        except (BackendError, OSError, TimeoutError):
            return None
        return rows[0][0][0] == "f"

    async def take(self, sid: int, address: Address) -> BackConn | None:
        """The ready connection of session ``sid`` when it was opened to ``address``, its state
        replayed, and it is still usable (waiting for it if it is not ready yet); None otherwise
        (re-attach cold)."""
        task = self._tasks.pop(sid, None)
        if task is None:
            return None
        if self.target != address or not self.replaying:
            _drop(task)
            return None
        back = await task
        if back is None or not _alive(back):
            if back is not None:
                back.close()
            self.failed += 1
            return None
        self.used += 1
        return back

    def discard(self) -> None:
        """Close every connection not taken (and stop the ones still being opened)."""
        tasks = [*self._tasks.values(), *([self._probe] if self._probe is not None else [])]
        self._tasks.clear()
        self._probe = None
        self.target = None
        self.replaying = False
        for task in tasks:
            _drop(task)

    def summary(self) -> dict[str, Any]:
        """What this switchover's pre-attach did (for the resume's answer); the counts start again."""
        out = {"warm_used": self.used, "warm_failed": self.failed}
        self.used = self.failed = 0
        return out


def _drop(task: asyncio.Task[BackConn | None]) -> None:
    if task.done():
        _close_result(task)
    else:
        task.cancel()
        task.add_done_callback(_close_result)
