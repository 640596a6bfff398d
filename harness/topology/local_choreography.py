"""The role choreography of a local topology (docs/topology.md): switchover, failover, rejoin and the
node operations (stop, start, kill, pause, resume) as sequences of server primitives - which node is
promoted, who follows or is rewound, when the roles are published and which events are recorded
(``switchover.writable``, the durability exposure windows of DUR-1). :class:`LocalChoreography` is a
base class of :class:`harness.topology.local.LocalTopology`, which holds the run, its lock and state
and the server primitives these steps call."""


import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import InvalidOperation, TopologyError
from harness.topology.process import signal_group, signal_pid
from harness.topology.run import (
    save_state,
)
from harness.topology.state import (
    KILLED,
    MIRROR,
    PAUSED,
    PRINCIPAL,
    RUNNING,
    STANDBY,
    STOPPED,
)


class LocalChoreography:
    """The role operations of :class:`~harness.topology.local.LocalTopology` (its attributes and
    server primitives come from that class)."""

    def _promote(self, name: str, conn: Any = None) -> None:
        s = self._node_state(name)
        self.engine.promote(Path(s.datadir), s.pid, self.run_as)
        extra: dict[str, Any] = {"conn": conn} if conn is not None else {}
        if getattr(self.engine, "reuses_admin_connections", False):  # PostgreSQL: its status file is
            extra["hot_standby"] = self.mirror_readable                 # enough unless it is a hot standby
        self.engine.wait_writable(self.socket_dir(name), s.port, s.pid, self.path / name / "postgres.log", 60,
                                  datadir=Path(s.datadir), **extra)

    def _pick_target(self, target: str | None, op: str) -> str:
        principal = self._principal_name()
        if target is None:
            candidates = [n for n in self._state.nodes if n.role != PRINCIPAL and n.state == RUNNING
                          and not n.needs_rewind]
            if not candidates:
                states = ", ".join(f"{n.name} {n.state}" for n in self._state.nodes if n.role != PRINCIPAL)
                raise InvalidOperation(f"{op} needs a running mirror, but the mirror is not running ({states}); "
                                       f"start() or rejoin() it first")
            return candidates[0].name
        if target == principal:
            raise InvalidOperation(f"{op} target {target} is already the principal")
        s = self._require(target, RUNNING)
        if s.needs_rewind:
            raise InvalidOperation(f"{op} target {target} has diverged and must rejoin() first")
        return target

    def _switchover(self, target: str | None, on_writable: Callable[[], None] | None = None) -> str:
        try:
            return self._switchover_roles(target, on_writable)
        finally:
            self._held.close_all()

    def _switchover_roles(self, target: str | None, on_writable: Callable[[], None] | None) -> str:
        old = self._principal_name()
        self._require(old, RUNNING)
        new = self._pick_target(target, "switchover")
        self._wait_streaming(new, old, timeout=10, conn=self._held.peek(old, self._node_state(old).pid))
        self._held.drop(old)  # before its server stops
        self._stop_server(old, "fast")
        self._set_role(old, MIRROR if self.n_nodes == 2 else STANDBY)
        self._set_role(new, PRINCIPAL)
        self._write_conf(new)
        new_conn = self._held.peek(new, self._node_state(new).pid)
        self._promote(new, conn=new_conn)
        self._apply_conf(new)  # partner; synchronous since its start as a standby (synchronous_on_promotion)
        self.links.roles_changed(self._state)
        hook_error = self._writable(new, old, on_writable)
        newp = self._node_state(new)
        extra = {"conn": new_conn} if new_conn is not None and not new_conn.closed else {}
        self.engine.checkpoint(self.socket_dir(new), newp.port, **extra)  # pg_rewind reads the control file
        self._held.drop(new)
        self._rewind(old, new)
        self._make_standby(old)
        self._start_locked(old, wait=False)
        for other in self._state.nodes:
            if other.name not in (old, new) and other.state == RUNNING:
                self._reload(other.name)
        self._wait_started(old)
        self._wait_streaming(old, new)
        self._emit("switchover.rejoined", node=old, principal=new)
        for other in self._state.nodes:  # done only when every standby follows the new principal
            if other.name not in (old, new) and other.state == RUNNING:
                self._follow_or_rewind(other.name, new)
        self._reload(new)  # the partner is now known to be live
        self._wait_partner_published(new)
        if hook_error is not None:
            raise hook_error
        return old

    def _writable(self, new: str, old: str, on_writable: Callable[[], None] | None) -> BaseException | None:
        """The new principal accepts writes: publish the roles (the run state, for other processes'
        resolvers), record ``switchover.writable`` and call ``on_writable`` (the switchover stall).
        Returns what it raised, for :meth:`_switchover` to raise once the old principal has rejoined."""
        save_state(self.path, self._state)
        self._emit("switchover.writable", node=new, old_principal=old)
        if on_writable is None:
            return None
        try:
            on_writable()
        except Exception as exc:  # noqa: BLE001 - the choreography must finish first (old principal down)
            return exc
        return None

    def _failover(self, target: str | None) -> str:
        old = self._principal_name()
        new = self._pick_target(target, "failover")
        if self._node_state(old).state in (RUNNING, PAUSED):
            self._kill_server(old)
        olds = self._node_state(old)
        olds.needs_rewind = True
        self._set_role(old, MIRROR if self.n_nodes == 2 else STANDBY)
        self._set_role(new, PRINCIPAL)
        newp = self._node_state(new)
        live_standbys = [n for n in self._state.nodes if n.role != PRINCIPAL and n.state == RUNNING]
        newp.exposed = not live_standbys  # sync pair without a mirror runs exposed (commits go on)
        self._write_conf(new)
        self._apply_conf(new)
        self._promote(new)
        if newp.exposed and self.mode == "sync":
            self._exposure_started(new, old)
        self._emit("mirroring.partner", node=new, partner=self._partner_of_principal())
        self.links.roles_changed(self._state)
        for other in live_standbys:
            self._reload(other.name)
        for other in live_standbys:
            self._follow_or_rewind(other.name, new)
        return old

    def _follow_or_rewind(self, standby: str, principal: str) -> None:
        """Make a surviving standby follow a new principal; if it cannot (an asynchronous standby
        that had received more WAL than the promoted one), rewind it and start it again."""
        try:
            self._wait_streaming(standby, principal, timeout=5)
        except TopologyError:
            self._stop_server(standby, "fast")
            self._rewind_and_start(standby, principal)

    def _rejoin(self, name: str | None) -> str:
        principal = self._principal_name()
        self._require(principal, RUNNING)
        if name is None:
            down = [n for n in self._state.nodes if n.role != PRINCIPAL and n.state in (STOPPED, KILLED)]
            if not down:
                raise InvalidOperation("rejoin() needs a stopped or killed former principal or standby; "
                                       "every node is running")
            name = down[0].name
        s = self._node_state(name)
        if s.role == PRINCIPAL:
            raise InvalidOperation(f"node {name} is the principal; rejoin() is for a node that lost that role")
        self._require(name, STOPPED, KILLED)
        self._rewind_and_start(name, principal)
        return name

    def _rewind_and_start(self, name: str, principal: str) -> None:
        s, p = self._node_state(name), self._node_state(principal)
        self.engine.checkpoint(self.socket_dir(principal), p.port)
        self._rewind(name, principal)
        self._make_standby(name)
        s.needs_rewind = False
        self._start_locked(name, wait=True)
        p.exposed = False
        self._reload(principal)
        self._wait_partner_published(principal)  # the reload has been applied: commits wait for the mirror
        if p.exposed_since is not None:  # a sync principal's exposed window (exposure.start) ends here
            self._exposure_ended(principal, name)

    def _exposure_started(self, principal: str, lost: str) -> None:
        """A sync principal promoted with no live mirror acknowledges commits with no second copy
        until a mirror rejoins (DUR-1; docs/topology.md, "The exposed window"): record
        ``exposure.start`` and when it began (in the run state, so a ``rejoin`` by another process
        can close it)."""
        s = self._node_state(principal)
        s.exposed_since = time.monotonic()
        self._emit("exposure.start", t=s.exposed_since, node=principal, lost=lost, mode=self.mode)

    def _exposure_ended(self, principal: str, mirror: str) -> None:
        """The principal waits for ``mirror`` again (reloaded with it as synchronous standby): record
        ``exposure.end`` with the window's length."""
        s = self._node_state(principal)
        since, s.exposed_since = s.exposed_since or 0.0, None
        now = time.monotonic()
        self._emit("exposure.end", t=now, node=principal, mirror=mirror, seconds=round(now - since, 6))

    def _rewind(self, name: str, principal: str) -> None:
        """Make a stopped former principal/standby a copy of ``principal``'s timeline: pg_rewind, or a
        fresh pg_basebackup when pg_rewind cannot (e.g. the WAL it needs is gone)."""
        s, p = self._node_state(name), self._node_state(principal)
        try:
            self.engine.rewind(Path(s.datadir), self.socket_dir(principal), p.port, self.run_as)
        except TopologyError as exc:
            reason = str(exc).strip().splitlines()[-1][:300]
            self._emit("node.reclone", node=name, source=principal, reason=reason)
            self.engine.reclone(Path(s.datadir), self.socket_dir(principal), p.port, self.run_as)

    def _stop(self, name: str, mode: str) -> str:
        self._require(name, RUNNING, PAUSED)
        self._stop_server(name, mode)
        return name

    def _start_op(self, name: str) -> str:
        s = self._require(name, STOPPED, KILLED)
        if s.role != PRINCIPAL and s.needs_rewind:
            self._rewind_and_start(name, self._principal_name())
        else:
            if s.role != PRINCIPAL:
                self._make_standby(name)
            self._start_locked(name, wait=True)
        return name

    def _kill(self, name: str) -> str:
        self._require(name, RUNNING, PAUSED)
        self._kill_server(name)
        return name

    def _pause(self, name: str, scope: str) -> str:
        s = self._require(name, RUNNING)
        if scope == "all":
            signal_group(s.pid, signal.SIGSTOP)
        else:
            signal_pid(s.pid, signal.SIGSTOP)
        s.state, s.paused_scope = PAUSED, scope
        self._emit("node.pause", node=name, scope=scope)
        return name

    def _resume(self, name: str) -> str:
        s = self._node_state(name)
        if s.state != PAUSED:
            raise InvalidOperation(f"resume({name}): node {name} is {s.state}, not paused")
        signal_group(s.pid, signal.SIGCONT)
        s.state = RUNNING
        self._emit("node.resume", node=name, scope=s.paused_scope or "postmaster")
        return name

    def _wait_partner_published(self, principal: str, timeout: float = 5) -> None:
        """Wait until ``SHOW mirroring.partner`` on the principal answers its current mirror (MIR-9)."""
        s = self._node_state(principal)
        wanted = self._partner_of_principal()
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            seen = self.engine.published_partner(self.socket_dir(principal), s.port)
            if seen is None:  # the engine publishes no partner
                return
            if seen == wanted:
                self._emit("mirroring.partner", node=principal, partner=seen)
                return
            time.sleep(0.005)
        raise TopologyError(f"principal {principal} still publishes mirroring.partner={seen!r}, not {wanted!r}")
