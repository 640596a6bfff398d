"""Topologies (Jepsen's *db*): pairs and groups of real database servers over two seams - a
:class:`~harness.topology.backend.Backend` (local processes, or Docker Compose containers behind the
real Toxiproxy) and an
:class:`~harness.topology.engine.Engine` (PostgreSQL, MariaDB) - with every client address
and replication link behind :class:`~harness.topology.links.Links` (the fault proxy by default).
Knows nothing about rules or faults."""

from harness.topology.api import Group, Node, OperationResult, Pair, Topology
from harness.topology.backend import Backend, get_backend, get_engine, resolve
from harness.topology.engine import Credentials, Engine
from harness.topology.links import DirectLinks, Links
from harness.topology.local import LocalGroup, LocalPair, LocalTopology
from harness.topology.proxied import ProxiedLinks, start_proxied_links

__all__ = [
    "Backend", "Credentials", "DirectLinks", "Engine", "Group", "Links", "LocalGroup", "LocalPair", "LocalTopology",
    "Node", "OperationResult", "Pair", "ProxiedLinks", "Topology", "get_backend", "get_engine", "resolve",
    "start_proxied_links",
]
