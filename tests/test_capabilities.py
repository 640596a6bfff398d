"""The backend capability table (docs/compose.md, "Capabilities: what runs where") is the code's own
decision: the document holds exactly the rendering of :mod:`harness.topology.capabilities`, every
operation of the fault vocabulary and of the topology API has a row, and where a row says *no* the
backend really refuses - in one line, with that row's reason. No Docker engine is needed: every
refusal comes before anything starts."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.faults.vocabulary import Faults
from harness.topology import capabilities
from harness.topology.api import Topology
from harness.topology.backend import get_backend, get_engine
from harness.topology.capabilities import BACKEND_NAMES, CAPABILITIES, markdown, refusal, with_table
from harness.topology.links import DirectLinks
from harness.topology.patroni import check_backend
from harness.topology.pgaf import check_backend as check_pgaf_backend

DOC = Path(__file__).resolve().parent.parent / "docs" / "compose.md"
#: Public methods of Faults that are plumbing, not faults (each with why).
NOT_FAULTS = {
    "coordinate": "registers a client to be told of role operations; no fault of its own",
    "apply_persistent": "the detached (CLI) form of the network faults above, same rows",
}
TOPOLOGY_OPERATIONS = ("switchover", "failover", "rejoin", "stop", "start", "kill", "pause", "resume",
                       "add_node", "remove_node")


def test_the_document_holds_the_table_the_code_renders() -> None:
    doc = DOC.read_text()
    assert capabilities.BEGIN in doc and capabilities.END in doc
    assert with_table(doc) == doc, "docs/compose.md's capability table is stale: run scripts/capability_table.py"
    assert markdown() in doc
    rows = markdown().splitlines()[2:]
    assert len(rows) == len(CAPABILITIES) and all(line.count(" | ") == 2 + len(BACKEND_NAMES) for line in rows)


def test_every_fault_and_topology_operation_has_a_row() -> None:
    names = {c.name for c in CAPABILITIES}
    assert len(names) == len(CAPABILITIES), "a row appears twice"
    faults = {n for n, f in inspect.getmembers(Faults, inspect.isfunction) if not n.startswith("_")}
    assert faults - set(NOT_FAULTS) - names == set(), "a fault of the vocabulary has no capability row"
    topo = {n for n in TOPOLOGY_OPERATIONS if callable(getattr(Topology, n, None))}
    assert topo == set(TOPOLOGY_OPERATIONS) and topo <= names


def test_the_local_backend_refuses_nothing_of_the_table() -> None:
    assert [c.name for c in CAPABILITIES if refusal("local", c.name) is not None] == []


def test_each_no_of_compose_is_the_backends_own_one_line_refusal() -> None:
    """Every compose row that says *no* is refused by the backend with that row's reason."""
    compose, postgres = get_backend("compose"), get_engine("postgres")
    attempts = {
        "engine mariadb": lambda: compose.build(get_engine("mariadb"), 2),
        "group of N > 3": lambda: compose.build(postgres, 4),
        "links object": lambda: compose.build(postgres, 2, links=DirectLinks()),
        "patroni-pair / patroni-group3": lambda: check_backend("compose"),
        "pgaf-pair / pgaf-group3": lambda: check_pgaf_backend("compose"),
    }
    refused = {c.name for c in CAPABILITIES if c.compose is not None}
    # those: tests/test_node_membership.py (mariadb add_node: tests/test_compose_mariadb.py)
    assert refused - set(attempts) <= {"add_node", "remove_node", "mariadb add_node"}
    for name, attempt in attempts.items():
        why = refusal("compose", name)
        if why is None:
            attempt()  # accepted now: it builds (nothing starts)
            continue
        with pytest.raises(ConfigError) as err:
            attempt()
        assert why in str(err.value) and "\n" not in str(err.value), (name, str(err.value))


def test_unknown_rows_and_backends_are_named() -> None:
    with pytest.raises(KeyError, match="no capability 'teleport'"):
        refusal("local", "teleport")
    with pytest.raises(KeyError, match="unknown backend 'k8s'"):
        refusal("k8s", "switchover")
    with pytest.raises(ValueError, match="no capability-table markers"):
        with_table("# a document without the table\n")
