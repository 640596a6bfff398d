"""What the ordinary suites may ask of a topology whose roles an HA manager swaps
(``--topology patroni-pair`` / ``patroni-group3``; docs/ha-managers.md "Client suites under the
manager"): per operation of the Topology API, whether the manager topology does it and how, or the
one-line reason it cannot; per rule family, whether its suites run there.

:func:`operation_refusal` and :func:`family_refusal` are the only places that say no: the manager
topology (:mod:`harness.topology.patroni_topology`) raises the first, the pytest plugin skips a test
with the second (reported, never silently green). :func:`markdown` renders both tables into
docs/ha-managers.md (``python scripts/capability_table.py``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

MANAGED_TOPOLOGIES = ("patroni-pair", "patroni-group3")
#: Every ``--topology`` a run takes: the manager topologies the ordinary suites run under, and the
#: pg_auto_failover ones, which select the HAM suites of that manager only (clients under
#: pg_auto_failover are not built: :data:`PGAF_CLIENT_SUITES`).
RUN_TOPOLOGIES = (*MANAGED_TOPOLOGIES, "pgaf-pair", "pgaf-group3")
PGAF_CLIENT_SUITES = ("the ordinary suites under pg_auto_failover are not built: run them under --topology "
                      "patroni-pair / patroni-group3; under pgaf-* only the HAM suites of pg_auto_failover run")


def manager_of(topology: str) -> str:
    """The HA manager a ``--topology`` names: ``patroni`` or ``pgaf`` (pg_auto_failover)."""
    return "pgaf" if topology.startswith("pgaf-") else "patroni"


@dataclass(frozen=True)
class ManagedOperation:
    """One Topology API operation under a manager (OBS-1: a refusal is a harness error, never a verdict): how it is
    done there, or why it is not."""

    name: str
    how: str | None = None  # what the manager topology does for it (None: refused)
    refusal: str | None = None  # why it cannot (None: it runs)


OPERATIONS: tuple[ManagedOperation, ...] = (
    ManagedOperation("switchover", how="Patroni `POST /switchover` (to the synchronous standby in synchronous "
                                       "mode); returns once the former leader streams again"),
    ManagedOperation("failover", how="the leader's machine lost (Patroni and PostgreSQL SIGKILLed); Patroni "
                                     "promotes its synchronous standby after the leader key expires (ttl)"),
    ManagedOperation("rejoin", how="the lost node's Patroni started again: it rewinds its server and rejoins"),
    ManagedOperation("partition / latency / bandwidth / slow_close / limit_data",
                     how="on the node's client proxy, as on any topology (Patroni's own links are apart)"),
    ManagedOperation("cut_replication", how="the standby's replication proxy disabled"),
    ManagedOperation("stop", refusal="Patroni restarts a stopped server by itself: a harness stop is not a "
                                     "fault under the manager (use failover: machine loss)"),
    ManagedOperation("start", refusal="Patroni starts servers itself (use rejoin)"),
    ManagedOperation("kill", refusal="a server killed under Patroni is restarted by Patroni within loop_wait: "
                                     "use failover (machine loss) or `fault kill-manager`"),
    ManagedOperation("pause", refusal="SIGSTOP of a managed server stalls Patroni's own queries: not built"),
    ManagedOperation("resume", refusal="no pause under the manager"),
    ManagedOperation("add_node", refusal="membership changes under Patroni are not built (a new member would "
                                         "clone itself through Patroni)"),
    ManagedOperation("remove_node", refusal="membership changes under Patroni are not built"),
    ManagedOperation("partner_setting", refusal="MIR-9's published partner is the stand-in pair's own setting; "
                                                "Patroni publishes none"),
)

#: Rule families whose suites run under a manager topology; the others, with why not.
FAMILIES: dict[str, str | None] = {
    "DUR": None,
    "OBS": None,
    "LPQ": None,
    "HAM": None,
    "MIR": "MIR needs an inactive partner (a standby that rejects logins, hot_standby=off); Patroni runs "
           "every replica as a hot standby it queries itself",
    "PER": "PER needs server stop, node add / remove and coordinated switchovers that only the harness "
           "choreography does",
    "ACR": "the ACR suites run on their own DB2 stand-in group, not on a pair",
    "ICM": "the ICM suites run on their own Domino stand-in cluster, not on a pair",
    "APP": "the APP suites stop and pause servers, which Patroni restarts by itself",
}

_OPS = {op.name: op for op in OPERATIONS}


def is_run_topology(topology: str | None) -> bool:
    """True when ``topology`` is one ``failover-harness run --topology`` takes (:data:`RUN_TOPOLOGIES`)."""
    return topology in RUN_TOPOLOGIES


def is_managed(topology: str | None) -> bool:
    """True when ``topology`` (``--topology``) names a manager-driven topology (HAM family)."""
    return topology in MANAGED_TOPOLOGIES


def operation_refusal(name: str) -> str | None:
    """Why a manager topology cannot do Topology operation ``name`` (one line, OBS-1), or None."""
    op = _OPS.get(name)
    return None if op is None else op.refusal


def family_refusal(rule_ids: list[str]) -> str | None:
    """Why a test citing ``rule_ids`` (DUR-1, LPQ-1 ...) cannot run under a manager topology, or None when every
    family it cites can (an unknown family is refused: nothing runs there unreviewed)."""
    for rid in rule_ids:
        family = rid.split("-", 1)[0]
        if family not in FAMILIES:
            return f"rule family {family} is not reviewed for manager topologies"
        if FAMILIES[family] is not None:
            return FAMILIES[family]
    return None


def markdown() -> str:
    """Both tables as Markdown: operations, then rule families (DUR, LPQ, HAM ... served or not)."""
    lines = ["| operation | under the manager |", "|---|---|"]
    for op in OPERATIONS:
        lines.append(f"| `{op.name}` | {'yes - ' + op.how if op.how else 'no - ' + str(op.refusal)} |")
    lines += ["", "| rule family | suites run under the manager |", "|---|---|"]
    for family, why in FAMILIES.items():
        lines.append(f"| {family} | {'yes' if why is None else 'no - ' + why} |")
    return "\n".join(lines) + "\n"


BEGIN = "<!-- managed capability table: generated by `python scripts/capability_table.py`; do not edit -->"
END = "<!-- end of the managed capability table -->"


def with_table(doc: str) -> str:
    """``doc`` (docs/ha-managers.md, HAM family) with the text between :data:`BEGIN` and :data:`END` replaced by
    :func:`markdown`
    (ValueError when the markers are missing)."""
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise ValueError("the document has no managed capability-table markers")
    return pattern.sub(lambda _: f"{BEGIN}\n{markdown()}{END}", doc)
