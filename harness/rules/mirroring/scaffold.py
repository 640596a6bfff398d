"""The scaffold every MIR checker is built on (MIR-1 … MIR-13, RULEBOOK seeds 000/001): the shared
keyword block and its validation (:class:`MirParams`), one rule's view of a history
(:class:`MirContext`, built once by :func:`prepare`) and :func:`mir_rule`, the decorator that gives a
checker body its public signature and registers it under its rule ID. The checkers themselves are in
:mod:`~harness.rules.mirroring.partners`, :mod:`~harness.rules.mirroring.timing` and
:mod:`~harness.rules.mirroring.connections`. See ``docs/mirroring.md``.

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
from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.mirroring.model import (
    DEFAULT_TOLERANCE,
    MAX_TOLERANCE,
    Attempt,
    Open,
    PartnerNames,
    build_opens,
    horizon,
    ordered,
    partner_names,
)
from harness.rules.registry import rule
from harness.rules.verdict import UNKNOWN, Evidence, Text, Validity, Verdict, tallied

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

    def tallied(
        self,
        judged: Sized,
        expected: str,
        *,
        unknown: str,
        kept: Text,
        evidence: Evidence,
        unknown_evidence: Evidence | None = None,
        **extra: Any,
    ) -> Verdict:
        """The rule's verdict once no violation returned early (:func:`~harness.rules.verdict.tally`):
        unknown with ``unknown`` when nothing was judged (evidence: ``unknown_evidence``, by default
        the opens' invokes), else kept with ``kept`` and ``evidence`` (callables are only read then)."""
        told = tallied(
            self.rule_id,
            expected,
            judged=judged,
            kept=kept,
            evidence=evidence,
            unknown=unknown,
            unknown_evidence=self.invokes if unknown_evidence is None else unknown_evidence,
        )
        return self.verdict(told.valid, expected, told.observed, told.evidence, **extra)


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


def mir_rule(rule_id: str, **options: Any) -> Callable[[Callable[..., Verdict]], MirChecker]:
    """Build the public checker of ``rule_id`` with :func:`mir_check` (``options`` are its keywords)
    and register it in :mod:`harness.rules.registry` under that ID (:func:`~harness.rules.registry.rule`):
    the one way a MIR checker is declared. Returns the registry's recording checker."""

    def decorate(body: Callable[..., Verdict]) -> MirChecker:
        return rule(rule_id)(mir_check(rule_id, **options)(body))

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


def seconds(x: float) -> str:
    return f"{x:.3f} s"


def open_value(o: Open) -> dict[str, Any]:
    """The ``op.invoke`` value of an open (a dict; empty when the client recorded none)."""
    return o.value if isinstance(o.value, dict) else {}


def database_missing(o: Open) -> bool | None:
    """Whether the open's connection string lacks a database (MIR-2); None when it does not say."""
    value = open_value(o)
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


def alternation_violation(attempts: Iterable[Attempt]) -> tuple[Attempt, str] | None:
    """The first attempt off the initial, failover, initial … sequence and the role it should have."""
    for a in attempts:
        want = "initial" if a.n % 2 == 1 else "failover"
        if a.role != want:
            return a, want
    return None
