"""Topologies: pairs and groups of real database servers (local processes by default)."""

from harness.topology.local import Group, LocalTopology, Node, OperationResult, Pair

__all__ = ["Group", "LocalTopology", "Node", "OperationResult", "Pair"]
