"""The public face of a topology, whatever backend runs it: :class:`Topology` (what suites, faults and
clients may use), :class:`Pair` (principal + mirror) and :class:`Group` (one principal, N-1
standbys), plus :class:`Node` and :class:`OperationResult`.

``Pair(...)`` and ``Group(...)`` build a not-yet-started topology on the local backend (use them as
context managers, like testcontainers' resources); a backend builds its own subclasses, so
``isinstance(t, Pair)`` holds for a pair on any backend and suites annotate ``pair: Pair``.

Role operations (``switchover``, ``failover``, ``rejoin``, ``stop`` …) are *instant*: they return when
done with an :class:`OperationResult` and are not recorded as faults here - the fault vocabulary
(:class:`harness.faults.Faults`) records them. Nothing in this module knows rules or faults."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.errors import InvalidOperation
from harness.redact import redact
from harness.topology.engine import Engine
from harness.topology.links import Address, Links


@dataclass(frozen=True)
class OperationResult:
    """What a role operation or node action did and how long it took (CLI ``fault --json``)."""

    fault: str
    node: str | None
    started_at: float  # Unix wall-clock seconds
    ended_at: float
    seconds: float
    principal: str | None

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape: fault, node, started_at, ended_at, seconds, principal."""
        return asdict(self)


class Node(abc.ABC):
    """A view of one node of a topology: name, role, state and addresses (always current)."""

    name: str

    @property
    @abc.abstractmethod
    def role(self) -> str:
        """``principal``, ``mirror`` (the principal's partner in a pair) or ``standby`` (group)."""

    @property
    @abc.abstractmethod
    def state(self) -> str:
        """``running``, ``stopped``, ``killed`` or ``paused``."""

    @property
    @abc.abstractmethod
    def server_address(self) -> Address:
        """Where the server itself listens."""

    @property
    @abc.abstractmethod
    def client_address(self) -> Address:
        """Where clients connect to reach this node (a fault proxy when one is wired in)."""

    @abc.abstractmethod
    def dsn(self, dbname: str | None = None, user: str | None = None, password: str | None = None,
            direct: bool = False, **params: Any) -> str:
        """A libpq connection string for this node (``direct``: bypassing any proxy)."""

    def public_dsn(self, direct: bool = False) -> str:
        """A connection string for this node that may be printed or saved: no password (harness.redact)."""
        return redact(self.dsn(direct=direct))

    @abc.abstractmethod
    def admin(self) -> Any:
        """A superuser autocommit connection (harness use; bypasses proxies)."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The CLI JSON shape of a node."""


class Topology(abc.ABC):
    """A started (or startable) set of database nodes with streaming replication behind links."""

    run_id: str | None
    topology: str
    mode: str
    mirror_readable: bool
    links: Links
    engine: Engine
    history: Any
    path: Path

    # -------------------------------------------------------------------- lifecycle
    @abc.abstractmethod
    def up(self) -> Topology:
        """Start every node; return when every standby streams."""

    @abc.abstractmethod
    def down(self) -> None:
        """Stop everything the topology started (safe to call twice)."""

    def __enter__(self) -> Topology:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -------------------------------------------------------------------- views
    @property
    @abc.abstractmethod
    def nodes(self) -> list[Node]:
        """Every node, in creation order."""

    @property
    @abc.abstractmethod
    def principal(self) -> Node:
        """The current principal."""

    @property
    @abc.abstractmethod
    def mirror(self) -> Node:
        """The principal's partner: the mirror of a pair, or the first running standby of a group."""

    @property
    @abc.abstractmethod
    def standbys(self) -> list[Node]:
        """Every node that is not the principal."""

    @abc.abstractmethod
    def node(self, name: str | Node) -> Node:
        """The node called ``name`` (UnknownNodeError naming the known nodes otherwise)."""

    @abc.abstractmethod
    def dsn(self, target_session_attrs: str = "read-write", **params: Any) -> str:
        """A multi-host libpq connection string over every node's client-facing address."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """The CLI JSON shape: run, topology, mode, engine, fault proxy, nodes."""

    @abc.abstractmethod
    def refresh(self) -> None:
        """Re-read the run's state (another process may have changed roles)."""

    @abc.abstractmethod
    def partner_setting(self) -> str:
        """What the principal publishes as its failover partner (MIR-9)."""

    @abc.abstractmethod
    def keep(self) -> None:
        """Leave the servers up after this process ends (``--keep-on-failure``)."""

    def settle_observations(self, timeout: float = 2.0) -> None:
        """Return once every connection event observed so far is in the history (the refused-connect
        capture runs beside the fault proxy and may lag it by a wake-up; OBS-1)."""
        self.links.settle(timeout)

    @abc.abstractmethod
    def register_process(self, name: str, pid: int, remove: bool = False) -> None:
        """Make a process started in front of the topology (a pooler, a proxy) part of the run, so
        that teardown and the reaper stop it too (``remove``: forget it again)."""

    # -------------------------------------------------------------------- instant operations
    @abc.abstractmethod
    def switchover(self, target: str | None = None,
                   on_writable: Callable[[], None] | None = None) -> OperationResult:
        """Planned role swap to ``target`` (default: the mirror); returns when every node is back in
        its new role. ``on_writable()`` is called as soon as the new principal accepts writes, while
        the old one is still rejoining (where coordinated clients resume, PER-1/PER-4)."""

    @abc.abstractmethod
    def prepare_switchover(self, target: str | None = None) -> None:
        """Called just before a planned switchover to ``target`` (default: the mirror) drains its
        clients: work that shortens the coming stop while clients still run (local backend: CHECKPOINT
        on the principal, so that the shutdown checkpoint of ``stop -m fast`` has little to write, and
        admin sessions the switchover's checks reuse; the PER-1 stall). May do nothing."""

    @abc.abstractmethod
    def failover(self, target: str | None = None) -> OperationResult:
        """Kill the principal, promote ``target`` (default: the mirror)."""

    @abc.abstractmethod
    def rejoin(self, node: str | None = None) -> OperationResult:
        """Bring a down former principal (or standby) back as a standby."""

    @abc.abstractmethod
    def stop(self, node: str, mode: str = "fast") -> OperationResult:
        """Stop one server."""

    @abc.abstractmethod
    def start(self, node: str) -> OperationResult:
        """Start a stopped or killed server in its current role."""

    @abc.abstractmethod
    def kill(self, node: str) -> OperationResult:
        """kill -9 one server (no failover)."""

    @abc.abstractmethod
    def pause(self, node: str, scope: str = "postmaster") -> OperationResult:
        """SIGSTOP one server (``postmaster`` or ``all`` processes)."""

    @abc.abstractmethod
    def resume(self, node: str) -> OperationResult:
        """SIGCONT a paused server."""

    def add_node(self) -> OperationResult:
        """Add a standby cloned from the principal (node add); a backend that cannot says so."""
        raise InvalidOperation(f"{type(self).__name__} cannot add nodes")

    def remove_node(self, node: str) -> OperationResult:
        """Stop a standby and drop it from the topology (node remove); a backend that cannot says so."""
        raise InvalidOperation(f"{type(self).__name__} cannot remove nodes")

    def removal_problem(self, node: str) -> str | None:
        """Why :meth:`remove_node` would refuse ``node`` (with the fix), or None."""
        return None

    def membership_problem(self, op: str) -> str | None:
        """Why this topology cannot ``op`` (``add-node`` / ``remove-node``) at all, with what to do
        instead, or None when it can (node add / remove, PER-1)."""
        return f"{type(self).__name__} cannot add or remove nodes ({op})"


#: How ``Pair(...)`` / ``Group(...)`` find the class that builds them on the default backend.
_default_classes: dict[str, Callable[[], type]] = {}


def set_default_class(kind: str, factory: Callable[[], type]) -> None:
    """Called by the default backend: the concrete class ``Pair(...)`` / ``Group(...)`` builds."""
    _default_classes[kind] = factory


class Pair(Topology):
    """A principal + mirror pair on any backend. ``Pair(mode="sync", mirror_readable=False, ...)``
    builds one (not started) on the local backend."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Pair:
        impl = _default_classes["pair"]() if cls is Pair else cls
        return super().__new__(impl)


class Group(Topology):
    """One principal and N-1 standbys (N >= 3) on any backend. ``Group(nodes=3, ...)`` builds one (not
    started) on the local backend."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Group:
        impl = _default_classes["group"]() if cls is Group else cls
        return super().__new__(impl)
