"""What runs on which backend: every fault and topology operation x backend (``local``, ``compose``),
with the one-line reason where a backend cannot (docs/compose.md, "Capabilities").

This table is what the backends consult before they act - :func:`refusal` is the only place that
says no: ``ComposeBackend.check`` (engines), ``ComposeBackend.build`` (node counts),
``ComposeTopology`` (a caller's own links object), node add / remove (``membership``) - so the table
:func:`markdown` renders into docs/compose.md is the code's own decision, not a description of it
(``tests/test_capabilities.py`` checks that the document is this rendering, and that every public
fault of :class:`harness.faults.vocabulary.Faults` and every topology operation has a row)."""

from __future__ import annotations

import re
from dataclasses import dataclass

BACKEND_NAMES = ("local", "compose")
YES = None

_MARIADB_ADD_NODE = ("a MariaDB run on compose has no standby compose file for a new node (the MariaDB suites "
                     "never add one: PER-1's node add is a PostgreSQL test); run it with --backend local")

@dataclass(frozen=True)
class Capability:
    """One operation (``name``: the API / CLI name, ``kind``: topology, role, membership, fault,
    server fault), what it does, and per backend None (runs) or why it cannot."""

    name: str
    kind: str
    what: str
    local: str | None = YES
    compose: str | None = YES

    def refusal(self, backend: str) -> str | None:
        """Why ``backend`` cannot run this operation, or None when it can."""
        if backend not in BACKEND_NAMES:
            raise KeyError(f"unknown backend {backend!r}; have {', '.join(BACKEND_NAMES)}")
        return self.local if backend == "local" else self.compose


CAPABILITIES: tuple[Capability, ...] = (
    # topologies and engines (``up --topology``, ``--engine``, ``Pair`` / ``Group``)
    Capability("pg-pair", "topology", "PostgreSQL 15 principal + mirror, sync or async replication"),
    Capability("pg-group3", "topology", "PostgreSQL 15 principal + two standbys"),
    Capability("group of N > 3", "topology", "Group(nodes=N): one principal and N-1 standbys from the start",
               compose="compose files exist for pairs and groups of three (compose/pg-pair.yml, pg-group3.yml): "
                       "up pg-group3, then add-node"),
    Capability("engine mariadb", "topology", "MariaDB 10.11 GTID pair / group (mariadb-pair, mariadb-group3)"),
    Capability("mariadb-pair", "topology", "MariaDB 10.11 principal + mirror, GTID replication, semi-sync as "
                                           "sync mode (compose/mariadb-pair.yml)"),
    Capability("mariadb-group3", "topology", "MariaDB 10.11 principal + two replicas (compose/mariadb-group3.yml)"),
    Capability("patroni-pair / patroni-group3", "topology",
               "Patroni 3 per node over one etcd, every link behind the fault proxy (suites/ham, make chaos-ham)",
               compose="compose Patroni topology not built: run patroni-pair / patroni-group3 with --backend local"),
    Capability("pgaf-pair / pgaf-group3", "topology",
               "pg_auto_failover 2.0: a pg_autoctl monitor and a keeper per node, client and node->monitor links "
               "behind the fault proxy (suites/ham)",
               compose="compose pg_auto_failover topology not built: run pgaf-pair / pgaf-group3 with --backend "
                       "local"),
    Capability("links direct", "topology", "clients and replication straight to the servers (--no-proxy)"),
    Capability("links object", "topology", "the caller's own Links object in front of the nodes",
               compose="the compose backend brings its own fault proxy (the Toxiproxy container): pass "
                       "links='proxy' or 'direct'"),
    # role operations (Topology API and ``fault --run ID ...``)
    Capability("switchover", "role", "planned role swap: stop (fast), promote, rewind, rejoin"),
    Capability("failover", "role", "kill -9 the principal, promote a standby"),
    Capability("rejoin", "role", "a down former principal or standby back as a standby (rewind or re-clone)"),
    Capability("stop", "server", "stop one server: fast, immediate or smart"),
    Capability("start", "server", "start a stopped or killed server in its role"),
    Capability("kill", "server", "kill -9 every process of one server"),
    Capability("pause", "server", "SIGSTOP the postmaster or all server processes"),
    Capability("resume", "server", "SIGCONT a paused server"),
    # membership (PER-1 node add / remove, PER-9 / PER-10)
    Capability("add_node", "membership", "a new standby cloned from the principal, streaming behind its own "
                                         "fault proxies (compose: a container of compose/pg-standby.yml)"),
    Capability("mariadb add_node", "membership", "add_node on a MariaDB run (a mariadb-backup clone)",
               compose=_MARIADB_ADD_NODE),
    Capability("remove_node", "membership", "a read-only node removed (coordinators told first)"),
    # faults through the fault proxy (Toxiproxy API: embedded / spawned locally, the container on compose)
    Capability("partition", "fault", "blackhole, refuse (listener off; refused connects captured) or reset"),
    Capability("cut_replication", "fault", "a standby's replication proxy disabled"),
    Capability("latency", "fault", "added delay (and jitter) on a node's client proxy"),
    Capability("bandwidth", "fault", "a node's client proxy throttled"),
    Capability("slow_close", "fault", "closes delayed"),
    Capability("limit_data", "fault", "the connection closed after N bytes"),
    Capability("mark_state", "fault", "ICM directory mark (out-of-service, pending-delete) of a server"),
    Capability("heal_all", "fault", "every toxic removed, every proxy enabled, paused nodes resumed"),
)

_BY_NAME = {c.name: c for c in CAPABILITIES}


def capability(name: str) -> Capability:
    """The row of operation ``name`` (KeyError listing the rows otherwise)."""
    if name not in _BY_NAME:
        raise KeyError(f"no capability {name!r}; have {', '.join(_BY_NAME)}")
    return _BY_NAME[name]


def refusal(backend: str, name: str) -> str | None:
    """Why ``backend`` cannot run operation ``name`` (one line, with what to do instead), or None."""
    return capability(name).refusal(backend)


def engine_refusal(backend: str, engine: str) -> str | None:
    """Why ``backend`` cannot run database engine ``engine`` (its ``engine <name>`` row), or None."""
    row = _BY_NAME.get(f"engine {engine}")
    return row.refusal(backend) if row is not None else None


def engine_operation_refusal(backend: str, engine: str, name: str) -> str | None:
    """Why ``backend`` cannot run operation ``name`` for database engine ``engine``: the operation's own
    row, else the engine's row for it (``<engine> <name>``, e.g. ``mariadb add_node``) when there is one."""
    why = refusal(backend, name)
    row = _BY_NAME.get(f"{engine} {name}")
    return why if why is not None or row is None else row.refusal(backend)


def _cell(reason: str | None) -> str:
    return "yes" if reason is None else f"no - {reason}"


def markdown() -> str:
    """The capability table as Markdown (one row per operation, one column per backend)."""
    lines = ["| operation | kind | what | " + " | ".join(BACKEND_NAMES) + " |",
             "|---|---|---|" + "---|" * len(BACKEND_NAMES)]
    for c in CAPABILITIES:
        cells = " | ".join(_cell(c.refusal(b)) for b in BACKEND_NAMES)
        lines.append(f"| `{c.name}` | {c.kind} | {c.what} | {cells} |")
    return "\n".join(lines) + "\n"


BEGIN = "<!-- capability table: generated by `python scripts/capability_table.py`; do not edit -->"
END = "<!-- end of the capability table -->"


def with_table(doc: str) -> str:
    """``doc`` with the text between :data:`BEGIN` and :data:`END` replaced by :func:`markdown`
    (ValueError when the markers are missing)."""
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise ValueError("the document has no capability-table markers")
    return pattern.sub(lambda _: f"{BEGIN}\n{markdown()}{END}", doc)
