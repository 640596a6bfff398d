"""ACR-1 … ACR-9 checkers (RULEBOOK, seed 003): pure functions ``(events, **params) -> Verdict`` over
the model of :mod:`harness.rules.acr.model`. Every verdict's evidence names the events that decide
it; a rule whose situation the history does not contain is *unknown*, never kept (the shared steps:
:mod:`harness.rules.acr.judging`)."""

from __future__ import annotations

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.acr.judging import (
    acr_rule,
    describe,
    end_of,
    failed_under,
    kept_or_unknown,
    replay_before,
    replayed,
    retry_rounds,
    unjudgeable,
)
from harness.rules.acr.model import (
    SQLSTATE_COMM,
    SQLSTATE_REROUTED,
    Model,
    Op,
    all_primary_down,
    build,
    disruptions,
    registers,
    session_resources,
    txn_declares,
    txn_wrote,
)
from harness.rules.verdict import UNKNOWN, Verdict


def _window(op: Op) -> tuple[float, float]:
    return op.t0, op.t1


# ---------------------------------------------------------------------- ACR-1


@acr_rule("ACR-1")
def check_reroute_by_server_list(events: list[Event], *, process: str = "app") -> Verdict:
    """ACR-1: the client reroutes by the server list the group returned (highest weight first).

    For every call during which the application's transport broke and the client opened another
    one, the first member it tried must be the highest-weight member of the list the group
    published last before that attempt, not counting the member that just failed."""
    rule, expected = "ACR-1", "each reroute tries first the highest-weight member of the server list the group returned"
    m = build(events, process)
    if (unknown := unjudgeable(m, rule, expected)) is not None:
        return unknown
    judged, evidence = [], []
    for op, broken in disruptions(m):
        ok_after = next((o for o in m.ops if o.t0 >= op.t0 and o.status == "ok"
                         and o.f in ("execute", "commit", "rollback")), None)
        until = ok_after.t1 if ok_after else op.t1  # a client may reconnect only at the next call
        tries = [tr for tr in m.transports_in(op.t0, until)
                 if tr.address.kind == "member" and tr.address.name != broken.address.name]
        if not tries:
            continue
        listed = m.publication(tries[0].t, tries[0].address.group) or []
        cands = [(n, w) for n, w in listed if n != broken.address.name]
        if not cands:
            continue
        best = max(cands, key=lambda c: c[1])
        judged.append((op, tries[0], best))
        evidence += [op.invoke, tries[0].index]
        if tries[0].address.name != best[0] and dict(cands).get(tries[0].address.name, -1) < best[1]:
            return Verdict(rule, False, expected=expected,
                           observed=f"after {broken.address.name} failed under {describe(op)}, the client tried "
                                    f"{tries[0].address.name} first; the server list was "
                                    f"{', '.join(f'{n}/{w}' for n, w in listed)}", evidence=[op.invoke, tries[0].index])
    return kept_or_unknown(rule, expected, judged, unknown="no reroute to a listed member observed",
                           kept=f"{len(judged)} reroute(s) went to the top of the list", evidence=evidence)


# ---------------------------------------------------------------------- ACR-2


@acr_rule("ACR-2")
def check_seamless_statement_replay(events: list[Event], *, process: str = "app", mode: str = "seamless",
                max_acr_retries: int | None = None, acr_retry_interval: float | None = None,
                tolerance: float = 0.5) -> Verdict:
    """ACR-2: a transaction's failed first statement is run again on another member after the special
    registers are replayed; no error reaches the application (seamless mode, reusable transport);
    retries and their spacing follow ``maxAcrRetries`` and ``acrRetryInterval``.

    Judged from the server's view: the first new session of the application after the failure must
    receive the application's SET statements (in order) before the statement itself. The schedule is
    judged from the fault proxy's view (accepted and refused connects) on every call that gave up
    while every address of the primary group was down: ``max_acr_retries`` + 1 rounds over the list,
    ``acr_retry_interval`` apart (no sooner, and at most ``tolerance`` s later)."""
    rule = "ACR-2"
    expected = ("a failed first statement returns normally, rerun on a new member after the SETs were replayed; "
                "retries as maxAcrRetries and acrRetryInterval say")
    if tolerance < 0:
        raise ConfigError(f"ACR-2: tolerance must be >= 0 seconds, not {tolerance!r}")
    m = build(events, process)
    if (unknown := unjudgeable(m, rule, expected, mode)) is not None:
        return unknown
    judged = []
    for op, broken in disruptions(m):
        if op.f != "execute" or op.n != 0 or session_resources(m, op.t0) or all_primary_down(m, op.t0):
            continue
        judged.append(op)
        if op.status != "ok":
            return Verdict(rule, False, expected=expected,
                           observed=f"the first statement of transaction {op.txn} failed on {broken.address.name} and "
                                    f"{describe(op)}", evidence=failed_under(broken, op))
        wanted = registers(m, op.t0)
        new, at, ok, got, idx = replay_before(m, op.t0, op.sql, wanted)
        if not ok:
            return Verdict(rule, False, expected=expected,
                           observed=f"the server's new session for {op.sql!r} received SETs {got} before it; the "
                                    f"application had set {wanted}" if new else
                                    f"no new server session received {op.sql!r} again",
                           evidence=[op.invoke, *(idx or []), *([at[1]] if at else [])])
    if max_acr_retries is not None or acr_retry_interval is not None:
        for op in m.ops:
            bad = _schedule_broken(m, op, max_acr_retries, acr_retry_interval, tolerance)
            if bad is None:
                continue
            if bad:
                return Verdict(rule, False, expected=expected, observed=bad[0], evidence=[op.invoke, *bad[1]])
            judged.append(op)
    return kept_or_unknown(rule, expected, judged,
                           unknown="no first statement failed on a reusable transport and no call ran out of retries",
                           kept=f"{len(judged)} failed first statement(s) rerun seamlessly after the replay or "
                                f"retry schedule(s) kept", evidence=[o.invoke for o in judged])


def _schedule_broken(m: Model, op: Op, retries: int | None, interval: float | None,
                     tolerance: float) -> tuple[str, list[int]] | None:
    """ACR-2's retry schedule on ``op``: None when ``op`` is not a call that ran out of retries with
    every primary address down (or its refused connects could not be seen), ``()`` when kept, else
    (what was observed, the evidence)."""
    gave_up = op.sqlstate == SQLSTATE_COMM or (op.sqlstate == SQLSTATE_REROUTED and op.fields.get("reason_code") == 4)
    if op.f not in ("connect", "execute", "commit", "rollback") or not gave_up or not all_primary_down(m, op.t0):
        return None
    if m.capture is not True:
        return None  # refused connects unseen: the rounds cannot be counted
    tries = [tr for tr in m.transports_in(op.t0, op.t1) if tr.address.group == "primary"]
    if not tries or any(tr.outcome == "accepted" for tr in tries):
        return None
    rounds = retry_rounds(tries)
    if retries is not None and len(rounds) != retries + 1:
        return (f"{describe(op)} after {len(rounds)} round(s) over the server list; maxAcrRetries={retries} "
                f"means {retries + 1}", [tr.index for tr in tries])
    if interval is not None:
        for before, after in zip(rounds, rounds[1:], strict=False):
            gap = after[0].t - before[-1].t
            if gap < interval - 0.02 or gap > interval + tolerance:
                return (f"{gap:.3f} s between two rounds over the server list; acrRetryInterval={interval:g} s "
                        f"(tolerance {tolerance:g} s)", [before[-1].index, after[0].index])
    return ()


# ---------------------------------------------------------------------- ACR-3


@acr_rule("ACR-3")
def check_later_failure_rolls_back(events: list[Event], *, process: str = "app", mode: str = "seamless") -> Verdict:
    """ACR-3: a later statement failing on a reusable transport rolls the transaction back, reconnects,
    replays the special registers and returns SQL30108N (SQLSTATE 08506) - judged in seamless mode."""
    rule = "ACR-3"
    expected = "a failed later statement raises SQL30108N (08506) after a reconnect that replayed the SETs"
    m = build(events, process)
    if (unknown := unjudgeable(m, rule, expected, mode)) is not None:
        return unknown
    judged = []
    for op, broken in disruptions(m):
        if op.f != "execute" or op.n == 0 or session_resources(m, op.t0) or txn_declares(m, op) \
                or all_primary_down(m, op.t0):
            continue
        judged.append(op)
        if op.sqlstate != SQLSTATE_REROUTED:
            return Verdict(rule, False, expected=expected,
                           observed=f"statement {op.n + 1} of transaction {op.txn} failed on {broken.address.name} "
                                    f"and {describe(op)}", evidence=failed_under(broken, op))
        wanted = registers(m, op.t0)
        new = next((s for s in m.sessions_after(op.t0) if s.start <= op.t1), None)
        ok, got, idx = replayed(new, wanted, op.t1)
        if not ok:
            return Verdict(rule, False, expected=expected,
                           observed=(f"before SQL30108N the new session received SETs {got}; the application had "
                                     f"set {wanted}") if new else "SQL30108N came without a reconnect (no new server "
                                                                  "session before it)",
                           evidence=[op.invoke, end_of(op), *idx])
    return kept_or_unknown(rule, expected, judged, unknown="no later statement failed on a reusable transport",
                           kept=f"{len(judged)} SQL30108N after reconnect and replay",
                           evidence=[end_of(o) for o in judged])


# ---------------------------------------------------------------------- ACR-4


@acr_rule("ACR-4")
def check_unreusable_transport_error(events: list[Event], *, process: str = "app") -> Verdict:
    """ACR-4: a failure while the transport cannot be reused (a held cursor, a temporary table) returns
    SQL30081N (SQLSTATE 08001), and the next session gets the special registers of the last COMMIT
    point."""
    rule = "ACR-4"
    expected = "with session resources open, a failure raises SQL30081N (08001); registers back to the last COMMIT"
    m = build(events, process)
    if (unknown := unjudgeable(m, rule, expected)) is not None:
        return unknown
    judged = []
    for op, broken in disruptions(m):
        held = session_resources(m, op.t0)
        if op.f != "execute" or not held:
            continue
        judged.append(op)
        if op.sqlstate != SQLSTATE_COMM:
            return Verdict(rule, False, expected=expected,
                           observed=f"with {held[0]!r} open, {describe(op)}",
                           evidence=failed_under(broken, op))
        wanted = registers(m, op.t0, committed=True)
        later = [o for o in m.ops if o.t0 > op.t1 and o.f == "execute" and o.status == "ok"]
        if later:
            new, _, ok, got, idx = replay_before(m, op.t0, later[0].sql, wanted)
            if new is not None and not ok:
                return Verdict(rule, False, expected=expected,
                               observed=f"after SQL30081N the next session received SETs {got}; the last COMMIT "
                                        f"point had {wanted}", evidence=[end_of(op), *idx])
    return kept_or_unknown(rule, expected, judged, unknown="no failure with session resources open",
                           kept=f"{len(judged)} SQL30081N with session resources open",
                           evidence=[end_of(o) for o in judged])


# ---------------------------------------------------------------------- ACR-5


@acr_rule("ACR-5")
def check_commit_after_fetch_fails_over(events: list[Event], *, process: str = "app",
                                        mode: str = "seamless") -> Verdict:
    """ACR-5: COMMIT / ROLLBACK after a full fetch, issued once the server became unreachable, fails over
    seamlessly; a session resource declared in the transaction makes it non-seamless.

    **(interpretation)** a COMMIT of a transaction that wrote is not judged here (its outcome is unknown
    to the client; DUR-1 judges what it acknowledged)."""
    rule = "ACR-5"
    expected = ("COMMIT/ROLLBACK of a fully fetched transaction is seamless; with a cursor or temporary table "
                "declared in it, it is not")
    m = build(events, process)
    if (unknown := unjudgeable(m, rule, expected, mode)) is not None:
        return unknown
    judged = []
    for op, broken in disruptions(m):
        if op.f not in ("commit", "rollback") or all_primary_down(m, op.t0):
            continue
        declared = txn_declares(m, op) or session_resources(m, op.t0)
        if not declared and op.f == "commit" and txn_wrote(m, op):
            continue
        judged.append(op)
        if declared and op.status == "ok":
            return Verdict(rule, False, expected=expected,
                           observed=f"{op.f.upper()} after {declared[0]!r} in the transaction returned normally",
                           evidence=failed_under(broken, op))
        if not declared and op.status != "ok":
            return Verdict(rule, False, expected=expected,
                           observed=f"{op.f.upper()} of a fully fetched transaction on {broken.address.name} "
                                    f"raised {op.fields.get('error_class')} (SQLSTATE {op.fields.get('sqlstate')})",
                           evidence=failed_under(broken, op))
    return kept_or_unknown(rule, expected, judged, unknown="no COMMIT/ROLLBACK met a failed member",
                           kept=f"{len(judged)} COMMIT/ROLLBACK judged", evidence=[end_of(o) for o in judged])


# ---------------------------------------------------------------------- ACR-6


@acr_rule("ACR-6")
def check_group_address_tried_last(events: list[Event], *, process: str = "app") -> Verdict:
    """ACR-6: the group-wide address is tried only after every member of the list, and before the client
    gives up. Judged on every call that opened or tried a transport (a connect, a lazy bind, a
    reroute): one that tried the group-wide address while a running member was still untried breaks
    it, and so does one that gave up without trying it while it was up. Needs the refused connects
    (capture) to judge a group-wide try or a give-up while members were killed."""
    rule, expected = "ACR-6", "the group-wide address is tried after every running member, and before giving up"
    m = build(events, process)
    if (unknown := unjudgeable(m, rule, expected)) is not None:
        return unknown
    judged = []
    for op in m.ops:
        if op.f not in ("connect", "execute", "commit", "rollback"):
            continue
        tries = m.transports_in(*_window(op))
        group_tries = [tr for tr in tries if tr.address.kind == "group-address" and tr.address.group == "primary"]
        gave_up = op.sqlstate == SQLSTATE_COMM or (op.sqlstate == SQLSTATE_REROUTED
                                                   and op.fields.get("reason_code") == 4)
        if not tries:
            continue
        if (group_tries or gave_up) and m.capture is not True \
                and any(m.down(a.name, op.t0, "kill") for a in m.group_members("primary")):
            return Verdict(rule, UNKNOWN, expected=expected,
                           observed="members were refusing connects but the refused-connect capture did not run")
        judged.append(op)
        if group_tries:
            g = group_tries[0]
            skipped = [a.name for a in m.group_members("primary")
                       if not m.down(a.name, g.t) and not any(tr.address.name == a.name and tr.t < g.t for tr in tries)]
            if skipped:
                return Verdict(rule, False, expected=expected,
                               observed=f"the group-wide address was tried before running member(s) "
                                        f"{', '.join(skipped)}", evidence=[op.invoke, g.index])
        elif gave_up and not m.down("group", op.t1):
            return Verdict(rule, False, expected=expected,
                           observed=f"{describe(op)} without trying the group-wide address (which was up)",
                           evidence=[op.invoke, end_of(op), *[tr.index for tr in tries]])
    return kept_or_unknown(rule, expected, judged, unknown="no call opened or tried a transport",
                           kept=f"{len(judged)} call(s) that opened or tried a transport judged",
                           evidence=[o.invoke for o in judged])


# ---------------------------------------------------------------------- ACR-7


@acr_rule("ACR-7")
def check_no_transport_before_first_statement(events: list[Event], *, process: str = "app",
                                              mode: str = "non-seamless") -> Verdict:
    """ACR-7 (non-seamless mode): no transport until the application's first SQL or SET statement (after
    connect, and after a failure's SQL30108N); then the special registers of the last COMMIT point are
    set before the statement."""
    rule = "ACR-7"
    expected = "no transport before the first statement; registers of the last COMMIT point set before it"
    m = build(events, process)
    if (unknown := unjudgeable(m, rule, expected, mode, judged_in="non-seamless")) is not None:
        return unknown
    calls = [o for o in m.ops if o.f in ("connect", "execute", "commit", "rollback")]
    broke = {id(op): tr for op, tr in disruptions(m)}
    judged = []
    for i, op in enumerate(calls):
        if not (op.f == "connect" or (op.sqlstate == SQLSTATE_REROUTED)):
            continue
        nxt = next((o for o in calls[i + 1:] if o.f == "execute"), None)
        if nxt is None:
            continue
        if op.f == "connect":
            start = op.t0
        elif id(op) in broke:  # the transport broke under it: no new one before the next statement
            start = max(op.t0, broke[id(op)].t) + 1e-9
        else:  # SQL30108N while binding (reason code 4): its own attempts are the bind
            start = op.t1
        early = m.transports_in(start, nxt.t0)
        judged.append(op)
        if early:
            return Verdict(rule, False, expected=expected,
                           observed=f"the client opened a transport to {early[0].address.name} after "
                                    f"{'connect' if op.f == 'connect' else 'SQL30108N'} and before the next statement",
                           evidence=[op.invoke, early[0].index, nxt.invoke])
        if nxt.status == "ok" and op.f != "connect":
            wanted = registers(m, nxt.t0, committed=True)
            new, _, ok, got, idx = replay_before(m, nxt.t0, nxt.sql, wanted)
            if new is not None and not ok:
                return Verdict(rule, False, expected=expected,
                               observed=f"the new transport got SETs {got} before {nxt.sql!r}; the last COMMIT point "
                                        f"had {wanted}", evidence=[nxt.invoke, *idx])
    return kept_or_unknown(rule, expected, judged, unknown="no connect or SQL30108N followed by a statement",
                           kept=f"{len(judged)} lazy transport(s)", evidence=[o.invoke for o in judged])


# ---------------------------------------------------------------------- ACR-8


@acr_rule("ACR-8")
def check_reason_codes(events: list[Event], *, process: str = "app") -> Verdict:
    """ACR-8: SQL30108N carries reason code 2 when a member of the current group failed and 4 when every
    member of the primary group failed and the alternate group is next; the failed member is not used
    again on that connection (until its next COMMIT)."""
    rule = "ACR-8"
    expected = "reason code 2 within the group, 4 when the primary group is exhausted; failed member not reused"
    m = build(events, process)
    if (unknown := unjudgeable(m, rule, expected)) is not None:
        return unknown
    judged = []
    has_alternate = bool(m.group_members("alternate"))
    broke = {id(op) for op, _ in disruptions(m)}
    for op in m.ops:
        if op.sqlstate != SQLSTATE_REROUTED:
            continue
        rc = op.fields.get("reason_code")
        if id(op) in broke:
            want, why = 2, "the existing connection to a member failed under it"
        elif has_alternate and all_primary_down(m, op.t0):
            want, why = 4, "no member of the primary group could be reached"
        else:
            continue
        judged.append(op)
        if rc != want:
            return Verdict(rule, False, expected=expected, observed=f"SQL30108N reason code {rc} when {why}",
                           evidence=[op.invoke, end_of(op)])
        if want == 4:
            nxt = next((tr for tr in m.transports if tr.t > op.t1 and tr.outcome == "accepted"), None)
            if nxt is not None and nxt.address.group != "alternate":
                return Verdict(rule, False, expected=expected,
                               observed=f"after reason code 4 the client went to {nxt.address.name}, not to the "
                                        f"alternate group", evidence=[end_of(op), nxt.index])
    for op, broken in disruptions(m):
        commit = next((o for o in m.ops if o.f == "commit" and o.status == "ok" and o.t0 > op.t0), None)
        until = commit.t0 if commit else float("inf")
        # a retry round while every primary address is down tries the whole list again (ACR-2's
        # maxAcrRetries): that is not a resubmission to the failed member
        again = [tr for tr in m.transports if broken.t < tr.t and op.t0 < tr.t < until
                 and tr.address.name == broken.address.name and not all_primary_down(m, tr.t)]
        judged.append(op)
        if again:
            return Verdict(rule, False, expected=expected,
                           observed=f"after {broken.address.name} failed under {describe(op)}, the connection went "
                                    f"back to it", evidence=[broken.index, op.invoke, again[0].index])
    return kept_or_unknown(rule, expected, judged, unknown="no SQL30108N and no failed member observed",
                           kept=f"{len({id(o) for o in judged})} call(s) judged",
                           evidence=sorted({o.invoke for o in judged}))


# ---------------------------------------------------------------------- ACR-9


@acr_rule("ACR-9")
def check_timeout_failure_codes(events: list[Event], *, process: str = "app", receive_timeout: float | None = None,
                query_timeout: float | None = None, tolerance: float = 1.0) -> Verdict:
    """ACR-9: a receive timeout and a query timeout on a failed (black-holed) connection yield SQL30108N
    with failure code 1-3 within the timeout (+ ``tolerance`` s); an interrupt (``cancel``) yields
    SQL30108N with failure code 4."""
    rule = "ACR-9"
    expected = "timeouts: SQL30108N failure code 1-3 within the timeout; interrupt: SQL30108N failure code 4"
    if tolerance < 0:
        raise ConfigError(f"ACR-9: tolerance must be >= 0 seconds, not {tolerance!r}")
    m = build(events, process)
    if (unknown := unjudgeable(m, rule, expected)) is not None:
        return unknown
    cancels = [o for o in m.ops if o.f == "cancel"]
    limits = [t for t in (receive_timeout, query_timeout) if t]
    judged = []
    for op, broken in disruptions(m):
        if op.f != "execute" or not m.down(broken.address.name, op.t0, "blackhole"):
            continue
        cancel = next((c for c in cancels if op.t0 <= c.t0 <= op.t1), None)
        if cancel is None and not limits:
            continue
        judged.append(op)
        fc = op.fields.get("failure_code")
        if op.sqlstate != SQLSTATE_REROUTED:
            return Verdict(rule, False, expected=expected,
                           observed=f"on a black-holed member, {describe(op)}"
                                    + (" after an interrupt" if cancel else ""),
                           evidence=[op.invoke, *([cancel.invoke] if cancel else []), end_of(op)])
        if cancel is not None:
            if fc != 4:
                return Verdict(rule, False, expected=expected,
                               observed=f"an interrupt gave SQL30108N failure code {fc}",
                               evidence=[cancel.invoke, end_of(op)])
            continue
        if fc not in (1, 2, 3):
            return Verdict(rule, False, expected=expected, observed=f"a timeout gave SQL30108N failure code {fc}",
                           evidence=[op.invoke, end_of(op)])
        took = op.t1 - op.t0
        if took > min(limits) + tolerance:
            return Verdict(rule, False, expected=expected,
                           observed=f"SQL30108N came {took:.2f} s after the statement; the timeout was "
                                    f"{min(limits):g} s (tolerance {tolerance:g} s)",
                           evidence=[op.invoke, end_of(op)])
    return kept_or_unknown(rule, expected, judged,
                           unknown="no statement on a black-holed member under a timeout or interrupt",
                           kept=f"{len(judged)} timeout/interrupt case(s)", evidence=[o.invoke for o in judged])
