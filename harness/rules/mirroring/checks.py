"""The MIR-1 … MIR-13 checkers (RULEBOOK, seeds 000/001): ``check_mir_N(events, **params) -> Verdict``.

Each checker is a body built by :func:`mir_check`, which gives it the public signature (the shared
keyword block plus the rule's own parameters) and validates the block once into a :class:`MirParams`;
the body reads the history through one :func:`prepare` step (``MirCall.context``: a :class:`MirContext`
with the ordered events, the opens and their attempts of :mod:`harness.rules.mirroring.model`, the
horizon). See ``docs/mirroring.md``.

Tolerances are explicit parameters (``tolerance``, default ±0.020 s; more than ±0.050 s or ≤ 0 is a
ConfigError). A verdict is ``"unknown"`` - never a pass - when the events a rule needs are absent or
the rule was not exercised (e.g. MIR-5 with no attempt that ran into its retry time).

**Checkers never guess (OBS-1).** Every checker states the events it needs (``needs=`` of
:func:`mir_check`, shown as the checker's ``needs`` attribute; the kinds are :data:`NEEDS`). A
checker that needs ``refused`` - the complete attempt sequence of an open, refused connects included
- does not judge an open whose refused connects nobody observed (``Open.unobserved``: a refuse
partition of a partner with the capture unavailable and a client that reports no attempts); when
no open is left, the verdict is unknown with that reason (``details["unobserved"]``), never a
violation built on the attempts the harness did not see.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.mirroring.model import (
    DEFAULT_DELAYS,
    DEFAULT_FAST_RESET,
    DEFAULT_TOLERANCE,
    END_TYPES,
    FAST_OUTCOMES,
    MAX_TOLERANCE,
    SHUTDOWN_FAULTS,
    Attempt,
    Open,
    PartnerNames,
    build_opens,
    end_time,
    event_ids,
    horizon,
    lost_time,
    matches,
    ordered,
    partner_names,
    principal_at,
    retry_delay,
    retry_time,
    role_changes,
    same_partner,
)
from harness.rules.verdict import UNKNOWN, Validity, Verdict

# ------------------------------------------------------------------------------------- shared setup

#: The kinds of events a MIR checker may need (``mir_check(needs=...)``; docs/events.md).
NEEDS: dict[str, str] = {
    "opens": "op.invoke / op.ok / op.fail / op.info with f=open",
    "proxy": "the fault proxies' conn.accepted / conn.closed / conn.upstream_failed",
    "refused": "every refused connect: conn.refused (capture) or the client's attempt.* - the whole attempt sequence",
    "partner": "mirroring.partner (or the client's op.ok value partner)",
    "roles": "topology.up / node.start / role.change naming the principal",
    "shutdowns": "node.stop / node.kill / fault.start stop|kill|shutdown",
    "ops": "the client's other operations (op.* with f=execute …)",
}


def _tolerance(value: Any) -> float:
    try:
        tol = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"tolerance must be a number of seconds, not {value!r}") from None
    if not math.isfinite(tol) or tol <= 0:
        raise ConfigError(f"tolerance must be > 0 seconds, not {value!r}")
    if tol > MAX_TOLERANCE:
        raise ConfigError(
            f"tolerance={tol:.3f} s is looser than the ±{MAX_TOLERANCE:.3f} s the harness "
            f"accepts; use at most {MAX_TOLERANCE}"
        )
    return tol


def _login_timeout(value: Any, rule: str, *, required: bool) -> float | None:
    if value is None:
        if required:
            raise ConfigError(
                f"{rule} needs login_timeout (seconds) - the client's configured login "
                "timeout that the schedule is proportional to"
            )
        return None
    lt = float(value)
    if not math.isfinite(lt) or lt <= 0:
        raise ConfigError(f"{rule}: login_timeout must be > 0 seconds, not {value!r}")
    return lt


def _partners(value: PartnerNames, rule: str, what: str | None) -> tuple[str, ...]:
    """The partner names of ``value``; with ``what`` (how the rule names the partner) at least one."""
    names = tuple(partner_names(value))
    if what is not None and not names:
        raise ConfigError(
            f"{rule} needs {what}: the fault proxy name, node name or listen address (host:port) of that partner"
        )
    return names


@dataclass(frozen=True)
class MirParams:
    """The keyword block the MIR checkers share, validated (RULEBOOK MIR-1 … MIR-13)."""

    initial: tuple[str, ...]
    failover: tuple[str, ...]
    process: Any = None
    use_client_view: bool = True
    tolerance: float = DEFAULT_TOLERANCE
    login_timeout: float | None = None

    @classmethod
    def validated(
        cls,
        rule_id: str,
        *,
        initial: PartnerNames,
        failover: PartnerNames,
        process: Any,
        use_client_view: bool,
        tolerance: Any = DEFAULT_TOLERANCE,
        login_timeout: Any = None,
        need_initial: bool = True,
        need_failover: str | None = None,
        need_login_timeout: bool = False,
    ) -> MirParams:
        """Check the block for ``rule_id``: partner names (``initial`` unless ``need_initial=False``;
        ``failover`` when ``need_failover`` names it), tolerance (> 0, at most ±0.050 s) and
        login_timeout (> 0; required with ``need_login_timeout``), in that order; a ConfigError
        names the first problem."""
        return cls(
            initial=_partners(initial, rule_id, "initial" if need_initial else None),
            failover=_partners(failover, rule_id, need_failover),
            process=process,
            use_client_view=use_client_view,
            tolerance=_tolerance(tolerance),
            login_timeout=_login_timeout(login_timeout, rule_id, required=need_login_timeout),
        )


@dataclass(frozen=True)
class MirContext:
    """One rule's view of a history (MIR-1 … MIR-13): the events in time order, every open with its
    attempts (``all_opens``), the opens of ``params.process`` (``opens``) and the horizon."""

    rule_id: str
    params: MirParams
    events: list[Event]
    all_opens: list[Open]
    opens: list[Open]
    horizon: float
    needs: frozenset[str] = frozenset()

    @property
    def complete(self) -> bool:
        """Whether the rule needs every attempt of an open (``refused`` in its needs)."""
        return "refused" in self.needs

    @property
    def usable(self) -> list[Open]:
        """The opens a rule can judge: no connection inside two opens' windows, and - for a rule that
        needs the whole attempt sequence - none of its refused connects went unobserved (OBS-1)."""
        return [o for o in self.opens if not o.ambiguous and not (self.complete and o.unobserved)]

    @property
    def unobserved(self) -> list[Open]:
        """The opens left out because some of their attempts could not be observed."""
        return [o for o in self.opens if not o.ambiguous and self.complete and o.unobserved]

    @property
    def invokes(self) -> list[int]:
        """The ``op.invoke`` indices of the opens: the evidence of an unexercised rule."""
        return [o.invoke.index for o in self.opens]

    def verdict(self, valid: Validity, expected: str, observed: str, evidence: Iterable[int], **extra: Any) -> Verdict:
        """The rule's verdict; ``details`` counts the opens and lists the client-view attempts, the
        ambiguous opens and the opens not judged for unobserved attempts, plus ``extra``. An unknown
        verdict says why those opens were not judged."""
        blind = self.unobserved
        if blind:
            extra = {"unobserved": [{"open": o.invoke.index, "reasons": o.unobserved} for o in blind], **extra}
            if valid == UNKNOWN:
                observed += f"; {len(blind)} open(s) not judged: {blind[0].unobserved[0]}"
                evidence = (*evidence, *(o.invoke.index for o in blind))
        return Verdict(
            self.rule_id,
            valid,
            expected=expected,
            observed=observed,
            evidence=tuple(sorted(set(evidence))),
            details=_details(self.opens, **extra),
        )


def prepare(
    events: Iterable[Event],
    params: MirParams,
    rule_id: str,
    *,
    also_failover: Sequence[str] = (),
    rounds: bool = True,
    needs: Iterable[str] = (),
) -> MirContext:
    """Read a history for ``rule_id`` (every MIR rule): its opens and their attempts to the partners
    in ``params`` (``also_failover`` adds names that count as the failover partner: MIR-9, MIR-10);
    ``needs``: the event kinds the rule needs (:data:`NEEDS`)."""
    ev = ordered(events)
    all_opens = build_opens(
        ev, params.initial, (*params.failover, *also_failover), use_client_view=params.use_client_view, rounds=rounds
    )
    opens = [o for o in all_opens if params.process is None or o.process == params.process]
    return MirContext(rule_id, params, ev, all_opens, opens, horizon(ev), frozenset(needs))


@dataclass(frozen=True)
class MirCall:
    """One call of a MIR checker (MIR-1 … MIR-13): the rule, the history as given and the validated
    keyword block. The checker body reads the history with :meth:`context` once its own parameters
    are checked."""

    rule_id: str
    events: Iterable[Event]
    params: MirParams
    needs: frozenset[str] = frozenset()

    def context(
        self, events: Iterable[Event] | None = None, *, also_failover: Sequence[str] = (), rounds: bool = True
    ) -> MirContext:
        """:func:`prepare` for this call (``events``: the history already put in order, MIR-9/MIR-10)."""
        return prepare(
            self.events if events is None else events,
            self.params,
            self.rule_id,
            also_failover=also_failover,
            rounds=rounds,
            needs=self.needs,
        )


MirChecker = Callable[..., Verdict]


def _kw(name: str, annotation: str, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


# The shared block as the public checkers show it (string annotations, like the module's own).
_EVENTS = inspect.Parameter("events", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="list[Event]")
_INITIAL = _kw("initial", "PartnerNames", None)
_FAILOVER = _kw("failover", "PartnerNames", None)
_LOGIN_TIMEOUT = _kw("login_timeout", "float | None", None)
_PROCESS = _kw("process", "Any", None)
_TOLERANCE = _kw("tolerance", "float", DEFAULT_TOLERANCE)
_USE_CLIENT_VIEW = _kw("use_client_view", "bool", True)


def mir_check(
    rule_id: str,
    *,
    needs: Sequence[str],
    tolerance: bool = False,
    login_timeout: bool = False,
    need_initial: bool = True,
    need_failover: str | None = None,
    need_login_timeout: bool = False,
    late: Sequence[str] = (),
) -> Callable[[Callable[..., Verdict]], MirChecker]:
    """Build the public checker of ``rule_id`` (MIR-1 … MIR-13) from a body ``(call: MirCall, *,
    own keyword parameters) -> Verdict``.

    The public checker is ``checker(events, *, initial, failover, [login_timeout], <own>, process,
    [tolerance], <late own>, use_client_view)``: ``login_timeout`` / ``tolerance`` are in the shared
    block (validated by :meth:`MirParams.validated`, with ``need_initial`` / ``need_failover`` /
    ``need_login_timeout``) when asked for; a body that declares ``login_timeout`` itself gets it as
    given (MIR-8, MIR-13). ``late`` names the body's parameters that follow ``tolerance``. The body
    gets the validated block in a :class:`MirCall` and its own parameters as passed (or defaulted).
    Its name, docstring and module become the checker's; ``inspect.signature`` shows the whole
    keyword list (the registry checks ``--param`` names against it). ``needs`` (required) names the
    kinds of events the rule is judged on (:data:`NEEDS`); the checker carries it as ``needs``."""
    unknown_needs = set(needs) - set(NEEDS)
    assert not unknown_needs, (rule_id, unknown_needs)
    wanted = frozenset(needs)

    def decorate(body: Callable[..., Verdict]) -> MirChecker:
        own = list(inspect.signature(body).parameters.values())[1:]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in own), body.__qualname__
        assert not (login_timeout and any(p.name == "login_timeout" for p in own)), body.__qualname__
        block = [_INITIAL, _FAILOVER, _PROCESS, _USE_CLIENT_VIEW]
        block += [_TOLERANCE] if tolerance else []
        block += [_LOGIN_TIMEOUT] if login_timeout else []
        public = [
            _INITIAL,
            _FAILOVER,
            *([_LOGIN_TIMEOUT] if login_timeout else []),
            *(p for p in own if p.name not in late),
            _PROCESS,
            *([_TOLERANCE] if tolerance else []),
            *(p for p in own if p.name in late),
            _USE_CLIENT_VIEW,
        ]
        defaults = {p.name: p.default for p in public}
        qualname = body.__qualname__

        def checker(events: list[Event], **kwargs: Any) -> Verdict:
            for name in kwargs:
                if name not in defaults:
                    raise TypeError(f"{qualname}() got an unexpected keyword argument {name!r}")
            given = {**defaults, **kwargs}
            params = MirParams.validated(
                rule_id,
                **{p.name: given[p.name] for p in block},
                need_initial=need_initial,
                need_failover=need_failover,
                need_login_timeout=need_login_timeout,
            )
            return body(MirCall(rule_id, events, params, wanted), **{p.name: given[p.name] for p in own})

        signature = inspect.Signature([_EVENTS, *public], return_annotation="Verdict")
        checker.__name__, checker.__qualname__, checker.__module__ = body.__name__, qualname, body.__module__
        checker.__doc__ = body.__doc__
        checker.__signature__ = signature  # type: ignore[attr-defined]
        checker.needs = tuple(needs)  # type: ignore[attr-defined]
        checker.__annotations__ = {
            **{p.name: p.annotation for p in signature.parameters.values()},
            "return": signature.return_annotation,
        }
        return checker

    return decorate


def _details(opens: Sequence[Open], **extra: Any) -> dict[str, Any]:
    cv = sorted({i for o in opens for i in o.client_view})
    d: dict[str, Any] = {"opens": len(opens)}
    if cv:
        d["client_view_attempts"] = cv
        d["note"] = (
            "refused connects never reach a fault proxy: attempts at these event indices come "
            "from the client's own attempt.* events"
        )
    amb = [o.invoke.index for o in opens if o.ambiguous]
    if amb:
        d["ambiguous_opens"] = amb
    d.update(extra)
    return d


def _s(x: float) -> str:
    return f"{x:.3f} s"


def _open_value(o: Open) -> dict[str, Any]:
    return o.value if isinstance(o.value, dict) else {}


def _database_missing(o: Open) -> bool | None:
    """Whether the open's connection string lacks a database (MIR-2); None when it does not say."""
    value = _open_value(o)
    if "database" in value:
        db = value.get("database")
        return db is None or not str(db).strip()
    text = value.get("connstring")
    if isinstance(text, str):
        from harness.rules.connstring import ConnectionStringError, parse_connection_string

        try:
            parse_connection_string(text)
        except ConnectionStringError as exc:
            return "MIR-2" in str(exc)
        return False
    return None


def _alternation_violation(attempts: Iterable[Attempt]) -> tuple[Attempt, str] | None:
    """The first attempt off the initial, failover, initial … sequence and the role it should have."""
    for a in attempts:
        want = "initial" if a.n % 2 == 1 else "failover"
        if a.role != want:
            return a, want
    return None


# ------------------------------------------------------------------------------------------- checkers


@mir_check("MIR-1", needs=("opens", "proxy", "refused"))
def check_mir_1(call: MirCall) -> Verdict:
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
                f"partner at +{_s(o.rel(first.start))}",
                (o.invoke.index, *first.events),
            )
    if not judged:
        return ctx.verdict(UNKNOWN, expected, "no open with an observed attempt to a named partner", ctx.invokes)
    return ctx.verdict(
        True,
        expected,
        f"{len(judged)} open(s), each started with the initial partner",
        [i for o in judged for i in (o.invoke.index, *o.attempts[0].events)],
    )


@mir_check("MIR-2", needs=("opens", "proxy", "refused"), need_initial=False)
def check_mir_2(call: MirCall) -> Verdict:
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
        if _database_missing(o) is not True or o.end is None:
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
    if not judged:
        return ctx.verdict(UNKNOWN, expected, "no finished open without a database in the history", [])
    return ctx.verdict(
        True,
        expected,
        f"{len(judged)} open(s) without a database failed with no attempt "
        f"(error: {str(judged[0].end.get('error'))[:80]!r})",
        [i for o in judged for i in (o.invoke.index, o.end.index)],
    )


@mir_check(
    "MIR-3",
    needs=("opens", "proxy", "refused"),
    tolerance=True,
    login_timeout=True,
    need_failover="failover (the mirror the client was not told about)",
)
def check_mir_3(call: MirCall) -> Verdict:
    """MIR-3 no failover partner, no alternation: the client (given no failover partner) only ever
    tries the initial partner and fails no later than the login timeout.

    ``failover`` names the partner that was NOT in the connection string (the mirror): no attempt may
    reach it. Exercised when some attempt to the initial partner did not open."""
    ctx = call.context(rounds=False)
    tol, lt = ctx.params.tolerance, ctx.params.login_timeout
    expected = "only the initial partner is tried" + (f", and the open fails by {_s(lt)} ±{tol:.3f}" if lt else "")
    exercised = []
    for o in ctx.usable:
        for a in o.attempts:
            if a.role == "failover":
                return ctx.verdict(
                    False,
                    expected,
                    f"{a.label()} went to the partner not named in the connection string at +{_s(o.rel(a.start))}",
                    (o.invoke.index, *a.events),
                )
        if lt and o.end is not None and o.end.type != "op.ok" and o.rel(o.end.t) > lt + tol:
            return ctx.verdict(
                False,
                expected,
                f"open at event {o.invoke.index} failed after {_s(o.rel(o.end.t))}, past the login timeout {_s(lt)}",
                (o.invoke.index, o.end.index),
            )
        if any(a.role == "initial" and a.outcome != "opened" for a in o.attempts):
            exercised.append(o)
    if not exercised:
        return ctx.verdict(
            UNKNOWN, expected, "no open with a failed attempt to the initial partner (rule not exercised)", ctx.invokes
        )
    n = sum(len(o.attempts) for o in exercised)
    return ctx.verdict(
        True,
        expected,
        f"{len(exercised)} open(s), {n} attempt(s), all to the initial partner",
        [i for o in exercised for a in o.attempts for i in a.events],
    )


def _mir_4_sequence(ctx: MirContext, o: Open, expected: str) -> Verdict | None:
    """MIR-4 on the attempt sequence of one (completely observed) open: an attempt off the
    alternation, an open that ended on a partner that is not the principal, or a failed open whose
    last attempt outlived its retry time without the other partner ever being tried."""
    bad = _alternation_violation(o.attempts)
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
        return _mir_4_landed(ctx, o, expected)
    return _mir_4_gave_up_at_retry_time(ctx, o, expected)


def _mir_4_landed(ctx: MirContext, o: Open, expected: str) -> Verdict | None:
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


def _mir_4_gave_up_at_retry_time(ctx: MirContext, o: Open, expected: str) -> Verdict | None:
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
        f"{a.label()} was still held when its retry time {_s(retry_time(a.round, lt))} expired at "
        f"+{_s(o.rel(expiry))} (held until +{_s(o.rel(held_until))}); the open failed at +{_s(o.rel(o.end.t))} "
        f"without ever trying the {other} partner after it",
        (o.invoke.index, o.end.index, *a.events),
    )


def _mir_4_open(ctx: MirContext, o: Open, expected: str) -> Verdict | None:
    """MIR-4 on one open: the violation it shows, if any. An open with unobserved attempts
    (``o.unobserved``) is judged only on giving up before the login timeout: the attempts nobody saw
    were refused connects, which cannot excuse an early end (OBS-1)."""
    tol, lt = ctx.params.tolerance, ctx.params.login_timeout
    if not o.unobserved:
        seen = _mir_4_sequence(ctx, o, expected)
        if seen is not None:
            return seen
    if not o.failed or o.end is None:
        return None
    gave_up = o.rel(o.end.t)
    early = lt is None or gave_up < lt - tol
    limit = f"{_s(lt - gave_up)} before the login timeout {_s(lt)}" if lt else "with no login timeout"
    if not o.attempts and _database_missing(o) is False and early:
        # No attempt seen anywhere (refused connects never reach a proxy, and this client did
        # not report its own): no server answered, so no non-retryable answer can explain an
        # early end - giving up before the login timeout is the client's own doing.
        return ctx.verdict(
            False,
            expected,
            f"open at event {o.invoke.index} gave up after {_s(gave_up)}, {limit}, with no "
            "attempt seen (refused connects are invisible to the proxies and the client "
            "recorded none)",
            (o.invoke.index, o.end.index),
        )
    if o.attempts and o.attempts[-1].outcome != "error" and early:
        return ctx.verdict(
            False,
            expected,
            f"open at event {o.invoke.index} gave up after {_s(gave_up)} and {len(o.attempts)} attempt(s), {limit}",
            (o.invoke.index, o.end.index, *o.attempts[-1].events),
        )
    return None


@mir_check("MIR-4", needs=("opens", "proxy", "refused", "roles"), tolerance=True, login_timeout=True,
           need_failover="failover")
def check_mir_4(call: MirCall) -> Verdict:
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
        violation = _mir_4_open(ctx, o, expected)
        if violation is not None:
            return violation
        if (len(o.attempts) >= 2 or o.failed) and not o.unobserved:
            exercised.append(o)
    if not exercised:
        return ctx.verdict(
            UNKNOWN, expected, "no open needed a second attempt or failed (alternation not exercised)", ctx.invokes
        )
    return ctx.verdict(
        True,
        expected,
        f"{len(exercised)} open(s) alternated over {sum(len(o.attempts) for o in exercised)} attempt(s)",
        [i for o in exercised for a in o.attempts for i in a.events],
    )


def _mir_5_attempt(
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
        f"expected {_s(allowed)} ±{tol:.3f}" if a.outcome == "timeout" else f"expected at most {_s(allowed)} +{tol:.3f}"
    )
    if allowed < rt - 1e-9:
        exp += f" (retry time {_s(rt)} cut by the login timeout)"
    timing = {"retry_time": rt, "allowed": allowed, "held": held}
    off = abs(held - allowed) if a.outcome == "timeout" else held - allowed
    lost = lost_time(ctx.events, a.start, a.start + held, tol) if off > tol else 0.0
    if tol < off <= tol + lost and (a.end is not None or a.outcome == "opened"):
        return "not judged"
    if lost:
        exp += f" + {_s(lost)} the harness lost meanwhile (harness.stall)"
        tol += lost
    if a.outcome == "timeout" and abs(held - allowed) > tol:
        return ctx.verdict(
            False, expected, f"{a.label()} held {_s(held)}; {exp}", (o.invoke.index, *a.events), **timing
        )
    if held > allowed + tol and (a.end is not None or a.outcome == "opened" or hz > a.start + allowed + tol):
        return ctx.verdict(
            False,
            expected,
            f"{a.label()} {what} {_s(held)} ({a.outcome}); {exp}",
            (o.invoke.index, *a.events, *((o.end.index,) if a.outcome == "opened" else ())),
            **timing,
        )
    return None


@mir_check("MIR-5", needs=("opens", "proxy", "refused"), tolerance=True, login_timeout=True,
           need_failover="failover")
def check_mir_5(call: MirCall, *, retry_base: float | None = None) -> Verdict:
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
    timed, not_judged = [], []
    for o in ctx.usable:
        for a in o.attempts:
            violation = _mir_5_attempt(ctx, o, a, base, expected)
            if isinstance(violation, Verdict):
                return violation
            if violation == "not judged":
                not_judged.append(a.events[0])
            elif a.outcome == "timeout":
                timed.append(a)
    if not timed:
        why = "no attempt ran into its retry time (schedule not exercised)"
        if not_judged:
            why = f"{len(not_judged)} attempt(s) off by no more than the time the harness lost meanwhile"
        return ctx.verdict(UNKNOWN, expected, why, ctx.invokes + not_judged, not_judged=not_judged)
    last = timed[-1]
    return ctx.verdict(
        True,
        expected,
        f"{len(timed)} attempt(s) abandoned on schedule; last: {last.label()} held {_s(last.duration or 0)}",
        [i for x in timed for i in x.events],
        not_judged=not_judged,
    )


def _mir_6_open(ctx: MirContext, o: Open, lt: float, expected: str) -> Verdict | Literal["not judged"] | None:
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
                f"{a.label()} {what} at +{_s(o.rel(end))}, {_s(end - deadline)} past the login timeout",
                (o.invoke.index, *a.events, *((o.end.index,) if opened and o.end is not None else ())),
            )
    if o.end is not None and o.end.t > deadline + tol:
        what = {"op.ok": "succeeded", "op.fail": "failed"}.get(o.end.type, "ended")
        return ctx.verdict(
            False,
            expected,
            f"open at event {o.invoke.index} {what} at +{_s(o.rel(o.end.t))}, "
            f"{_s(o.end.t - deadline)} past the login timeout",
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
            f"{last.label()} was abandoned at +{_s(o.rel(last.end))}; expected it "
            f"truncated to end at the login timeout +{_s(lt)} ±{tol:.3f}",
            (o.invoke.index, o.end.index, *last.events),
        )
    return None


@mir_check("MIR-6", needs=("opens", "proxy", "refused"), tolerance=True, login_timeout=True,
           need_failover="failover", need_login_timeout=True)
def check_mir_6(call: MirCall) -> Verdict:
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
        f"no attempt past the login timeout {_s(lt)} (+{ctx.params.tolerance:.3f}); the last attempt truncated to it"
    )
    exercised, not_judged = [], []
    for o in ctx.usable:
        violation = _mir_6_open(ctx, o, lt, expected)
        if isinstance(violation, Verdict):
            return violation
        if violation == "not judged":
            not_judged.append(o.invoke.index)
        elif o.failed and o.attempts:
            exercised.append(o)
    if not exercised:
        why = "no open ran into its login timeout (rule not exercised)"
        if not_judged:
            why = f"{len(not_judged)} open(s) past the login timeout by no more than the time the harness lost then"
        return ctx.verdict(UNKNOWN, expected, why, ctx.invokes, not_judged=not_judged)
    o = exercised[-1]
    return ctx.verdict(
        True,
        expected,
        f"{len(exercised)} failed open(s) stayed within the login timeout; last failed at "
        f"+{_s(o.rel(o.end.t))} after {len(o.attempts)} attempt(s)",
        [i for x in exercised for i in (x.invoke.index, x.end.index, *(x.attempts[-1].events if x.attempts else ()))],
        not_judged=not_judged,
    )


@dataclass
class _Mir7Tally:
    """What MIR-7 judged so far: evidence of the delays on schedule and the rounds it could not judge."""

    judged: list[int]
    not_judged: list[int]
    delays: int = 0
    rounds: list[int] = field(default_factory=list)  # the rounds whose following delay was judged


def _mir_7_rounds(
    ctx: MirContext, o: Open, delays: tuple[float, ...], fast_reset: float, expected: str, tally: _Mir7Tally
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
                    f"{_s(gap)} between {atts[0].label()} and {atts[1].label()}; expected "
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
                    f"{_s(gap)}; expected {_s(want)} ±{tol:.3f}",
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
                    False, expected, f"delay after round {r} (timed out) was {_s(gap)}; expected none (≤ {tol:.3f})", ev
                )
        else:
            tally.not_judged.append(atts[-1].events[0])
    return None


@mir_check("MIR-7", needs=("opens", "proxy", "refused"), tolerance=True, need_failover="failover",
           late=("fast_reset",))
def check_mir_7(
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
    tally = _Mir7Tally([], [])
    for o in ctx.usable:
        violation = _mir_7_rounds(ctx, o, schedule, fast_reset, expected, tally)
        if violation is not None:
            return violation
    if not tally.judged:
        return ctx.verdict(
            UNKNOWN,
            expected,
            "no round of fast refusals / inactive answers followed by another round",
            ctx.invokes,
            not_judged=tally.not_judged,
        )
    return ctx.verdict(
        True,
        expected,
        f"{tally.delays} delay(s) after fast rounds on schedule",
        tally.judged,
        not_judged=tally.not_judged,
        delayed_rounds=sorted(set(tally.rounds)),
    )


def _mir_8_open(ctx: MirContext, o: Open, window: float, expected: str) -> Verdict | list[Attempt] | None:
    """MIR-8 on one open: its violation, else the attempts inside the window, or None when the open
    was not observed for the whole window without connecting."""
    stop = o.t0 + window
    if o.end is not None and o.end.t <= stop and (o.aborted or o.end.type == "op.info"):
        return None  # the application ended it within the window: not observed long enough
    if o.end is not None and o.end.type != "op.ok" and o.end.t <= stop:
        return ctx.verdict(
            False,
            expected,
            f"open at event {o.invoke.index} gave up after {_s(o.rel(o.end.t))} with no "
            f"login timeout ({o.end.type}: {str(o.end.get('error'))[:60]})",
            (o.invoke.index, o.end.index),
        )
    if (o.ok and o.end is not None and o.end.t <= stop) or ctx.horizon < stop:
        return None
    inside = [a for a in o.attempts if a.start <= stop]
    bad = _alternation_violation(inside)
    if bad is not None:
        a, want = bad
        return ctx.verdict(
            False, expected, f"{a.label()} went to the {a.role} partner; expected {want}", (o.invoke.index, *a.events)
        )
    late = [a for a in inside if a.start >= o.t0 + window / 2]
    for role in ("initial", "failover"):
        if not any(a.role == role for a in late):
            last = [a for a in inside if a.role == role]
            when = f"last at +{_s(o.rel(last[-1].start))}" if last else "none at all"
            return ctx.verdict(
                False,
                expected,
                f"no attempt to the {role} partner in the second half of the window ({when})",
                (o.invoke.index, *(last[-1].events if last else ())),
            )
    return inside


@mir_check("MIR-8", needs=("opens", "proxy", "refused"), need_failover="failover")
def check_mir_8(call: MirCall, *, window: float | None = None, login_timeout: float | None = None) -> Verdict:
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
    expected = f"still alternating initial/failover {_s(window)} after the open began; no failure"
    judged: list[tuple[Open, list[Attempt]]] = []
    for o in ctx.usable:
        seen = _mir_8_open(ctx, o, window, expected)
        if isinstance(seen, Verdict):
            return seen
        if seen is not None:
            judged.append((o, seen))
    if not judged:
        return ctx.verdict(UNKNOWN, expected, "no open observed for the whole window without connecting", ctx.invokes)
    o, inside = judged[-1]
    return ctx.verdict(
        True,
        expected,
        f"{len(inside)} attempts alternating within {_s(window)}; last started at +{_s(o.rel(inside[-1].start))}",
        [i for a in inside[-4:] for i in a.events],
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


def _mir_9_attempt(ctx: MirContext, o: Open, a: Attempt, cache: list[str] | None, expected: str) -> Verdict | None:
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
class _Mir9Cache:
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


@mir_check("MIR-9", needs=("opens", "proxy", "refused", "partner"),
           need_failover="failover (the partner given in the connection string)")
def check_mir_9(call: MirCall, *, variant: str = "native") -> Verdict:
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
    cache = _Mir9Cache(initial=ctx.params.initial)
    judged: list[int] = []
    n_judged = 0
    usable = {id(o) for o in ctx.usable}
    for o in ctx.opens:
        if id(o) in usable:
            for a in o.attempts:
                violation = _mir_9_attempt(ctx, o, a, cache.current, expected)
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


def _mir_10_first(ctx: MirContext, first: Open, prin: Sequence[str], should: bool, expected: str) -> Verdict:
    """MIR-10 on the decided first open: it must succeed (on one of ``prin``) iff ``should``."""
    assert first.end is not None
    ev_first = (first.invoke.index, first.end.index)
    if first.ok != should:
        return ctx.verdict(
            False,
            expected,
            f"first open {'succeeded' if first.ok else 'failed'} after {_s(first.rel(first.end.t))}"
            f" ({len(first.attempts)} attempt(s))",
            ev_first + tuple(i for a in first.attempts for i in a.events),
        )
    if not first.ok:
        return ctx.verdict(
            True,
            expected,
            f"first open failed after {_s(first.rel(first.end.t))} and {len(first.attempts)} "
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


@mir_check("MIR-10", needs=("opens", "proxy", "roles"), need_failover="failover")
def check_mir_10(call: MirCall, *, principal: PartnerNames = None) -> Verdict:
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
    return _mir_10_first(ctx, first, prin, should, expected)


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
                    f"connection to {e.get('proxy')} accepted {_s(e.t - closed.t)} after the break "
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
                    f"{e.get('f')} op {e.get('op_id')} succeeded {_s(e.t - tb)} after the "
                    "connection broke, without a new open",
                    (closed.index, inv.index, e.index),
                )
            return closed.index, e.index
    return None


def _mir_11_open(ctx: MirContext, o: Open, expected: str) -> Verdict | tuple[int, int] | None:
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


@mir_check("MIR-11", needs=("opens", "proxy", "ops"))
def check_mir_11(call: MirCall) -> Verdict:
    """MIR-11 reconnect is not automatic: when an established connection breaks (its proxy connection
    is closed by the server side, ``by`` ≠ ``client``), the process's next operation fails
    (``op.fail``/``op.info``) unless the application opened again first, and no new connection to a
    partner is accepted outside an open. Exercised by a break followed by an operation."""
    ctx = call.context()
    expected = "a broken connection surfaces as an error; nothing reconnects without a new open"
    judged: list[int] = []
    for o in ctx.usable:
        seen = _mir_11_open(ctx, o, expected)
        if isinstance(seen, Verdict):
            return seen
        if seen is not None:
            judged.extend(seen)
    if not judged:
        return ctx.verdict(
            UNKNOWN, expected, "no established connection broke before an operation of its process", ctx.invokes
        )
    return ctx.verdict(
        True, expected, f"{len(judged) // 2} break(s) surfaced as an error; no automatic reconnect", judged
    )


def _norm_name(text: Any) -> str:
    return " ".join(str(text).split()).lower()


@mir_check("MIR-12", needs=("opens", "proxy"), need_failover="failover")
def check_mir_12(call: MirCall, *, initial_name: str | None = None) -> Verdict:
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
        want = initial_name if initial_name is not None else _open_value(o).get("initial")
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
    if not judged:
        return ctx.verdict(
            UNKNOWN, expected, "no redirected open with a presented_server in its op.ok value", ctx.invokes
        )
    return ctx.verdict(True, expected, "redirected open(s) presented the initial partner name", judged)


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


def _mir_13_attempt(
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
            f"{a.label()} pending at the shutdown was held {_s(a.end - ts)} longer (waited out its retry time)",
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
            f"{a.label()} was closed by the shutdown at +{_s(o.rel(a.end))} but "
            f"{step} came {_s(step_t - a.end)} later; expected ≤ {_s(allow)} +{tol:.3f}",
            (sidx, *a.events, *((nxt.events[0],) if nxt else (o.end.index,))),
        )
    return "judged"


@mir_check("MIR-13", needs=("opens", "proxy", "refused", "shutdowns"), tolerance=True)
def check_mir_13(
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
                seen = _mir_13_attempt(ctx, o, a, stop, schedule, expected)
                if isinstance(seen, Verdict):
                    return seen
                if seen == "judged":
                    judged.extend((stop[2], *a.events))
                elif seen == "not judged":
                    not_judged.append(a.events[0])
    if not judged:
        return ctx.verdict(
            UNKNOWN,
            expected,
            "no attempt was pending when a partner shut down",
            [s for _, _, s in stops],
            not_judged=not_judged,
        )
    return ctx.verdict(
        True, expected, "attempt(s) pending at the shutdown were abandoned at once", judged, not_judged=not_judged
    )
