"""What every ACR-1 … ACR-9 checker does around its own rule (RULEBOOK, seed 003): refuse a history it
cannot judge (*unknown*: no ``acr.topology`` event, or the client judged in the other mode), name the
events of a failed call, look for the replay of the special registers on the next server session,
and close with *unknown* when the situation never arose. Pure: no I/O."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules import registry
from harness.rules.acr.model import Model, Op, Session, Transport, first_of, sets_in
from harness.rules.registry import Checker, rule, rule_params_from_meta
from harness.rules.verdict import UNKNOWN, Verdict, tallied

MODES = ("seamless", "non-seamless")


#: What the ACR suites record of each application's client (``meta["acr_client"][process]``): its
#: mode and the options it was built with; the checker parameters that come from it.
SCHEDULE_OPTIONS = ("max_acr_retries", "acr_retry_interval")


def client_params(meta: Mapping[str, Any], process: str = "app") -> dict[str, Any]:
    """The parameters a history records for the client of ``process`` (the suites write
    ``meta["acr_client"][process] = {"mode", "options"}`` when they build it): ``mode`` (ACR-2, 3, 5,
    7 judge one mode each) and the retry schedule ``max_acr_retries`` / ``acr_retry_interval``
    (ACR-2). Empty for a history that records none."""
    table = meta.get("acr_client")
    info = table.get(process) if isinstance(table, Mapping) else None
    if not isinstance(info, Mapping):
        return {}
    out: dict[str, Any] = {}
    if info.get("mode") in MODES:
        out["mode"] = info["mode"]
    options = info.get("options")
    if isinstance(options, Mapping):
        out.update({k: options[k] for k in SCHEDULE_OPTIONS if k in options})
    return out


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES` (ACR-2/3/5 judge seamless, ACR-7 non-seamless mode);
    else a :class:`ConfigError` naming the modes."""
    if mode not in MODES:
        raise ConfigError(f"ACR: mode must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def no_topology(rule: str, expected: str) -> Verdict:
    """*Unknown* for ``rule``: the history has no ``acr.topology`` event (not an ACR history)."""
    return Verdict(rule, UNKNOWN, expected=expected, observed="no acr.topology event: not an ACR history")


def unjudgeable(model: Model, rule: str, expected: str, mode: str | None = None,
                judged_in: str = "seamless") -> Verdict | None:
    """The *unknown* verdict of a history ``rule`` cannot judge, else None: no ``acr.topology``
    event, or (with ``mode``) a client run in another mode than ``judged_in``, the one the rule
    speaks of."""
    if not model.has_topology:
        return no_topology(rule, expected)
    if mode is not None and check_mode(mode) != judged_in:
        return Verdict(rule, UNKNOWN, expected=expected, observed=f"the client is judged in {mode} mode")
    return None


def describe(op: Op) -> str:
    """How a call ended, for a verdict's ``observed``: returned normally, or the error and SQLSTATE."""
    what = op.sql or op.f
    if op.status == "ok":
        return f"{what!r} returned normally"
    return f"{what!r} raised {op.fields.get('error_class', op.status)} (SQLSTATE {op.fields.get('sqlstate')})"


def end_of(op: Op) -> int:
    """The event that ends ``op`` (its invoke while it is still pending)."""
    return op.end or op.invoke


def failed_under(broken: Transport, op: Op) -> list[int]:
    """The evidence of a call whose transport broke: the break, the call and how it ended."""
    return [broken.index, op.invoke, end_of(op)]


def replayed(session: Session | None, wanted: list[str], until: float | None = None, *,
             before: int | None = None) -> tuple[bool, list[str], list[int]]:
    """Whether ``session`` received exactly ``wanted`` SETs (in order) before the statement of event
    ``before`` (the server's log order) or up to the application's time ``until`` (ACR-2/3/4/7's
    replay of the special registers), the SETs it got and their events."""
    if session is None:
        return False, [], []
    got = sets_in(session, until, before=before)
    return [s for s, _ in got] == wanted, [s for s, _ in got], [i for _, i in got]


def retry_rounds(tries: Sequence[Transport]) -> list[list[Transport]]:
    """The client's connection attempts of one call, cut into rounds over the server list (ACR-2's
    ``maxAcrRetries`` counts them): a round ends with the group-wide address (ACR-6), or, for a client
    that never tries it, where an address of the round comes again."""
    rounds: list[list[Transport]] = []
    current: list[Transport] = []
    for tr in tries:
        if current and (current[-1].address.kind == "group-address"
                        or any(c.address.name == tr.address.name for c in current)):
            rounds.append(current)
            current = []
        current.append(tr)
    if current:
        rounds.append(current)
    return rounds


class Replay(NamedTuple):
    """The replay the first new server session received before a statement (ACR-2/4/7)."""

    session: Session | None  # the first server session after the failure that received the statement
    at: tuple[float, int] | None  # when, and at which event, it received it
    ok: bool  # exactly the wanted SETs, in order, before it
    got: list[str]  # the SETs it received before it
    idx: list[int]  # their events


def replay_before(model: Model, after: float, sql: str, wanted: list[str]) -> Replay:
    """Find the first server session after ``after`` that received ``sql`` and judge the SETs it
    received before it against ``wanted`` (:func:`replayed`)."""
    new = next((s for s in model.sessions_after(after) if first_of(s, sql)), None)
    at = first_of(new, sql) if new else None
    ok, got, idx = replayed(new, wanted, before=at[1] if at else None)
    return Replay(new, at, ok, got, idx)


def kept_or_unknown(rule: str, expected: str, judged: Sequence[object], *, unknown: str, kept: str,
                    evidence: list[int]) -> Verdict:
    """The verdict of a checker that found no violation: *unknown* (``unknown`` says what never
    happened) when it judged no call, else kept with ``kept`` and ``evidence``."""
    return tallied(rule, expected, judged=judged, unknown=unknown, kept=kept, evidence=evidence)


def params(rule_id: str, meta: Mapping[str, Any], process: str = "app") -> dict[str, Any]:
    """The parameters of ``rule_id``'s checker a history records: the client's mode and retry
    schedule (:func:`client_params`) where the checker takes them, then ``meta["rule_params"][rule_id]``.
    The suites judge with these, and ``failover-harness check`` re-checks a saved history with the
    same."""
    takes = inspect.signature(registry.get(rule_id).checker).parameters
    out = {k: v for k, v in client_params(meta, process).items() if k in takes}
    if process != "app" and "process" in takes:
        out["process"] = process
    out.update(rule_params_from_meta(rule_id)(meta))
    return out


def judge(events: list[Event], meta: Mapping[str, Any], *rules: str, process: str = "app") -> list[Verdict]:
    """Each of ``rules`` (``"ACR-2"`` …) judged on ``events`` with the parameters the history's
    ``meta`` records for ``process`` (:func:`params`): what the suites check, and what
    ``failover-harness check`` finds again offline."""
    return [registry.get(r).checker(events, **params(r, meta, process)) for r in rules]


def acr_rule(rule_id: str) -> Callable[[Checker], Checker]:
    """Register an ACR checker under ``rule_id`` (:func:`harness.rules.registry.rule`), its parameters
    read from the history as :func:`params` reads them: the one way an ACR checker is declared."""

    def params_from_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
        return params(rule_id, meta)

    return rule(rule_id, params_from_meta=params_from_meta)
