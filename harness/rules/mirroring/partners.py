"""The MIR checkers of which partner a client tries (RULEBOOK, seeds 000/001): MIR-1 initial partner
first, MIR-2 database required, MIR-3 no failover partner no alternation, MIR-4 alternation, MIR-9
partner cache update, MIR-10 stale failover partner. Built on :mod:`~harness.rules.mirroring.scaffold`;
see ``docs/mirroring.md``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.mirroring.model import (
    END_TYPES,
    Attempt,
    Open,
    PartnerNames,
    matches,
    ordered,
    partner_names,
    principal_at,
    retry_time,
    role_changes,
    same_partner,
)
from harness.rules.mirroring.scaffold import (
    MirCall,
    MirContext,
    alternation_violation,
    database_missing,
    mir_rule,
    seconds,
)
from harness.rules.verdict import UNKNOWN, Verdict

# ------------------------------------------------------------------------------------------- checkers


@mir_rule("MIR-1", needs=("opens", "proxy", "refused"))
def check_initial_partner_first(call: MirCall) -> Verdict:
    """MIR-1 initial partner first: every open's first attempt goes to the initial partner."""
    ctx = call.context()
    expected = "every open starts with an attempt to the initial partner"
    judged = [o for o in ctx.usable if o.attempts]
    for o in judged:
        first = o.attempts[0]
        if first.role != "initial":
            return ctx.verdict(
                False,
                expected,
                f"open at event {o.invoke.index} started with attempt 1 to the failover "
                f"partner at +{seconds(o.rel(first.start))}",
                (o.invoke.index, *first.events),
            )
    return ctx.tallied(
        judged,
        expected,
        unknown="no open with an observed attempt to a named partner",
        kept=f"{len(judged)} open(s), each started with the initial partner",
        evidence=[i for o in judged for i in (o.invoke.index, *o.attempts[0].events)],
    )


@mir_rule("MIR-2", needs=("opens", "proxy", "refused"), need_initial=False)
def check_database_required(call: MirCall) -> Verdict:
    """MIR-2 database required: an open whose connection string has no database fails (``op.fail``)
    without any connection attempt.

    The open's ``op.invoke`` ``value`` must carry ``database`` or ``connstring`` (the client adapters
    of this package record both). Attempts are those to the named partners; without partner names,
    any ``conn.accepted`` inside the open's window and any client ``attempt.start`` count."""
    ctx = call.context()
    expected = "an open without a database name fails at once, with no connection attempt"
    named = bool(ctx.params.initial or ctx.params.failover)
    judged = []
    for o in ctx.opens:
        if database_missing(o) is not True or o.end is None:
            continue
        tries = [a.events[0] for a in o.attempts]
        if not named:
            tries += [
                e.index
                for e in ctx.events
                if e.type in ("conn.accepted", "attempt.start")
                and o.t0 <= e.t <= o.end.t
                and (e.type == "conn.accepted" or e.get("process") == o.process)
            ]
        if o.end.type != "op.fail":
            return ctx.verdict(
                False,
                expected,
                f"open at event {o.invoke.index} without a database ended {o.end.type}",
                (o.invoke.index, o.end.index, *tries),
            )
        if tries:
            return ctx.verdict(
                False,
                expected,
                f"open at event {o.invoke.index} without a database made {len(set(tries))} "
                "connection attempt(s) before failing",
                (o.invoke.index, *tries),
            )
        if o.unobserved:
            continue  # refused connects nobody saw: "no attempt" would be a guess (OBS-1)
        judged.append(o)
    return ctx.tallied(
        judged,
        expected,
        unknown="no finished open without a database in the history",
        unknown_evidence=[],
        kept=lambda: (
            f"{len(judged)} open(s) without a database failed with no attempt "
            f"(error: {str(judged[0].end.get('error'))[:80]!r})"
        ),
        evidence=[i for o in judged for i in (o.invoke.index, o.end.index)],
    )


@mir_rule(
    "MIR-3",
    needs=("opens", "proxy", "refused"),
    tolerance=True,
    login_timeout=True,
    need_failover="failover (the mirror the client was not told about)",
)
def check_no_failover_partner_no_alternation(call: MirCall) -> Verdict:
    """MIR-3 no failover partner, no alternation: the client (given no failover partner) only ever
    tries the initial partner and fails no later than the login timeout.

    ``failover`` names the partner that was NOT in the connection string (the mirror): no attempt may
    reach it. Exercised when some attempt to the initial partner did not open."""
    ctx = call.context(rounds=False)
    tol, lt = ctx.params.tolerance, ctx.params.login_timeout
    expected = "only the initial partner is tried" + (f", and the open fails by {seconds(lt)} ±{tol:.3f}" if lt else "")
    exercised = []
    for o in ctx.usable:
        for a in o.attempts:
            if a.role == "failover":
                return ctx.verdict(
                    False,
                    expected,
                    f"{a.label()} went to the partner not named in the connection string at +{seconds(o.rel(a.start))}",
                    (o.invoke.index, *a.events),
                )
        if lt and o.end is not None and o.end.type != "op.ok" and o.rel(o.end.t) > lt + tol:
            return ctx.verdict(
                False,
                expected,
                f"open at event {o.invoke.index} failed after {seconds(o.rel(o.end.t))}, "
                f"past the login timeout {seconds(lt)}",
                (o.invoke.index, o.end.index),
            )
        if any(a.role == "initial" and a.outcome != "opened" for a in o.attempts):
            exercised.append(o)
    n = sum(len(o.attempts) for o in exercised)
    return ctx.tallied(
        exercised,
        expected,
        unknown="no open with a failed attempt to the initial partner (rule not exercised)",
        kept=f"{len(exercised)} open(s), {n} attempt(s), all to the initial partner",
        evidence=[i for o in exercised for a in o.attempts for i in a.events],
    )


def _alternation_of_attempts(ctx: MirContext, o: Open, expected: str) -> Verdict | None:
    """MIR-4 on the attempt sequence of one (completely observed) open: an attempt off the
    alternation, an open that ended on a partner that is not the principal, or a failed open whose
    last attempt outlived its retry time without the other partner ever being tried."""
    bad = alternation_violation(o.attempts)
    if bad is not None:
        a, want = bad
        seq = ",".join("I" if x.role == "initial" else "F" for x in o.attempts[: a.n])
        return ctx.verdict(
            False,
            expected,
            f"{a.label()} went to the {a.role} partner; expected {want} (sequence {seq})",
            (o.invoke.index, *a.events),
        )
    if o.ok:
        return _alternation_ends_on_open(ctx, o, expected)
    return _gave_up_at_retry_time(ctx, o, expected)


def _alternation_ends_on_open(ctx: MirContext, o: Open, expected: str) -> Verdict | None:
    """MIR-4 **(interpretation, docs/mirroring.md)**: alternation ends when a connection opens *on the
    principal*; a successful open whose connection stays on a node that the history names as not the
    principal (a readable standby) stopped alternating too early. Not judged when the roles are not
    in the history or changed during the opened attempt."""
    if o.end is None or not o.attempts or o.attempts[-1].node is None:
        return None
    last = o.attempts[-1]
    principal = principal_at(ctx.events, last.start)
    if principal is None or principal == last.node or role_changes(ctx.events, last.start, o.end.t):
        return None
    return ctx.verdict(
        False,
        expected,
        f"open at event {o.invoke.index} ended on {last.node} ({last.label()}), which was not the principal "
        f"({principal} was): the connection stayed on a standby instead of alternating on",
        (o.invoke.index, o.end.index, *last.events),
    )


def _gave_up_at_retry_time(ctx: MirContext, o: Open, expected: str) -> Verdict | None:
    """MIR-4 "if an attempt's retry time expires, the client tries the other partner": a failed open
    whose last attempt was still held when its retry time (MIR-5, cut to the login timeout) expired,
    with time left before the login timeout, never tried the other partner after it."""
    tol, lt = ctx.params.tolerance, ctx.params.login_timeout
    if not o.failed or o.end is None or not o.attempts or lt is None:
        return None
    a = o.attempts[-1]
    deadline = o.t0 + lt
    expiry = min(a.start + retry_time(a.round, lt), deadline)
    held_until = a.end if a.end is not None else o.end.t
    if expiry >= deadline - tol or held_until <= expiry + tol or a.outcome in ("error", "refused"):
        return None
    other = "failover" if a.role == "initial" else "initial"
    return ctx.verdict(
        False,
        expected,
        f"{a.label()} was still held when its retry time {seconds(retry_time(a.round, lt))} expired at "
        f"+{seconds(o.rel(expiry))} (held until +{seconds(o.rel(held_until))}); "
        f"the open failed at +{seconds(o.rel(o.end.t))} "
        f"without ever trying the {other} partner after it",
        (o.invoke.index, o.end.index, *a.events),
    )


def _alternation_of_open(ctx: MirContext, o: Open, expected: str) -> Verdict | None:
    """MIR-4 on one open: the violation it shows, if any. An open with unobserved attempts
    (``o.unobserved``) is judged only on giving up before the login timeout: the attempts nobody saw
    were refused connects, which cannot excuse an early end (OBS-1)."""
    tol, lt = ctx.params.tolerance, ctx.params.login_timeout
    if not o.unobserved:
        seen = _alternation_of_attempts(ctx, o, expected)
        if seen is not None:
            return seen
    if not o.failed or o.end is None:
        return None
    gave_up = o.rel(o.end.t)
    early = lt is None or gave_up < lt - tol
    limit = f"{seconds(lt - gave_up)} before the login timeout {seconds(lt)}" if lt else "with no login timeout"
    if not o.attempts and database_missing(o) is False and early:
        # No attempt seen anywhere (refused connects never reach a proxy, and this client did
        # not report its own): no server answered, so no non-retryable answer can explain an
        # early end - giving up before the login timeout is the client's own doing.
        return ctx.verdict(
            False,
            expected,
            f"open at event {o.invoke.index} gave up after {seconds(gave_up)}, {limit}, with no "
            "attempt seen (refused connects are invisible to the proxies and the client "
            "recorded none)",
            (o.invoke.index, o.end.index),
        )
    if o.attempts and o.attempts[-1].outcome != "error" and early:
        return ctx.verdict(
            False,
            expected,
            f"open at event {o.invoke.index} gave up after {seconds(gave_up)} and {len(o.attempts)} attempt(s), "
            f"{limit}",
            (o.invoke.index, o.end.index, *o.attempts[-1].events),
        )
    return None


@mir_rule(
    "MIR-4", needs=("opens", "proxy", "refused", "roles"), tolerance=True, login_timeout=True, need_failover="failover"
)
def check_partner_alternation(call: MirCall) -> Verdict:
    """MIR-4 alternation: attempts go initial, failover, initial, failover … until an attempt opens or
    the login timeout expires (a failed open must not give up earlier than ``login_timeout`` −
    ``tolerance``, unless its last attempt ended in a non-retryable ``error``). A failed open whose
    last attempt was still held when its retry time expired (with time left before the login
    timeout) gave up on the other partner: a violation. **(interpretation)** An open that succeeds on
    a node the history names as not the principal (a readable standby that accepted the login) did
    not reach a connection the rule counts as opened: a violation.

    With ``login_timeout=None`` (no timeout) any failed open gave up early. Exercised when some open
    needed a second attempt or failed. Opens whose refused connects nobody observed are judged only
    on giving up early."""
    ctx = call.context()
    expected = "attempts alternate initial, failover, initial … until one opens or the login timeout expires"
    exercised = []
    for o in ctx.usable + ctx.unobserved:
        violation = _alternation_of_open(ctx, o, expected)
        if violation is not None:
            return violation
        if (len(o.attempts) >= 2 or o.failed) and not o.unobserved:
            exercised.append(o)
    return ctx.tallied(
        exercised,
        expected,
        unknown="no open needed a second attempt or failed (alternation not exercised)",
        kept=f"{len(exercised)} open(s) alternated over {sum(len(o.attempts) for o in exercised)} attempt(s)",
        evidence=[i for o in exercised for a in o.attempts for i in a.events],
    )


def _client_partners(ev: Iterable[Event]) -> list[str]:
    """The partners clients say they learned: their ``op.ok`` value's ``partner`` (MIR-9 fallback)."""
    return [
        str(e.get("value")["partner"])
        for e in ev
        if e.type == "op.ok" and isinstance(e.get("value"), dict) and e.get("value").get("partner")
    ]


def _learned_partner(o: Open, pubs: Sequence[Event]) -> tuple[str | None, bool]:
    """MIR-9: the mirror a successful open learned - the last ``mirroring.partner`` its server had
    published by then, else the client's ``op.ok`` value - and whether it came from the client."""
    assert o.end is not None
    served = o.attempts[-1].ids if o.attempts else frozenset()
    pub = [
        e
        for e in pubs
        if e.t <= o.end.t and (e.get("node") is None or not served or matches(str(e.get("node")), served))
    ]
    if pub:
        return str(pub[-1].get("partner")), False
    value = o.end.get("value")
    if isinstance(value, dict) and value.get("partner"):
        return str(value["partner"]), True
    return None, False


def _attempt_follows_partner_cache(ctx: MirContext, o: Open, a: Attempt, cache: list[str] | None,
                                   expected: str) -> Verdict | None:
    """MIR-9 on one attempt after the client learned ``cache`` (None: unknown): its violation, if any."""
    if a.n % 2 == 1 and a.role != "initial":
        return ctx.verdict(
            False,
            expected,
            f"{a.label()} went to {sorted(a.ids)} instead of the initial partner "
            "(the initial partner name must never be overwritten)",
            (o.invoke.index, *a.events),
        )
    if a.n % 2 == 0 and cache is not None and not any(matches(c, a.ids) for c in cache):
        return ctx.verdict(
            False,
            expected,
            f"{a.label()} went to {sorted(a.ids)}; expected the cached failover partner {cache[0]}",
            (o.invoke.index, *a.events),
        )
    return None


@dataclass
class _PartnerCache:
    """MIR-9: the failover partner the client has cached, as far as the history tells."""

    initial: tuple[str, ...] = ()
    partners: list[str] | None = None  # None once what the client learned is unknown
    learned: bool = False
    from_client: bool = False  # some learned partner was read from the client's op.ok value
    kept_server: int = 0  # learns where the mirror was the initial partner (the server was cached instead)

    @property
    def current(self) -> list[str] | None:
        """The partner failover attempts must go to now (None: not learned yet, or unknown)."""
        return self.partners if self.learned else None

    def learn(self, o: Open, pubs: Sequence[Event], variant: str) -> None:
        """Update the cache after the successful open ``o`` (``managed``: only the first one counts).

        **(interpretation, RULEBOOK MIR-9)** When the published mirror is the initial partner (the
        client was redirected to the failover partner, now the principal), the client caches the
        server it is connected to, so the two cached names still name both partners."""
        learned_now, from_client = _learned_partner(o, pubs)
        self.from_client = self.from_client or from_client
        if variant == "managed" and self.learned:
            return
        if learned_now is not None and any(same_partner(n, learned_now) for n in self.initial):
            served = sorted(o.attempts[-1].ids, key=lambda x: (":" not in x, x)) if o.attempts else []
            self.kept_server += 1
            learned_list = served or None
        else:
            learned_list = None if learned_now is None else [learned_now]
        if learned_list is None:
            self.partners = None  # what the client learned is unknown from here on
        else:
            self.partners, self.learned = learned_list, True

    def forget(self) -> None:
        """An open that succeeded but could not be judged: what it taught the client is unknown."""
        self.partners = None


@mir_rule(
    "MIR-9",
    needs=("opens", "proxy", "refused", "partner"),
    need_failover="failover (the partner given in the connection string)",
)
def check_partner_cache_update(call: MirCall, *, variant: str = "native") -> Verdict:
    """MIR-9 partner cache update: after a successful open the client caches the server's current
    mirror as its failover partner (``native``: after every open; ``managed``: after the first one
    only); the initial partner is never replaced. Judged on the failover-slot attempts (2, 4, …) of
    later opens, which must go to the cached partner. **(interpretation, RULEBOOK)** When the server's
    mirror is the initial partner, the cached failover partner is the server the client is connected
    to (``details["server_cached"]`` counts those opens).

    What the server published comes from ``mirroring.partner`` events (``node`` = the principal,
    ``partner`` = the mirror's client-facing ``host:port``; see docs/events.md); without them, from the
    client's own ``op.ok`` value ``partner`` (noted in ``details``)."""
    if variant not in ("native", "managed"):
        raise ConfigError(f"MIR-9: variant must be 'native' or 'managed', not {variant!r}")
    ev = ordered(call.events)
    pubs = [e for e in ev if e.type == "mirroring.partner" and e.get("partner")]
    published = [str(e.get("partner")) for e in pubs] + _client_partners(ev)
    ctx = call.context(ev, also_failover=published)
    expected = f"{variant}: failover attempts go to the mirror the server published at " + (
        "the last successful open" if variant == "native" else "the first successful open"
    )
    cache = _PartnerCache(initial=ctx.params.initial)
    judged: list[int] = []
    n_judged = 0
    usable = {id(o) for o in ctx.usable}
    for o in ctx.opens:
        if id(o) in usable:
            for a in o.attempts:
                violation = _attempt_follows_partner_cache(ctx, o, a, cache.current, expected)
                if violation is not None:
                    return violation
                if a.n % 2 == 0 and cache.current is not None:
                    judged.extend(a.events)
                    n_judged += 1
        if o.ok and o.ambiguous:
            cache.forget()
        elif o.ok:
            cache.learn(o, pubs, variant)  # also after an open whose refused attempts went unobserved
    if not judged:
        return ctx.verdict(
            UNKNOWN,
            expected,
            "no failover attempt after the client learned a partner (rule not exercised)",
            ctx.invokes,
        )
    source = "client op.ok value" if cache.from_client else "mirroring.partner events"
    extra: dict[str, Any] = {"partner_source": source}
    if cache.kept_server:
        extra["server_cached"] = cache.kept_server  # the mirror was the initial partner (interpretation)
    return ctx.verdict(True, expected, f"{n_judged} failover attempt(s) went to the cached partner", judged, **extra)


def _identities(ev: list[Event], names: Sequence[str]) -> list[str]:
    """MIR-10: ``names`` plus the proxy names / listen and client addresses the history links to them."""
    out = list(names)
    for e in ev:
        if (
            e.type == "conn.accepted"
            and e.get("node") is not None
            and any(same_partner(n, str(e.get("node"))) for n in names)
        ):
            out += [str(e.get(k)) for k in ("proxy", "listen") if e.get(k)]
        elif e.type == "topology.up":
            for node in e.get("nodes") or []:
                if isinstance(node, dict) and any(same_partner(n, str(node.get("name"))) for n in names):
                    out += [str(node[k]) for k in ("client_address",) if node.get(k)]
    return sorted(set(out))


def _first_open(ev: list[Event], process: Any) -> tuple[Event | None, Event | None]:
    """MIR-10: the first ``open`` invoke (of ``process``, if given) and its end."""
    first = next(
        (
            e
            for e in ev
            if e.type == "op.invoke" and e.get("f") == "open" and (process is None or e.get("process") == process)
        ),
        None,
    )
    if first is None:
        return None, None
    end = next(
        (
            e
            for e in ev
            if e.type in END_TYPES
            and e.get("op_id") == first.get("op_id")
            and e.get("process") == first.get("process")
            and e.t >= first.t
        ),
        None,
    )
    return first, end


def _principal_from_history(ev: list[Event], process: Any) -> list[str] | Verdict:
    """MIR-10: the principal the history names before the first open, or an unknown verdict (no open,
    no principal named, or roles changed during the first open)."""
    first, end = _first_open(ev, process)
    expected = "the first connect works iff the principal is the initial or the failover partner"
    if first is None:
        return Verdict("MIR-10", UNKNOWN, expected=expected, observed="no open in the history")
    changed = role_changes(ev, first.t, end.t if end is not None else math.inf)
    if changed:
        return Verdict(
            "MIR-10",
            UNKNOWN,
            expected=expected,
            observed=f"roles changed during the first open (event {changed[0].index})",
            evidence=(first.index, changed[0].index),
        )
    principal = principal_at(ev, first.t)
    if principal is None:
        return Verdict(
            "MIR-10",
            UNKNOWN,
            expected=expected,
            observed="no principal given and none named in the history before the first open",
            evidence=(first.index,),
        )
    return [principal]


def _stale_partner_first_open(ctx: MirContext, first: Open, prin: Sequence[str], should: bool,
                              expected: str) -> Verdict:
    """MIR-10 on the decided first open: it must succeed (on one of ``prin``) iff ``should``."""
    assert first.end is not None
    ev_first = (first.invoke.index, first.end.index)
    if first.ok != should:
        return ctx.verdict(
            False,
            expected,
            f"first open {'succeeded' if first.ok else 'failed'} after {seconds(first.rel(first.end.t))}"
            f" ({len(first.attempts)} attempt(s))",
            ev_first + tuple(i for a in first.attempts for i in a.events),
        )
    if not first.ok:
        return ctx.verdict(
            True,
            expected,
            f"first open failed after {seconds(first.rel(first.end.t))} and {len(first.attempts)} "
            f"attempt(s) ({str(first.end.get('error'))[:60]})",
            ev_first,
        )
    if not first.attempts:
        return ctx.verdict(UNKNOWN, expected, "first open succeeded but no attempt was observed", ev_first)
    last = first.attempts[-1]
    if not any(matches(p, last.ids) for p in prin):
        return ctx.verdict(
            False,
            expected,
            f"first open succeeded on {sorted(last.ids)}, which is not the principal",
            ev_first + last.events,
        )
    return ctx.verdict(
        True, expected, f"first open succeeded on the principal via {last.label()}", ev_first + last.events
    )


@mir_rule("MIR-10", needs=("opens", "proxy", "roles"), need_failover="failover")
def check_stale_failover_partner(call: MirCall, *, principal: PartnerNames = None) -> Verdict:
    """MIR-10 stale failover partner: the first open with ``Server=A; Failover Partner=B`` succeeds,
    on the principal, iff the principal is A or B; when A is only a mirror and B is stale it fails.
    ``principal`` names the partner that is principal at the time (its proxy / node / address);
    without it, the principal is read from the history (the last ``topology.up`` / ``node.start`` /
    ``role.change`` naming a principal before the first open) and a role change during that open
    makes the verdict unknown."""
    params = call.params
    ev = ordered(call.events)
    named = partner_names(principal) if principal is not None else _principal_from_history(ev, params.process)
    if isinstance(named, Verdict):
        return named
    prin = _identities(ev, named)
    ctx = call.context(ev, also_failover=prin)
    should = any(matches(p, (*params.initial, *params.failover)) for p in prin)
    expected = (
        "the first connect works, on the principal"
        if should
        else "the first connect fails (the initial partner is a mirror, the failover partner stale)"
    )
    first = next((o for o in ctx.opens if o.end is not None), None)
    if first is None or first.ambiguous or first.end is None or first.end.type == "op.info":
        return ctx.verdict(UNKNOWN, expected, "no decided first open in the history", ctx.invokes)
    return _stale_partner_first_open(ctx, first, prin, should, expected)
