"""How clients and standbys reach the nodes of a topology (the *links* seam).

A topology asks its :class:`Links` for each node's client-facing address and for the address a
standby streams from. :class:`DirectLinks` answers with the servers' own addresses;
:class:`~harness.topology.proxied.ProxiedLinks` answers with Toxiproxy proxies so that any link can
be cut (the default: every client address and replication link behind the fault proxy). The caller
builds the links and passes them to the topology; :func:`harness.topology.proxied.make_links` turns
the shorthands ``"proxy"`` / ``"direct"`` into one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from harness.ports import Address
from harness.topology.state import RunState


@runtime_checkable
class Links(Protocol):
    """What a topology needs from the layer between clients/standbys and its servers."""

    kind: str

    def setup(self, state: RunState) -> None:
        """Create whatever fronts the nodes and describe it in ``state.links`` (called once the
        nodes' ports are known, before the servers start); when attaching to an existing run,
        only remember it."""

    def client_address(self, state: RunState, node: str) -> Address:
        """The address clients use for ``node``; it keeps meaning that node across role changes."""

    def replication_address(self, state: RunState, standby: str, principal: str) -> Address:
        """The address ``standby`` streams WAL from while ``principal`` is the principal."""

    def roles_changed(self, state: RunState) -> None:
        """Re-point the links after a role change, or after a server moved to another port."""

    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Deliver connection events to ``callback`` until the returned function is called."""

    def settle(self, timeout: float = 2.0) -> None:
        """Deliver every connection event observed so far before returning (observers that run
        beside the proxy, such as the refused-connect capture, may lag behind it)."""

    def teardown(self) -> None:
        """Remove what :meth:`setup` created."""

    # Optional (node add / remove, harness.topology.membership): ``node_added(state, node)`` creates
    # what fronts a new node and records it in ``state.links``; ``node_removed(state, node)`` removes it.


class DirectLinks:
    """No proxy: clients and standbys use the servers' own addresses."""

    kind = "direct"

    def setup(self, state: RunState) -> None:
        """Nothing to create."""
        state.links.kind = self.kind

    def client_address(self, state: RunState, node: str) -> Address:
        """The node's server address."""
        return ("127.0.0.1", state.node(node).port)

    def replication_address(self, state: RunState, standby: str, principal: str) -> Address:
        """The principal's server address."""
        return ("127.0.0.1", state.node(principal).port)

    def roles_changed(self, state: RunState) -> None:
        """Nothing to re-point."""

    def node_added(self, state: RunState, node: str) -> None:
        """Nothing to create for a new node (node add)."""

    def node_removed(self, state: RunState, node: str) -> None:
        """Nothing to remove for a removed node (node remove)."""

    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        """No events: nothing observes direct connections."""
        return lambda: None

    def settle(self, timeout: float = 2.0) -> None:
        """Nothing to deliver."""

    def teardown(self) -> None:
        """Nothing to remove."""
