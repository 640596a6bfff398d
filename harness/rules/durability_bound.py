"""DUR-1 in asynchronous mode under an HA manager: the loss, measured, against the manager's
documented bound (docs/ha-managers.md "Durability over manager failovers").

Patroni documents for asynchronous mode ("Replication modes", "Asynchronous mode durability") that
the data lost on a failover is bounded, worst case, by ``maximum_lag_on_failover`` bytes of
transaction log plus what was written in the last ``ttl`` seconds. The checker turns that into
writes: for each fault the manager answered (``ham.op`` start of ``kill``, ``failover``,
``switchover``, ``kill-manager`` or ``partition-dcs``), the lost acknowledged writes that were
acknowledged before it ended (its ``ham.op`` end: a write acknowledged while the operation ran, before
the kill landed, is its) and after the previous fault ended are charged to it; those acknowledged from
``ttl`` seconds before the fault started (closed interval: a write at exactly ``start - ttl`` is
inside) until it ended are within the bound, the others may number at most
``maximum_lag_on_failover / wal_bytes_per_write``.
A lost write acknowledged after the last fault has no failover to excuse it (violated). Without the
DUR-1 tally (no final read) or without a positive ``wal_bytes_per_write`` the verdict is unknown.

Pure: a function of the history and the recorded settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.history.core import Event
from harness.rules.durability import check_no_acknowledged_write_lost
from harness.rules.verdict import UNKNOWN, Verdict

RULE_ID = "DUR-1"
#: The manager operations after which an asynchronous failover may lose writes.
FAULT_OPS = ("kill", "failover", "switchover", "kill-manager", "partition-dcs")


def fault_instants(events: Sequence[Event]) -> list[Event]:
    """The ``ham.op`` start events of the faults a manager answered, in history order (DUR-1)."""
    return [e for e in sorted(events, key=lambda e: e.index)
            if e.type == "ham.op" and e.get("phase") == "start" and e.get("op") in FAULT_OPS]


def fault_spans(events: Sequence[Event]) -> list[tuple[Event, Event | None]]:
    """DUR-1: each fault's ``ham.op`` start with its end (the next ``end`` of the same op), or None when the
    history has no end for it: a write acknowledged while the operation ran (before the kill signal
    landed) belongs to that fault."""
    ordered = sorted(events, key=lambda e: e.index)
    spans = []
    position = {e.index: i for i, e in enumerate(ordered)}
    for start in fault_instants(ordered):
        end = next((e for e in ordered[position[start.index] + 1:] if e.type == "ham.op" and e.get("phase") == "end"
                    and e.get("op") == start.get("op")), None)
        spans.append((start, end))
    return spans


def check_async_loss_within_documented_bound(events: Sequence[Event], *, ttl_s: float, max_lag_bytes: int,
                                             wal_bytes_per_write: float | None) -> Verdict:
    """DUR-1 (asynchronous mode, finding): every acknowledged write lost is excused by Patroni's
    documented bound - ``maximum_lag_on_failover`` bytes of WAL plus the last ``ttl`` seconds of
    writes before the fault that lost it (see the module docstring). ``details`` carries the
    figures per fault: lost, lost inside the ttl window, lost before it, and the WAL allowance."""
    expected = (f"every lost acknowledged write within Patroni's async bound: acknowledged in the last "
                f"ttl = {ttl_s:g} s before a failover, or at most maximum_lag_on_failover = {max_lag_bytes} "
                "bytes of WAL older")
    if not wal_bytes_per_write or wal_bytes_per_write <= 0:
        return Verdict(RULE_ID, UNKNOWN, expected=expected,
                       observed="the WAL bytes per write were not measured: the byte bound cannot be judged")
    tally = check_no_acknowledged_write_lost(list(events), mode="async")
    if tally.valid == UNKNOWN:
        return Verdict(RULE_ID, UNKNOWN, expected=expected, observed=tally.observed, evidence=tally.evidence)
    lost_values = {repr(v) for v in tally.details.get("lost", [])}
    ordered = sorted(events, key=lambda e: e.index)
    lost = [e for e in ordered if e.type == "op.ok" and e.get("f") == "write" and repr(e.get("value")) in lost_values]
    allowance = int(max_lag_bytes // wal_bytes_per_write)
    faults = fault_spans(ordered)
    per_fault: list[dict[str, Any]] = []
    bad: list[Event] = []
    remaining = list(lost)
    previous_index = -1
    for f, end in faults:
        last = end.index if end is not None else f.index
        charged = [w for w in remaining if previous_index < w.index < last]
        remaining = [w for w in remaining if w not in charged]
        inside = [w for w in charged if w.t >= f.t - ttl_s]
        older = [w for w in charged if w not in inside]
        if len(older) > allowance:
            bad += older
        per_fault.append({"op": f.get("op"), "event": f.index, "lost": len(charged), "lost_in_ttl_window": len(inside),
                          "lost_older": len(older), "allowance_writes": allowance})
        previous_index = last
    unexcused = remaining  # acknowledged after the last fault: nothing explains their loss
    bad += unexcused
    details: dict[str, Any] = {"lost_count": len(lost), "acknowledged": tally.details.get("acknowledged"),
                               "faults": per_fault, "unexcused_after_last_fault": [w.get("value") for w in unexcused],
                               "ttl_s": ttl_s, "max_lag_bytes": max_lag_bytes,
                               "wal_bytes_per_write": round(float(wal_bytes_per_write), 1),
                               "allowance_writes": allowance}
    observed = (f"{len(lost)} of {tally.details.get('acknowledged')} acknowledged write(s) lost over "
                f"{len(faults)} failover(s) (most in one: {max((p['lost'] for p in per_fault), default=0)}; "
                f"WAL allowance {allowance} writes at {wal_bytes_per_write:.0f} bytes each)")
    if bad:
        return Verdict(RULE_ID, False, expected=expected, observed=observed + f"; {len(bad)} beyond the bound",
                       evidence=tuple(w.index for w in bad[:50]), details=details)
    return Verdict(RULE_ID, True, expected=expected, observed=observed, evidence=tuple(w.index for w in lost[:50]),
                   details=details)
