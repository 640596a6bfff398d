"""Coordinated switchover (RULEBOOK PER-1, PER-4): a small hook protocol through which the harness's
``switchover`` fault tells a client that coordinates - a persistent-connection proxy, a pooler - that
a planned role swap is about to happen (drain) and that it is over (resume at the new principal).

Any adapter can take part by implementing :class:`SwitchoverCoordinator`::

    class MyPooler:
        def before_switchover(self) -> dict | None: ...      # drain: hold new work, wait for idle
        def after_switchover(self, new_principal_address) -> dict | None: ...   # re-point, resume
        # optional: told first, before any drain, which node is about to be promoted (warm up there)
        def prepare_switchover(self, next_principal_address) -> dict | None: ...

and being registered on the fault vocabulary with ``faults.coordinate(client)``. Without a
registered coordinator the switchover behaves exactly as before. Every step is recorded in the
history:

| type | fields |
|---|---|
| ``coord.before`` / ``coord.after`` | ``client`` (its name), ``fault_id`` (of the switchover) - the hook starts |
| ``coord.before_done`` / ``coord.after_done`` | ``client``, ``fault_id``, ``seconds``, ``result`` (hook's return) |
| (``coord.after*`` only) | ``stage``: ``writable`` (new principal writable, old one still rejoining) or ``done`` |
| ``coord.prepare`` / ``coord.prepare_done`` | ``client``, ``fault_id``, ``address``; done: ``seconds``, ``result`` |
| ``coord.error`` | ``client``, ``fault_id``, ``phase`` (``before``/``prepare``/``after``), ``error`` |

A hook that raises is a harness problem of the coordinating adapter: it is recorded as
``coord.error`` and re-raised as :class:`CoordinationError` (a HarnessError) - never a rule verdict.
``after_switchover`` hooks run even when the role swap itself failed, so a drained client is always
released. The optional ``prepare_switchover(next_principal_address)`` is called on every
coordinator that has it first, before any drain, with the client address of the node about to be
promoted (pre-attach: the reference proxy logs in there for each session while the clients still run,
replays the sessions' state there once drained, and only swaps those connections in at the resume).
It must return at once; one that raises is recorded as ``coord.error`` (``phase: prepare``) and the
switchover goes on - the client re-attaches the usual way, and no verdict depends on it.

Early resume (PER-1, a short stall): ``Faults`` passes the hooks to the topology's ``switchover(on_writable=)``,
so ``after_switchover`` runs as soon as the new principal accepts writes (after promote and its
principal configuration; topology event ``switchover.writable``). In an async pair the hooks of
the coordinators that set ``resume_inside_switchover = True`` run there, in the switchover's thread,
and the old principal's rewind and restart wait for them (those resumes then have the CPU to
themselves). Such a hook must neither change the run's state nor wait for the switchover to end: it
runs while the switchover holds the run's lock (taking it there is a HarnessError, not a hang).
Every other hook - and every hook in a sync pair, whose resumed commits wait for the old principal
anyway - runs in a helper thread while the old principal is being rewound and restarted.
``switchover()`` returns only when that is done and every hook has returned. ``coord.after`` /
``coord.after_done`` carry ``stage``: ``writable`` (resumed during the switchover) or ``done`` (after
it returned or failed). In a sync pair the resumed clients' commits wait until the old principal
streams again (DUR-1); reads go on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from harness.errors import ConfigError, CoordinationError
from harness.ports import Address

Recorder = Callable[..., Any]


@runtime_checkable
class SwitchoverCoordinator(Protocol):
    """A client that wants to be told about planned switchovers (PER-1/PER-4 drain and resume)."""

    def before_switchover(self) -> Any:
        """Called before the principal goes away: drain (hold new work, wait up to the client's drain
        window for active work to end). May return a JSON-safe summary (recorded)."""

    def after_switchover(self, new_principal_address: Address) -> Any:
        """Called once the new principal is up, with the address clients should now reach it at:
        re-point and resume. May return a JSON-safe summary (recorded)."""


def catch_up(client: SwitchoverCoordinator, principal_address: Address) -> None:
    """Re-point an idle coordinator that was not told about earlier switchovers at the current
    principal: one drain and one resume there, no fault (PER-1/PER-4 hooks). The benchmarks use it
    to measure each client's switchovers with that client alone coordinating."""
    client.before_switchover()
    client.after_switchover(principal_address)


def check_coordinator(client: Any) -> SwitchoverCoordinator:
    """``client`` itself if it implements :class:`SwitchoverCoordinator`, else a ConfigError naming
    the two missing methods (PER-1/PER-4 coordination)."""
    if not isinstance(client, SwitchoverCoordinator):
        raise ConfigError(f"{type(client).__name__} cannot coordinate switchovers: it needs the methods "
                          "before_switchover() and after_switchover(new_principal_address) "
                          "(harness.faults.coordination.SwitchoverCoordinator)")
    return client


def coordinator_name(client: Any) -> str:
    """The name recorded in ``coord.*`` events: the client's ``name`` attribute, else its class."""
    name = getattr(client, "name", None)
    return str(name) if name else type(client).__name__


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_json_safe(v) for v in value]
    return str(value)


json_safe = _json_safe  # what coordination events carry of a hook's result (also for remove_node)


def run_coordinated(coordinators: Sequence[SwitchoverCoordinator], action: Callable[..., Any],
                    new_address: Callable[[], Address], record: Recorder | None = None,
                    fault_id: Any = None, early: bool = False,
                    next_address: Callable[[], Address | None] | None = None,
                    before_drain: Callable[[], Any] | None = None, resume_first: bool = False) -> Any:
    """Run a planned switchover ``action`` between the coordinators' hooks (PER-1/PER-4):
    every ``before_switchover()`` in order, ``action()``, then every ``after_switchover(new_address())``
    in reverse order (always, even if the action failed). Returns ``action()``'s result once the
    action and every hook are done. With no coordinators this is just ``action()``.

    With ``early`` (early resume, above) ``action`` is called as ``action(on_writable)``: the topology calls
    ``on_writable()`` as soon as the new principal accepts writes; the address is read then, and the
    ``after_switchover`` hooks run from that moment in a helper thread while the action goes on
    (old principal rewound, restarted, streaming); with ``resume_first`` the hooks of the coordinators
    whose ``resume_inside_switchover`` is true run in the action's own thread first, and
    ``on_writable()`` returns once they have returned, so that the rest of the action (a CHECKPOINT,
    pg_rewind, a server start) does not compete with those resumes for the CPU (PER-1 stall:
    the resume of 20 sessions took 70-109 ms beside it, 54-64 ms before it: medians of three
    A/B runs of 8 switchovers, 2026-12-02). ``coord.after`` says which: ``stage="writable"``
    (resumed while the switchover still runs) or ``stage="done"`` (after the action returned or
    failed; also when it failed before the new principal was writable).

    ``next_address()`` names the node about to be promoted (its client address; None: unknown): every
    coordinator with a ``prepare_switchover`` method is told it first; then ``before_drain()`` runs
    (the topology's own preparation, e.g. a CHECKPOINT), then the drains, then ``action``."""
    if not coordinators:
        if before_drain is not None:
            before_drain()
        return action(lambda: None) if early else action()

    def emit(type_: str, **fields: Any) -> None:
        if record is not None:
            record(type_, fault_id=fault_id, **fields)

    def hook(phase: str, client: SwitchoverCoordinator, call: Callable[[], Any], **extra: Any) -> None:
        name = coordinator_name(client)
        emit(f"coord.{phase}", client=name, **extra)
        t0 = time.monotonic()
        try:
            result = call()
        except Exception as exc:
            emit("coord.error", client=name, phase=phase, error=f"{type(exc).__name__}: {exc}")
            raise CoordinationError(f"{phase}_switchover of {name} failed: {type(exc).__name__}: {exc}") from exc
        emit(f"coord.{phase}_done", client=name, seconds=time.monotonic() - t0, result=_json_safe(result),
             **extra)

    drained: list[SwitchoverCoordinator] = []

    def release(address: Address | None, stage: str,
                clients: Sequence[SwitchoverCoordinator] | None = None) -> list[BaseException]:
        errors: list[BaseException] = []
        for client in (list(reversed(drained)) if clients is None else clients):
            try:
                if address is None:
                    address = new_address()
                hook("after", client, lambda c=client, a=address: c.after_switchover(a), stage=stage)
            except Exception as exc:  # noqa: BLE001 - release every client, then report the first
                errors.append(exc)
        return errors

    def prepare(address: Address | None) -> None:
        for client in coordinators:
            warm = getattr(client, "prepare_switchover", None)
            if address is None or warm is None:
                continue
            try:  # a head start only: a failure is recorded, the resume re-attaches the usual way
                hook("prepare", client, lambda w=warm: w(address), address=f"{address[0]}:{address[1]}")
            except CoordinationError:
                pass

    resumed: list[bool] = []
    resumers: list[threading.Thread] = []
    early_errors: list[BaseException] = []

    def on_writable() -> None:
        if resumed or not drained:
            return
        resumed.append(True)
        address = new_address()  # in the switchover's thread: the roles it has just set
        order = list(reversed(drained))
        inside = [c for c in order if resume_first and getattr(c, "resume_inside_switchover", False)]
        beside = [c for c in order if c not in inside]
        early_errors.extend(release(address, "writable", inside))
        if beside:
            thread = threading.Thread(target=lambda: early_errors.extend(release(address, "writable", beside)),
                                      name="coord-resume", daemon=True)
            resumers.append(thread)
            thread.start()

    try:
        prepare(next_address() if next_address is not None else None)
        if before_drain is not None:
            before_drain()
        for client in coordinators:
            hook("before", client, client.before_switchover)
            drained.append(client)
        result = action(on_writable) if early else action()
    finally:
        if resumed:
            for thread in resumers:
                thread.join()
            errors = early_errors
        else:
            errors = release(None, "done")
        if errors:
            raise errors[0]
    return result
