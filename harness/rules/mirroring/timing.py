"""The MIR checkers of when a client gives up and retries (RULEBOOK, seeds 000/001): MIR-5 retry time
schedule, MIR-6 truncated last round, MIR-7 delays between rounds, MIR-8 no timeout no end, MIR-13
shutdown aborts at once. Built on :mod:`~harness.rules.mirroring.scaffold`; see ``docs/mirroring.md``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.mirroring.model import (
    DEFAULT_DELAYS,
    DEFAULT_FAST_RESET,
    FAST_OUTCOMES,
    SHUTDOWN_FAULTS,
    Attempt,
    Open,
    end_time,
    lost_time,
    matches,
    retry_delay,
    retry_time,
    same_partner,
)
from harness.rules.mirroring.scaffold import (
    MirCall,
    MirContext,
    alternation_violation,
    mir_rule,
    seconds,
)
from harness.rules.verdict import UNKNOWN, Verdict


def _attempt_retry_time(
    ctx: MirContext, o: Open, a: Attempt, base: float, expected: str
) -> Verdict | Literal["not judged"] | None:
    """MIR-5 on one attempt: the violation it shows, if any; ``"not judged"`` when it is off by more
    than ``tolerance`` but by no more than ``tolerance`` + the time the harness lost meanwhile
    (:func:`~harness.rules.mirroring.model.lost_time`: then the harness cannot tell)."""
    tol, lt, hz = ctx.params.tolerance, ctx.params.login_timeout, ctx.horizon
    deadline = o.t0 + lt if lt is not None else math.inf
    rt = retry_time(a.round, base)
    allowed = max(0.0, min(rt, deadline - a.start))
    held = end_time(a, o, hz) - a.start
    what = "took" if a.outcome == "opened" else "held"
    exp = (
        f"expected {seconds(allowed)} ±{tol:.3f}"
        if a.outcome == "timeout"
        else f"expected at most {seconds(allowed)} +{tol:.3f}"
    )
    if allowed < rt - 1e-9:
        exp += f" (retry time {seconds(rt)} cut by the login timeout)"
    timing = {"retry_time": rt, "allowed": allowed, "held": held}
    off = abs(held - allowed) if a.outcome == "timeout" else held - allowed
    lost = lost_time(ctx.events, a.start, a.start + held, tol) if off > tol else 0.0
    if tol < off <= tol + lost and (a.end is not None or a.outcome == "opened"):
        return "not judged"
    if lost:
        exp += f" + {seconds(lost)} the harness lost meanwhile (harness.stall)"
        tol += lost
    if a.outcome == "timeout" and abs(held - allowed) > tol:
        return ctx.verdict(
            False, expected, f"{a.label()} held {seconds(held)}; {exp}", (o.invoke.index, *a.events), **timing
        )
    if held > allowed + tol and (a.end is not None or a.outcome == "opened" or hz > a.start + allowed + tol):
        return ctx.verdict(
            False,
            expected,
            f"{a.label()} {what} {seconds(held)} ({a.outcome}); {exp}",
            (o.invoke.index, *a.events, *((o.end.index,) if a.outcome == "opened" else ())),
            **timing,
        )
    return None


@mir_rule("MIR-5", needs=("opens", "proxy", "refused"), tolerance=True, login_timeout=True, need_failover="failover")
def check_retry_time_schedule(call: MirCall, *, retry_base: float | None = None) -> Verdict:
    """MIR-5 retry time schedule: attempt ``k`` (round ``r = ceil(k/2)``) is abandoned at
    ``RetryTime = r × 0.08 × LT`` (± ``tolerance``), never held longer; an attempt that fails or opens
    earlier must do so within its retry time. The last attempt may be cut to the time left before
    the login timeout (MIR-6).

    ``retry_base`` replaces LT as the base of the schedule for a client with no login timeout.
    Exercised when some attempt ran into its retry time (or a violation is seen).

    Time the harness lost (the stall monitor's ``harness.stall`` events during the attempt, see
    :func:`~harness.rules.mirroring.model.lost_time`) widens that attempt's tolerance by as much: an
    attempt off by more than ``tolerance`` but no more than ``tolerance`` + lost is not judged
    (``details["not_judged"]``; unknown if no attempt is left), one off by more is a violation."""
    params = call.params
    base = params.login_timeout if params.login_timeout is not None else retry_base
    if base is None:
        raise ConfigError("MIR-5 needs login_timeout (or retry_base for a client with no login timeout)")
    ctx = call.context()
    expected = (
        f"attempt in round r held at most r × 0.08 × {base:g} s (±{params.tolerance:.3f}), abandoned at that time"
    )
    timed: list[Attempt] = []
    not_judged: list[int] = []
    for o in ctx.usable:
        for a in o.attempts:
            violation = _attempt_retry_time(ctx, o, a, base, expected)
            if isinstance(violation, Verdict):
                return violation
            if violation == "not judged":
                not_judged.append(a.events[0])
            elif a.outcome == "timeout":
                timed.append(a)
    return ctx.tallied(
        timed,
        expected,
        unknown=(f"{len(not_judged)} attempt(s) off by no more than the time the harness lost meanwhile"
                 if not_judged else "no attempt ran into its retry time (schedule not exercised)"),
        unknown_evidence=ctx.invokes + not_judged,
        not_judged=not_judged,
        kept=lambda: (
            f"{len(timed)} attempt(s) abandoned on schedule; last: {timed[-1].label()} held "
            f"{seconds(timed[-1].duration or 0)}"
        ),
        evidence=[i for x in timed for i in x.events],
    )


def _open_last_round_truncated(ctx: MirContext, o: Open, lt: float,
                               expected: str) -> Verdict | Literal["not judged"] | None:
    """MIR-6 on one open: the violation it shows, if any; ``"not judged"`` when it ends past the
    login timeout by more than ``tolerance`` but by no more than ``tolerance`` + the time the
    harness lost from the login timeout on (:func:`~harness.rules.mirroring.model.lost_time`)."""
    tol, hz = ctx.params.tolerance, ctx.horizon
    deadline = o.t0 + lt
    last_t = max([o.end.t if o.end is not None else hz, *(end_time(a, o, hz) for a in o.attempts)])
    if tol < last_t - deadline <= tol + lost_time(ctx.events, deadline, last_t, tol):
        return "not judged"
    for a in o.attempts:
        opened = a.outcome == "opened" and o.end is not None
        end = o.end.t if opened and o.end is not None else end_time(a, o, hz)
        if end > deadline + tol and (a.end is not None or opened or hz > deadline + tol):
            what = "opened" if opened else "ended"
            return ctx.verdict(
                False,
                expected,
                f"{a.label()} {what} at +{seconds(o.rel(end))}, {seconds(end - deadline)} past the login timeout",
                (o.invoke.index, *a.events, *((o.end.index,) if opened and o.end is not None else ())),
            )
    if o.end is not None and o.end.t > deadline + tol:
        what = {"op.ok": "succeeded", "op.fail": "failed"}.get(o.end.type, "ended")
        return ctx.verdict(
            False,
            expected,
            f"open at event {o.invoke.index} {what} at +{seconds(o.rel(o.end.t))}, "
            f"{seconds(o.end.t - deadline)} past the login timeout",
            (o.invoke.index, o.end.index),
        )
    last = o.attempts[-1] if o.failed and o.attempts else None
    if (last is not None and last.outcome == "timeout" and last.end is not None
            and tol < deadline - last.end <= tol + lost_time(ctx.events, last.start, deadline, tol)):
        return "not judged"  # abandoned early by no more than the time the harness lost meanwhile
    if last is not None and last.outcome == "timeout" and last.end is not None and abs(last.end - deadline) > tol:
        return ctx.verdict(
            False,
            expected,
            f"{last.label()} was abandoned at +{seconds(o.rel(last.end))}; expected it "
            f"truncated to end at the login timeout +{seconds(lt)} ±{tol:.3f}",
            (o.invoke.index, o.end.index, *last.events),
        )
    return None


@mir_rule(
    "MIR-6",
    needs=("opens", "proxy", "refused"),
    tolerance=True,
    login_timeout=True,
    need_failover="failover",
    need_login_timeout=True,
)
def check_truncated_last_round(call: MirCall) -> Verdict:
    """MIR-6 truncated last round: no attempt extends past the login timeout and a failed open ends
    by ``LT + tolerance``; when the last attempt of a failed open was abandoned (timeout), it was cut
    to end at the login timeout (± ``tolerance``) rather than the client giving up with time left.

    Exercised by a failed open (the client ran into its login timeout). An open past the login
    timeout (or a last attempt abandoned early) by more than ``tolerance`` but no more than
    ``tolerance`` + the time the harness lost then (``harness.stall``,
    :func:`~harness.rules.mirroring.model.lost_time`) is not judged (``details["not_judged"]``)."""
    lt = call.params.login_timeout
    assert lt is not None  # need_login_timeout
    ctx = call.context()
    expected = (
        f"no attempt past the login timeout {seconds(lt)} (+{ctx.params.tolerance:.3f}); "
        "the last attempt truncated to it"
    )
    exercised: list[Open] = []
    not_judged: list[int] = []
    for o in ctx.usable:
        violation = _open_last_round_truncated(ctx, o, lt, expected)
        if isinstance(violation, Verdict):
            return violation
        if violation == "not judged":
            not_judged.append(o.invoke.index)
        elif o.failed and o.attempts:
            exercised.append(o)
    return ctx.tallied(
        exercised,
        expected,
        unknown=(f"{len(not_judged)} open(s) past the login timeout by no more than the time the harness lost then"
                 if not_judged else "no open ran into its login timeout (rule not exercised)"),
        not_judged=not_judged,
        kept=lambda: (
            f"{len(exercised)} failed open(s) stayed within the login timeout; last failed at "
            f"+{seconds(exercised[-1].rel(exercised[-1].end.t))} after {len(exercised[-1].attempts)} attempt(s)"
        ),
        evidence=[
            i for x in exercised for i in (x.invoke.index, x.end.index, *(x.attempts[-1].events if x.attempts else ()))
        ],
    )


@dataclass
class _RoundDelayTally:
    """What MIR-7 judged so far: evidence of the delays on schedule and the rounds it could not judge."""

    judged: list[int]
    not_judged: list[int]
    delays: int = 0
    rounds: list[int] = field(default_factory=list)  # the rounds whose following delay was judged


def _fast_only_on_the_proxys_clock(ctx: MirContext, a: Attempt, fast_reset: float) -> bool:
    """MIR-7 (interpretation, RULEBOOK): a reset the fault proxy saw end within ``fast_reset`` but
    which the client, delayed by the time the harness lost from its start until ``fast_reset`` after
    its end (:func:`~harness.rules.mirroring.model.lost_time`), may have measured as slower than
    ``fast_reset``: whether its round was fast cannot be told from outside, so it is not judged."""
    if a.outcome != "reset" or a.duration is None or a.end is None or a.duration > fast_reset:
        return False
    return a.duration + lost_time(ctx.events, a.start, a.end + fast_reset, 0.0) > fast_reset


def _rounds_retry_delays(
    ctx: MirContext, o: Open, delays: tuple[float, ...], fast_reset: float, expected: str, tally: _RoundDelayTally
) -> Verdict | None:
    """MIR-7 on the rounds of one open: the violation they show, if any (else ``tally`` is updated).
    A gap off by more than ``tolerance`` but by no more than ``tolerance`` + the time the harness lost
    meanwhile (:func:`~harness.rules.mirroring.model.lost_time`) is not judged: the harness cannot tell."""
    tol = ctx.params.tolerance
    rounds: dict[int, list[Attempt]] = {}
    for a in o.attempts:
        rounds.setdefault(a.round, []).append(a)
    for r, atts in sorted(rounds.items()):
        if len(atts) == 2 and atts[0].end is not None:
            gap = atts[1].start - atts[0].end
            if tol < gap <= tol + lost_time(ctx.events, atts[0].end, atts[1].start, tol):
                tally.not_judged.append(atts[1].events[0])
            elif gap > tol:
                return ctx.verdict(
                    False,
                    expected,
                    f"{seconds(gap)} between {atts[0].label()} and {atts[1].label()}; expected "
                    f"no delay inside a round (≤ {tol:.3f})",
                    (*atts[0].events, *atts[1].events),
                )
        nxt = rounds.get(r + 1)
        if not nxt or len(atts) < 2 or atts[-1].end is None:
            continue
        gap = nxt[0].start - atts[-1].end
        ev = (*atts[-1].events, *nxt[0].events)
        fast = all(
            a.outcome in FAST_OUTCOMES or (a.outcome == "reset" and a.duration is not None and a.duration <= fast_reset)
            for a in atts
        )
        lost = lost_time(ctx.events, atts[-1].end, nxt[0].start, tol)
        if fast and any(_fast_only_on_the_proxys_clock(ctx, a, fast_reset) for a in atts):
            tally.not_judged.append(atts[-1].events[0])
            continue
        if fast:
            want = retry_delay(r, delays)
            if tol < abs(gap - want) <= tol + lost:
                tally.not_judged.append(atts[-1].events[0])
                continue
            if abs(gap - want) > tol:
                return ctx.verdict(
                    False,
                    expected,
                    f"delay after round {r} ({'/'.join(a.outcome for a in atts)}) was "
                    f"{seconds(gap)}; expected {seconds(want)} ±{tol:.3f}",
                    ev,
                )
            tally.judged.extend(ev)
            tally.delays += 1
            tally.rounds.append(r)
        elif {a.outcome for a in atts} == {"timeout"}:
            if tol < gap <= tol + lost:
                tally.not_judged.append(atts[-1].events[0])
            elif gap > tol:
                return ctx.verdict(
                    False,
                    expected,
                    f"delay after round {r} (timed out) was {seconds(gap)}; expected none (≤ {tol:.3f})",
                    ev,
                )
        else:
            tally.not_judged.append(atts[-1].events[0])
    return None


@mir_rule("MIR-7", needs=("opens", "proxy", "refused"), tolerance=True, need_failover="failover", late=("fast_reset",))
def check_partner_retry_delays(
    call: MirCall,
    *,
    delays: Sequence[float] = DEFAULT_DELAYS,
    fast_reset: float = DEFAULT_FAST_RESET,
) -> Verdict:
    """MIR-7 retry delays: after round ``r`` whose every attempt ended in a fast refusal or an
    inactive-partner answer, the next round starts ``delays[min(r, 5) - 1]`` later (100, 200, 400,
    800 ms, then 1 s; ± ``tolerance``); after a round whose attempts all timed out the next round
    starts at once (≤ ``tolerance``); inside a round there is no delay.

    **(interpretation, RULEBOOK)** "fast refusal" includes a ``reset`` that ended within
    ``fast_reset`` seconds (default 0.050) - a connection accepted and closed at once without an
    answer, which is how a refused connect looks through a fault proxy whose server is down; a
    slower reset (e.g. a timeout toxic closing after 2 s) is neither fast nor a timeout; the delay
    is indexed by the round number; rounds mixing a timeout with fast
    failures (or holding an ``error``/``held`` attempt) are not judged and are listed in
    ``details["not_judged"]``. Exercised by a fast round followed by another round.

    Time the harness lost during a gap (``harness.stall`` events,
    :func:`~harness.rules.mirroring.model.lost_time`) widens that gap's tolerance by as much: a gap
    off by more than ``tolerance`` but no more than ``tolerance`` + lost is not judged (listed in
    ``details["not_judged"]``), one off by more is a violation."""
    schedule = tuple(float(d) for d in delays)
    if not schedule or any(d < 0 for d in schedule):
        raise ConfigError("MIR-7: delays must be a non-empty list of seconds >= 0")
    ctx = call.context()
    expected = (
        f"delay after a fast round r = {'/'.join(f'{d * 1000:g}' for d in schedule)} ms "
        f"(±{ctx.params.tolerance:.3f}); "
        "none after a timed-out round or inside a round"
    )
    tally = _RoundDelayTally([], [])
    for o in ctx.usable:
        violation = _rounds_retry_delays(ctx, o, schedule, fast_reset, expected, tally)
        if violation is not None:
            return violation
    rounds = {"delayed_rounds": sorted(set(tally.rounds))} if tally.judged else {}  # only a kept verdict lists them
    return ctx.tallied(
        tally.judged,
        expected,
        unknown="no round of fast refusals / inactive answers followed by another round",
        kept=f"{tally.delays} delay(s) after fast rounds on schedule",
        evidence=tally.judged,
        not_judged=tally.not_judged,
        **rounds,
    )


def _open_never_ends_without_timeout(ctx: MirContext, o: Open, window: float,
                                     expected: str) -> Verdict | list[Attempt] | None:
    """MIR-8 on one open: its violation, else the attempts inside the window, or None when the open
    was not observed for the whole window without connecting."""
    stop = o.t0 + window
    if o.end is not None and o.end.t <= stop and (o.aborted or o.end.type == "op.info"):
        return None  # the application ended it within the window: not observed long enough
    if o.end is not None and o.end.type != "op.ok" and o.end.t <= stop:
        return ctx.verdict(
            False,
            expected,
            f"open at event {o.invoke.index} gave up after {seconds(o.rel(o.end.t))} with no "
            f"login timeout ({o.end.type}: {str(o.end.get('error'))[:60]})",
            (o.invoke.index, o.end.index),
        )
    if (o.ok and o.end is not None and o.end.t <= stop) or ctx.horizon < stop:
        return None
    inside = [a for a in o.attempts if a.start <= stop]
    bad = alternation_violation(inside)
    if bad is not None:
        a, want = bad
        return ctx.verdict(
            False, expected, f"{a.label()} went to the {a.role} partner; expected {want}", (o.invoke.index, *a.events)
        )
    late = [a for a in inside if a.start >= o.t0 + window / 2]
    for role in ("initial", "failover"):
        if not any(a.role == role for a in late):
            last = [a for a in inside if a.role == role]
            when = f"last at +{seconds(o.rel(last[-1].start))}" if last else "none at all"
            return ctx.verdict(
                False,
                expected,
                f"no attempt to the {role} partner in the second half of the window ({when})",
                (o.invoke.index, *(last[-1].events if last else ())),
            )
    return inside


@mir_rule("MIR-8", needs=("opens", "proxy", "refused"), need_failover="failover")
def check_no_timeout_no_end(
    call: MirCall, *, window: float | None = None, login_timeout: float | None = None
) -> Verdict:
    """MIR-8 no timeout, no end: with both partners and no login timeout, an open that cannot connect
    is still alternating after ``window`` seconds: it has not failed, its attempts alternate, and
    both partners got an attempt in the second half of the window. The history must reach
    ``invoke + window`` (else unknown)."""
    if login_timeout is not None:
        raise ConfigError("MIR-8 is about a client with no login timeout; pass login_timeout=None")
    if window is None or not float(window) > 0:
        raise ConfigError("MIR-8 needs window: the observation window in seconds (> 0)")
    window = float(window)
    ctx = call.context()
    expected = f"still alternating initial/failover {seconds(window)} after the open began; no failure"
    judged: list[tuple[Open, list[Attempt]]] = []
    for o in ctx.usable:
        seen = _open_never_ends_without_timeout(ctx, o, window, expected)
        if isinstance(seen, Verdict):
            return seen
        if seen is not None:
            judged.append((o, seen))
    o, inside = judged[-1] if judged else (None, [])
    return ctx.tallied(
        judged,
        expected,
        unknown="no open observed for the whole window without connecting",
        kept=lambda: (
            f"{len(inside)} attempts alternating within {seconds(window)}; last started at "
            f"+{seconds(o.rel(inside[-1].start))}"
        ),
        evidence=[i for a in inside[-4:] for i in a.events],
    )


def _shutdowns(ev: Iterable[Event]) -> list[tuple[float, str, int]]:
    """MIR-13: ``(time, node, event index)`` of each server shutdown in the history."""
    out = []
    for e in ev:
        if e.type == "node.stop" and e.get("node"):
            out.append((e.t - float(e.get("seconds") or 0.0), str(e.get("node")), e.index))
        elif e.type == "node.kill" and e.get("node"):
            out.append((e.t, str(e.get("node")), e.index))
        elif e.type == "fault.start" and e.get("fault") in SHUTDOWN_FAULTS and e.get("node"):
            out.append((e.t, str(e.get("node")), e.index))
    return out


def _pending_at(ctx: MirContext, a: Attempt, ts: float, node: str) -> bool:
    """MIR-13: whether ``a`` went to ``node`` and was still pending when it shut down at ``ts``."""
    names = ctx.params.initial if a.role == "initial" else ctx.params.failover
    if not matches(node, a.ids) and not any(same_partner(node, n) for n in names):
        return False
    return a.start <= ts and (a.end is None or a.end >= ts - ctx.params.tolerance)


def _attempt_aborted_at_shutdown(
    ctx: MirContext, o: Open, a: Attempt, stop: tuple[float, str, int], delays: Sequence[float], expected: str
) -> Verdict | Literal["judged", "not judged", "skipped"]:
    """MIR-13 on one attempt pending at a shutdown: its violation, else whether it was judged, could
    not be judged (still held, or the server never closed it) or has no next step to judge."""
    tol = ctx.params.tolerance
    ts, _, sidx = stop
    if a.end is None:
        return "not judged"
    if a.source == "proxy" and a.closed_by == "client" and a.bytes_down == 0:
        return "not judged"  # the server never closed it: not a shutdown abort
    # (closed by the client after the server answered - e.g. "the database system is
    # shutting down" - is the server ending the attempt: judged like a server close)
    if a.end - ts > tol and a.outcome == "timeout":
        return ctx.verdict(
            False,
            expected,
            f"{a.label()} pending at the shutdown was held {seconds(a.end - ts)} longer (waited out its retry time)",
            (sidx, *a.events),
        )
    nxt = next((b for b in o.attempts if b.n == a.n + 1), None)
    step_t = nxt.start if nxt else (o.end.t if o.end else None)
    if step_t is None:
        return "skipped"
    allow = retry_delay(a.round, delays) if a.n % 2 == 0 else 0.0
    if step_t - a.end > allow + tol:
        step = f"attempt {a.n + 1}" if nxt else "the end of the open"
        return ctx.verdict(
            False,
            expected,
            f"{a.label()} was closed by the shutdown at +{seconds(o.rel(a.end))} but "
            f"{step} came {seconds(step_t - a.end)} later; expected ≤ {seconds(allow)} +{tol:.3f}",
            (sidx, *a.events, *((nxt.events[0],) if nxt else (o.end.index,))),
        )
    return "judged"


@mir_rule("MIR-13", needs=("opens", "proxy", "refused", "shutdowns"), tolerance=True)
def check_shutdown_aborts_attempts(
    call: MirCall,
    *,
    login_timeout: float | None = None,
    delays: Sequence[float] = DEFAULT_DELAYS,
) -> Verdict:
    """MIR-13 shutdown aborts at once: an attempt pending on a partner when that partner's server is
    shut down (``node.stop``/``node.kill``/``fault.start`` stop|kill|shutdown) ends when the server
    closes it, and the client's next step (next attempt, or the end of the open) follows within
    ``tolerance`` (plus the MIR-7 delay if the attempt closed a round) - never after waiting out the
    retry time."""
    # login_timeout is accepted like the other timing rules take it (suites pass one block) and unused.
    schedule = tuple(float(d) for d in delays)
    ctx = call.context()
    expected = (
        f"a pending attempt is abandoned as soon as the server shuts down (next step ≤ {ctx.params.tolerance:.3f} s)"
    )
    stops = _shutdowns(ctx.events)
    if not stops:
        return ctx.verdict(UNKNOWN, expected, "no node.stop / node.kill / stop fault in the history", [])
    judged: list[int] = []
    not_judged: list[int] = []
    for o in ctx.usable:
        for a in o.attempts:
            for stop in stops:
                if a.outcome == "opened" or not _pending_at(ctx, a, stop[0], stop[1]):
                    continue
                seen = _attempt_aborted_at_shutdown(ctx, o, a, stop, schedule, expected)
                if isinstance(seen, Verdict):
                    return seen
                if seen == "judged":
                    judged.extend((stop[2], *a.events))
                elif seen == "not judged":
                    not_judged.append(a.events[0])
    return ctx.tallied(
        judged,
        expected,
        unknown="no attempt was pending when a partner shut down",
        unknown_evidence=[s for _, _, s in stops],
        kept="attempt(s) pending at the shutdown were abandoned at once",
        evidence=judged,
        not_judged=not_judged,
    )
