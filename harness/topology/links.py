"""How clients and standbys reach the nodes of a topology.

The topology asks its *links* for each node's client-facing address and for the address a standby
streams from. :class:`DirectLinks` answers with the servers' own addresses; the fault-proxy wiring
(:mod:`harness.faults.wiring`) answers with Toxiproxy proxies so that any link can be cut."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from harness.topology.local import LocalTopology

Address = tuple[str, int]


class Links(Protocol):
    """What a topology needs from the layer between clients/standbys and its servers."""

    kind: str

    def setup(self, topology: LocalTopology) -> None:
        """Create whatever fronts the nodes (called once ports are known, before servers start)."""

    def client_address(self, node: str) -> Address:
        """The address clients use for ``node``; it keeps meaning that node across role changes."""

    def replication_address(self, standby: str, principal: str) -> Address:
        """The address ``standby`` streams WAL from while ``principal`` is the principal."""

    def roles_changed(self, topology: LocalTopology) -> None:
        """Re-point replication links after a role change."""

    def teardown(self) -> None:
        """Remove what :meth:`setup` created."""


class DirectLinks:
    """No proxy: clients and standbys use the servers' own addresses."""

    kind = "direct"

    def __init__(self) -> None:
        self._topology: LocalTopology | None = None

    def setup(self, topology: LocalTopology) -> None:
        """Remember the topology (nothing to create)."""
        self._topology = topology

    def client_address(self, node: str) -> Address:
        """The node's server address."""
        assert self._topology is not None
        return self._topology.node(node).server_address

    def replication_address(self, standby: str, principal: str) -> Address:
        """The principal's server address."""
        assert self._topology is not None
        return self._topology.node(principal).server_address

    def roles_changed(self, topology: LocalTopology) -> None:
        """Nothing to re-point."""

    def teardown(self) -> None:
        """Nothing to remove."""
