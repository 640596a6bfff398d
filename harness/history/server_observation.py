"""The server's side of one ``ham.probe`` event (docs/events.md; RULEBOOK HAM): which node, when
(``t`` to ``t_end``, time.monotonic()), and what its PostgreSQL server said - ``pg_is_in_recovery()``,
whether the harness's write was committed and acknowledged, its timeline. The Patroni and
pg_auto_failover probes (:mod:`harness.topology`) add what their manager says; the HAM checkers'
model (:mod:`harness.rules.ham.model`) reads the same fields back from the history. Plain data, so
both sides can share it. One job: the fields every manager's observation has."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ServerObservation:
    """One observation of ``node``'s server between ``t`` and ``t_end`` (HAM-1/3/5/6 evidence)."""

    node: str
    t: float
    t_end: float
    recovery: bool | None
    write: str | None
    timeline: int | None

    @property
    def role(self) -> str:
        """``primary``, ``replica`` (in recovery) or ``down`` (no answer), as the server says (HAM-1)."""
        return {True: "replica", False: "primary", None: "down"}[self.recovery]

    def fields(self) -> dict[str, Any]:
        """The ``ham.probe`` event's fields (``t`` is the event's own)."""
        return {k: v for k, v in asdict(self).items() if k != "t"}
