"""The MIR checkers of an established connection (RULEBOOK, seeds 000/001): MIR-11 reconnect is not
automatic, MIR-12 redirection is transparent in naming. Built on
:mod:`~harness.rules.mirroring.scaffold`; see ``docs/mirroring.md``."""

from __future__ import annotations

import math
from typing import Any

from harness.history.core import Event
from harness.rules.mirroring.model import (
    END_TYPES,
    Open,
    event_ids,
    matches,
)
from harness.rules.mirroring.scaffold import (
    MirCall,
    MirContext,
    mir_rule,
    open_value,
    seconds,
)
from harness.rules.verdict import Verdict


def _reconnect(ctx: MirContext, closed: Event, expected: str) -> Verdict | None:
    """MIR-11: a violation if a named partner accepted a connection after the break outside any open."""
    names = (*ctx.params.initial, *ctx.params.failover)
    windows = [(o.t0, o.end.t if o.end else math.inf) for o in ctx.all_opens]
    for e in ctx.events:
        if e.type == "conn.accepted" and e.t > closed.t and any(matches(n, event_ids(e)) for n in names):
            if not any(lo <= e.t <= hi for lo, hi in windows):
                return ctx.verdict(
                    False,
                    expected,
                    f"connection to {e.get('proxy')} accepted {seconds(e.t - closed.t)} after the break "
                    "outside any open: an automatic reconnect",
                    (closed.index, e.index),
                )
    return None


def _next_op_after_break(ctx: MirContext, o: Open, closed: Event, expected: str) -> Verdict | tuple[int, int] | None:
    """MIR-11: the process's first operation invoked after the break: a violation if it succeeded,
    its ``(break, end)`` evidence if it failed, None if there is none before the next open."""
    assert o.end is not None
    tb = closed.t
    later = [
        e
        for e in ctx.events
        if e.get("process") == o.process and e.t >= o.end.t and e.type.startswith("op.") and e.index != o.end.index
    ]
    for e in later:
        if e.type == "op.invoke" and e.get("f") == "open" and e.t >= tb:
            return None
        if e.type in END_TYPES and e.get("f") not in ("open", "close") and e.t >= tb:
            inv = next((x for x in later if x.type == "op.invoke" and x.get("op_id") == e.get("op_id")), None)
            if inv is None or inv.t < tb:
                continue  # in flight when the connection broke: either outcome is possible
            if e.type == "op.ok":
                return ctx.verdict(
                    False,
                    expected,
                    f"{e.get('f')} op {e.get('op_id')} succeeded {seconds(e.t - tb)} after the "
                    "connection broke, without a new open",
                    (closed.index, inv.index, e.index),
                )
            return closed.index, e.index
    return None


def _broken_connection_not_reopened(ctx: MirContext, o: Open, expected: str) -> Verdict | tuple[int, int] | None:
    """MIR-11 on one successful open whose connection broke: its violation, else the evidence of the
    error the break surfaced as (None when the open's connection did not break or was not judged)."""
    if not o.ok or o.end is None or not o.attempts or o.attempts[-1].source != "proxy":
        return None
    conn = o.attempts[-1]
    closed = next(
        (
            e
            for e in ctx.events
            if e.type == "conn.closed" and e.get("proxy") == conn.proxy and e.get("conn_id") == conn.conn_id
        ),
        None,
    )
    if closed is None or closed.get("by") == "client":
        return None
    violation = _reconnect(ctx, closed, expected)
    if violation is not None:
        return violation
    end_t = o.end.t
    if any(
        p is not o and p.process == o.process and p.ok and p.end is not None and end_t < p.end.t <= closed.t
        for p in ctx.all_opens
    ):
        return None  # the process opened another connection before this one broke: ops are ambiguous
    return _next_op_after_break(ctx, o, closed, expected)


@mir_rule("MIR-11", needs=("opens", "proxy", "ops"))
def check_no_automatic_reconnect(call: MirCall) -> Verdict:
    """MIR-11 reconnect is not automatic: when an established connection breaks (its proxy connection
    is closed by the server side, ``by`` ≠ ``client``), the process's next operation fails
    (``op.fail``/``op.info``) unless the application opened again first, and no new connection to a
    partner is accepted outside an open. Exercised by a break followed by an operation."""
    ctx = call.context()
    expected = "a broken connection surfaces as an error; nothing reconnects without a new open"
    judged: list[int] = []
    for o in ctx.usable:
        seen = _broken_connection_not_reopened(ctx, o, expected)
        if isinstance(seen, Verdict):
            return seen
        if seen is not None:
            judged.extend(seen)
    return ctx.tallied(
        judged,
        expected,
        unknown="no established connection broke before an operation of its process",
        kept=f"{len(judged) // 2} break(s) surfaced as an error; no automatic reconnect",
        evidence=judged,
    )


def _norm_name(text: Any) -> str:
    return " ".join(str(text).split()).lower()


@mir_rule("MIR-12", needs=("opens", "proxy"), need_failover="failover")
def check_redirect_keeps_initial_name(call: MirCall, *, initial_name: str | None = None) -> Verdict:
    """MIR-12 redirection is transparent in naming: a connection opened on the failover partner
    presents itself as a connection to the initial partner name - the ``op.ok`` value's
    ``presented_server`` equals ``initial_name`` (default: the open's ``op.invoke`` value
    ``initial``). Exercised by a redirected open."""
    ctx = call.context()
    expected = "a redirected connection presents the initial partner's name"
    judged: list[int] = []
    for o in ctx.usable:
        if not o.ok or not o.attempts or o.end is None or o.attempts[-1].role != "failover":
            continue
        want = initial_name if initial_name is not None else open_value(o).get("initial")
        value = o.end.get("value")
        shown = value.get("presented_server") if isinstance(value, dict) else None
        if want is None or shown is None:
            continue
        ev = (o.invoke.index, o.end.index, *o.attempts[-1].events)
        if _norm_name(shown) != _norm_name(want):
            return ctx.verdict(
                False, expected, f"open redirected to the failover partner presents {shown!r}; expected {want!r}", ev
            )
        judged.extend(ev)
    return ctx.tallied(
        judged,
        expected,
        unknown="no redirected open with a presented_server in its op.ok value",
        kept="redirected open(s) presented the initial partner name",
        evidence=judged,
    )
