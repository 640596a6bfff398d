"""MIR-1 … MIR-13 - the SQL Server database mirroring client rules (RULEBOOK, seeds 000/001).

Pure checkers ``check_mir_N(events, **params) -> Verdict``; no I/O. See ``docs/mirroring.md``.

Observation model ("observe from outside", ARCHITECTURE):

* An **open** is ``op.invoke`` (``f="open"``) of a client process up to its ``op.ok`` / ``op.fail`` /
  ``op.info`` (same ``process`` and ``op_id``); an open without an end is still running.
* An **attempt** is one TCP connection to a partner as seen at that partner's fault proxy:
  ``conn.accepted`` … ``conn.closed`` (same ``proxy`` and ``conn_id``). A partner is named by the
  checker parameters ``initial`` / ``failover``; a name matches an event's ``proxy``, ``node`` or
  ``listen`` field (``host:port``). Only connections to the named partners count: pass proxy names
  or listen addresses when replication links are proxied too (their ``node`` is a database node).
  The attempt belongs to the open whose time window contains its ``conn.accepted``; a connection
  inside two opens' windows (concurrent opens of two processes) makes both opens undecidable.
* A refused connect (proxy disabled, port closed) never reaches a proxy. For those the checker falls
  back to the client's own ``attempt.start``/``attempt.end`` events: a client attempt that no proxy
  connection matches (by the client socket's ``local`` address = ``conn.accepted.client``, else same
  partner with the accept inside the attempt ±``MATCH_SLACK``) is counted, marked ``source="client"``,
  and the verdict's ``details["client_view_attempts"]`` lists the event indices used
  (``use_client_view=False`` turns the fallback off). A matched attempt is ordered by the client's
  start (a busy proxy may stamp its accept late) and timed by the proxy.
* The outcome of a proxy-observed attempt is read from the wire: ``conn.upstream_failed`` → refused
  (the partner's port refused the proxy); the last attempt of a successful open that stays open →
  opened; bytes from the server and then closed → inactive (the server answered and the login did not
  succeed) unless the client calls it ``error`` (a non-retryable answer); closed by the client with
  no byte from the server → timeout (abandoned at its retry time); closed by the server/proxy/toxic
  with no byte → reset; never closed → held. When the client's matching ``attempt.end`` says
  ``timeout`` it wins over ``inactive`` (a slow server that answered part of the login).
* Rounds: with a failover partner, attempt ``k`` (1-based, in time order) is in round ``ceil(k/2)``
  (the initial and the failover attempt of the round), whatever partner it actually went to.

Tolerances are explicit parameters (``tolerance``, default ±0.020 s; more than ±0.050 s or ≤ 0 is a
ConfigError). A verdict is ``"unknown"`` - never a pass - when the events a rule needs are absent or
the rule was not exercised (e.g. MIR-5 with no attempt that ran into its retry time).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.verdict import UNKNOWN, Verdict

DEFAULT_TOLERANCE = 0.020
MAX_TOLERANCE = 0.050
RETRY_FRACTION = 0.08
DEFAULT_DELAYS: tuple[float, ...] = (0.1, 0.2, 0.4, 0.8, 1.0)
FAST_OUTCOMES = frozenset({"refused", "inactive"})
DEFAULT_FAST_RESET = 0.050
#: How far a proxy's conn.accepted may lie outside the client's attempt.start..attempt.end and still
#: be that attempt (when the client did not record its socket's ``local`` address).
MATCH_SLACK = 0.010
END_TYPES = ("op.ok", "op.fail", "op.info")
SHUTDOWN_FAULTS = frozenset({"stop", "kill", "shutdown"})

PartnerNames = str | Sequence[str] | None


# ----------------------------------------------------------------------------------- model & helpers


@dataclass
class Attempt:
    """One connection attempt of one open, merged from the proxy view and the client's view."""

    n: int
    role: str  # "initial" / "failover"
    start: float
    end: float | None
    outcome: str
    source: str  # "proxy" / "client"
    events: tuple[int, ...]
    ids: frozenset[str]
    round: int = 0
    proxy: str | None = None
    conn_id: Any = None
    closed_by: str | None = None
    client_outcome: str | None = None
    bytes_down: int = 0
    matched: bool = False
    peer: str | None = None  # the client's host:port as the proxy saw it (conn.accepted.client)
    order_t: float | None = None  # the matched client attempt.start: orders attempts (proxy clocks lag)

    @property
    def duration(self) -> float | None:
        """Seconds the attempt was held (None while it is still held)."""
        return None if self.end is None else self.end - self.start

    def label(self) -> str:
        """``attempt 3 (initial, round 2)``."""
        where = f", round {self.round}" if self.round else ""
        return f"attempt {self.n} ({self.role}{where})"


@dataclass
class Open:
    """One ``open`` operation of one client process and the attempts attributed to it."""

    process: Any
    op_id: Any
    invoke: Event
    end: Event | None
    value: Any
    attempts: list[Attempt] = field(default_factory=list)
    ambiguous: bool = False
    client_view: list[int] = field(default_factory=list)

    @property
    def t0(self) -> float:
        return self.invoke.t

    @property
    def ok(self) -> bool:
        return self.end is not None and self.end.type == "op.ok"

    @property
    def failed(self) -> bool:
        """Ended ``op.fail`` by the client itself (an open the application aborted does not count)."""
        return self.end is not None and self.end.type == "op.fail" and not self.aborted

    @property
    def aborted(self) -> bool:
        """The application aborted the open (``op.fail`` with ``reason="aborted"``)."""
        return self.end is not None and self.end.type == "op.fail" and self.end.get("reason") == "aborted"

    def rel(self, t: float) -> float:
        """Seconds since the open was invoked."""
        return t - self.t0


def _names(value: PartnerNames) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _hostport(text: str) -> tuple[str, str] | None:
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return (host, rest.lstrip(":,"))
    for sep in (":", ","):
        if text.count(sep) == 1:
            host, _, port = text.partition(sep)
            if port.strip().isdigit():
                return host.strip().lower(), port.strip()
    return None


_LOCAL = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "::", ""}


def _same(name: str, ident: str) -> bool:
    if name == ident:
        return True
    a, b = _hostport(name), _hostport(ident)
    if a is None or b is None or a[1] != b[1]:
        return False
    return a[0] == b[0] or (a[0] in _LOCAL and b[0] in _LOCAL)


def _matches(name: str, ids: Iterable[str]) -> bool:
    return any(_same(name, i) for i in ids)


def _event_ids(e: Event) -> frozenset[str]:
    return frozenset(str(e.get(k)) for k in ("proxy", "node", "listen") if e.get(k) is not None)


def _tolerance(value: float, name: str = "tolerance") -> float:
    try:
        tol = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of seconds, not {value!r}") from None
    if not math.isfinite(tol) or tol <= 0:
        raise ConfigError(f"{name} must be > 0 seconds, not {value!r}")
    if tol > MAX_TOLERANCE:
        raise ConfigError(
            f"{name}={tol:.3f} s is looser than the ±{MAX_TOLERANCE:.3f} s the harness "
            f"accepts; use at most {MAX_TOLERANCE}"
        )
    return tol


def _login_timeout(value: Any, rule: str, required: bool = True) -> float | None:
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


def _require_partner(value: PartnerNames, rule: str, what: str) -> list[str]:
    names = _names(value)
    if not names:
        raise ConfigError(
            f"{rule} needs {what}: the fault proxy name, node name or listen address (host:port) of that partner"
        )
    return names


def retry_time(round_: int, base: float) -> float:
    """MIR-5: ``RetryTime(round r) = r × 0.08 × LT``."""
    return round_ * RETRY_FRACTION * base


def retry_delay(round_: int, delays: Sequence[float] = DEFAULT_DELAYS) -> float:
    """MIR-7: the delay after round ``round_`` (1-based): 0.1, 0.2, 0.4, 0.8, then 1.0 s."""
    return float(delays[min(round_, len(delays)) - 1])


def _ordered(events: Iterable[Event]) -> list[Event]:
    return sorted(events, key=lambda e: (e.t, e.index))


def _opens(
    events: list[Event],
    initial: Sequence[str],
    failover: Sequence[str],
    *,
    process: Any = None,
    use_client_view: bool = True,
    rounds: bool = True,
) -> list[Open]:
    """Group the history into opens with their attempts (see the module docstring)."""
    ev = _ordered(events)
    opens: list[Open] = []
    pending: dict[tuple[Any, Any], Open] = {}
    for e in ev:
        if e.type == "op.invoke" and e.get("f") == "open":
            o = Open(e.get("process"), e.get("op_id"), e, None, e.get("value"))
            opens.append(o)
            pending[(o.process, o.op_id)] = o
        elif e.type in END_TYPES and e.get("f") in ("open", None):
            o = pending.pop((e.get("process"), e.get("op_id")), None)
            if o is not None:
                o.end = e

    def role_of(ids: Iterable[str]) -> str | None:
        ids = list(ids)
        if any(_matches(n, ids) for n in initial):
            return "initial"
        if any(_matches(n, ids) for n in failover):
            return "failover"
        return None

    def owners(t: float, proc: Any = None) -> list[Open]:
        return [
            o for o in opens if o.t0 <= t <= (o.end.t if o.end else math.inf) and (proc is None or o.process == proc)
        ]

    # proxy view
    accepted: dict[tuple[Any, Any], Event] = {}
    closed: dict[tuple[Any, Any], Event] = {}
    upfail: set[tuple[Any, Any]] = set()
    for e in ev:
        key = (e.get("proxy"), e.get("conn_id"))
        if e.type == "conn.accepted":
            accepted.setdefault(key, e)
        elif e.type == "conn.closed":
            closed.setdefault(key, e)
        elif e.type == "conn.upstream_failed":
            upfail.add(key)
    for key, acc in accepted.items():
        role = role_of(_event_ids(acc))
        if role is None:
            continue
        own = owners(acc.t)
        if len(own) > 1:
            for o in own:
                o.ambiguous = True
            continue
        if not own:
            continue
        o = own[0]
        cl = closed.get(key)
        ev_idx = (acc.index,) + ((cl.index,) if cl else ())
        o.attempts.append(
            Attempt(
                0,
                role,
                acc.t,
                cl.t if cl else None,
                "",
                "proxy",
                ev_idx,
                _event_ids(acc),
                proxy=acc.get("proxy"),
                conn_id=acc.get("conn_id"),
                closed_by=cl.get("by") if cl else None,
                client_outcome="refused" if key in upfail else None,
                bytes_down=int((cl.get("bytes_down") or 0) if cl else 0),
                peer=str(acc.get("client")) if acc.get("client") else None,
            )
        )
    # client view
    starts: dict[tuple[Any, Any], Event] = {}
    client: list[tuple[Event, Event | None]] = []
    for e in ev:
        key = (e.get("process"), e.get("attempt"))
        if e.type == "attempt.start":
            if key in starts:
                client.append((starts.pop(key), None))
            starts[key] = e
        elif e.type == "attempt.end" and key in starts:
            client.append((starts.pop(key), e))
    client.extend((s, None) for s in starts.values())
    client.sort(key=lambda pair: (pair[0].t, pair[0].index))
    for s, en in client:
        own = owners(s.t, s.get("process"))
        if len(own) != 1:
            continue
        o = own[0]
        role = s.get("target") if s.get("target") in ("initial", "failover") else None
        addr = s.get("address")
        ids = frozenset([str(addr)]) if addr is not None else frozenset()
        if role is None or addr is not None:
            by_addr = role_of(ids) if ids else None
            role = by_addr or role
        if role is None:
            continue
        outcome = en.get("outcome") if en is not None else None
        local = en.get("local") if en is not None else None
        match = None
        if local:  # the client's socket address, as the proxy saw it: an exact match
            match = next(
                (
                    a
                    for a in o.attempts
                    if a.source == "proxy" and not a.matched and a.peer is not None and _same(str(local), a.peer)
                ),
                None,
            )
        if match is None:  # else: the earliest unmatched proxy connection during the attempt
            hi = (en.t if en is not None else math.inf) + MATCH_SLACK
            match = next(
                (
                    a
                    for a in sorted(o.attempts, key=lambda x: x.start)
                    if a.source == "proxy" and a.role == role and not a.matched and s.t - MATCH_SLACK <= a.start <= hi
                ),
                None,
            )
        if match is not None:
            match.matched = True
            match.order_t = s.t
            if match.client_outcome is None:
                match.client_outcome = outcome
            continue
        if not use_client_view:
            continue
        idx = (s.index,) + ((en.index,) if en is not None else ())
        o.attempts.append(
            Attempt(
                0,
                role,
                s.t,
                en.t if en is not None else None,
                outcome or "held",
                "client",
                idx,
                ids or frozenset([role]),
                client_outcome=outcome,
            )
        )
        o.client_view.extend(idx)
    # number, classify
    for o in opens:
        o.attempts.sort(key=lambda a: a.start if a.order_t is None else min(a.start, a.order_t))
        for k, a in enumerate(o.attempts, 1):
            a.n = k
            a.round = (k + 1) // 2 if rounds else k
            if a.source == "proxy":
                a.outcome = _classify(a, o, k == len(o.attempts))
    if process is not None:
        opens = [o for o in opens if o.process == process]
    return opens


def _classify(a: Attempt, o: Open, last: bool) -> str:
    if a.client_outcome == "refused" and a.closed_by != "client":
        return "refused"
    if last and o.ok and (a.end is None or (o.end is not None and a.end >= o.end.t)):
        return "opened"
    if a.end is None:
        return "held"
    down = a.bytes_down
    if a.client_outcome == "error":
        return "error"
    if a.closed_by == "client":
        if down == 0 or a.client_outcome == "timeout":
            return "timeout"
        return "inactive"
    if down > 0:
        return "inactive"
    return "reset"


def _end_time(a: Attempt, o: Open, horizon: float) -> float:
    """When the attempt stopped being an attempt: the open's success for the opened one (the
    connection lives on), its close otherwise, or the end of the history while still held."""
    if a.outcome == "opened" and o.end is not None:
        return o.end.t
    if a.end is not None:
        return a.end
    return horizon


def _horizon(events: list[Event]) -> float:
    return max((e.t for e in events), default=0.0)


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


def _verdict(
    rule: str,
    valid: Any,
    expected: str,
    observed: str,
    evidence: Iterable[int],
    opens: Sequence[Open],
    **extra: Any,
) -> Verdict:
    return Verdict(
        rule,
        valid,
        expected=expected,
        observed=observed,
        evidence=tuple(sorted(set(evidence))),
        details=_details(opens, **extra),
    )


def _s(x: float) -> str:
    return f"{x:.3f} s"


def _usable(opens: list[Open]) -> list[Open]:
    return [o for o in opens if not o.ambiguous]


# ------------------------------------------------------------------------------------------- checkers


def check_mir_1(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    process: Any = None,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-1 initial partner first: every open's first attempt goes to the initial partner."""
    rule = "MIR-1"
    ini = _require_partner(initial, rule, "initial")
    opens = _opens(events, ini, _names(failover), process=process, use_client_view=use_client_view)
    expected = "every open starts with an attempt to the initial partner"
    judged = [o for o in _usable(opens) if o.attempts]
    for o in judged:
        first = o.attempts[0]
        if first.role != "initial":
            return _verdict(
                rule,
                False,
                expected,
                f"open at event {o.invoke.index} started with attempt 1 to the failover "
                f"partner at +{_s(o.rel(first.start))}",
                (o.invoke.index, *first.events),
                opens,
            )
    if not judged:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no open with an observed attempt to a named partner",
            [o.invoke.index for o in opens],
            opens,
        )
    return _verdict(
        rule,
        True,
        expected,
        f"{len(judged)} open(s), each started with the initial partner",
        [i for o in judged for i in (o.invoke.index, *o.attempts[0].events)],
        opens,
    )


def _open_value(o: Open) -> dict[str, Any]:
    return o.value if isinstance(o.value, dict) else {}


def _database_missing(o: Open) -> bool | None:
    value = _open_value(o)
    if "database" in value:
        db = value.get("database")
        return db is None or not str(db).strip()
    text = value.get("connstring")
    if isinstance(text, str):
        from harness.clients.connstring import ConnectionStringError, parse_connection_string

        try:
            parse_connection_string(text)
        except ConnectionStringError as exc:
            return "MIR-2" in str(exc)
        return False
    return None


def check_mir_2(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    process: Any = None,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-2 database required: an open whose connection string has no database fails (``op.fail``)
    without any connection attempt.

    The open's ``op.invoke`` ``value`` must carry ``database`` or ``connstring`` (the client adapters
    of this package record both). Attempts are those to the named partners; without partner names,
    any ``conn.accepted`` inside the open's window and any client ``attempt.start`` count."""
    rule = "MIR-2"
    ini, fo = _names(initial), _names(failover)
    opens = _opens(events, ini, fo, process=process, use_client_view=use_client_view)
    expected = "an open without a database name fails at once, with no connection attempt"
    judged = []
    ordered = _ordered(events)
    for o in opens:
        if _database_missing(o) is not True:
            continue
        if o.end is None:
            continue
        hi = o.end.t
        tries = [a.events[0] for a in o.attempts]
        if not ini and not fo:
            tries += [
                e.index
                for e in ordered
                if e.type in ("conn.accepted", "attempt.start")
                and o.t0 <= e.t <= hi
                and (e.type == "conn.accepted" or e.get("process") == o.process)
            ]
        if o.end.type != "op.fail":
            return _verdict(
                rule,
                False,
                expected,
                f"open at event {o.invoke.index} without a database ended {o.end.type}",
                (o.invoke.index, o.end.index, *tries),
                opens,
            )
        if tries:
            return _verdict(
                rule,
                False,
                expected,
                f"open at event {o.invoke.index} without a database made {len(set(tries))} "
                "connection attempt(s) before failing",
                (o.invoke.index, *tries),
                opens,
            )
        judged.append(o)
    if not judged:
        return _verdict(rule, UNKNOWN, expected, "no finished open without a database in the history", [], opens)
    return _verdict(
        rule,
        True,
        expected,
        f"{len(judged)} open(s) without a database failed with no attempt "
        f"(error: {str(judged[0].end.get('error'))[:80]!r})",
        [i for o in judged for i in (o.invoke.index, o.end.index)],
        opens,
    )


def check_mir_3(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    login_timeout: float | None = None,
    process: Any = None,
    tolerance: float = DEFAULT_TOLERANCE,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-3 no failover partner, no alternation: the client (given no failover partner) only ever
    tries the initial partner and fails no later than the login timeout.

    ``failover`` names the partner that was NOT in the connection string (the mirror): no attempt may
    reach it. Exercised when some attempt to the initial partner did not open."""
    rule = "MIR-3"
    ini = _require_partner(initial, rule, "initial")
    other = _require_partner(failover, rule, "failover (the mirror the client was not told about)")
    tol = _tolerance(tolerance)
    lt = _login_timeout(login_timeout, rule, required=False)
    opens = _opens(events, ini, other, process=process, use_client_view=use_client_view, rounds=False)
    expected = "only the initial partner is tried" + (f", and the open fails by {_s(lt)} ±{tol:.3f}" if lt else "")
    exercised = []
    for o in _usable(opens):
        for a in o.attempts:
            if a.role == "failover":
                return _verdict(
                    rule,
                    False,
                    expected,
                    f"{a.label()} went to the partner not named in the connection string at +{_s(o.rel(a.start))}",
                    (o.invoke.index, *a.events),
                    opens,
                )
        if lt and o.end is not None and o.end.type != "op.ok" and o.rel(o.end.t) > lt + tol:
            return _verdict(
                rule,
                False,
                expected,
                f"open at event {o.invoke.index} failed after {_s(o.rel(o.end.t))}, past the login timeout {_s(lt)}",
                (o.invoke.index, o.end.index),
                opens,
            )
        if any(a.role == "initial" and a.outcome != "opened" for a in o.attempts):
            exercised.append(o)
    if not exercised:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no open with a failed attempt to the initial partner (rule not exercised)",
            [o.invoke.index for o in opens],
            opens,
        )
    n = sum(len(o.attempts) for o in exercised)
    return _verdict(
        rule,
        True,
        expected,
        f"{len(exercised)} open(s), {n} attempt(s), all to the initial partner",
        [i for o in exercised for a in o.attempts for i in a.events],
        opens,
    )


def _alternation_violation(o: Open) -> tuple[Attempt, str] | None:
    for a in o.attempts:
        want = "initial" if a.n % 2 == 1 else "failover"
        if a.role != want:
            return a, want
    return None


def check_mir_4(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    login_timeout: float | None = None,
    process: Any = None,
    tolerance: float = DEFAULT_TOLERANCE,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-4 alternation: attempts go initial, failover, initial, failover … until an attempt opens or
    the login timeout expires (a failed open must not give up earlier than ``login_timeout`` −
    ``tolerance``, unless its last attempt ended in a non-retryable ``error``).

    With ``login_timeout=None`` (no timeout) any failed open gave up early. Exercised when some open
    needed a second attempt or failed."""
    rule = "MIR-4"
    ini = _require_partner(initial, rule, "initial")
    fo = _require_partner(failover, rule, "failover")
    tol = _tolerance(tolerance)
    lt = _login_timeout(login_timeout, rule, required=False)
    opens = _opens(events, ini, fo, process=process, use_client_view=use_client_view)
    expected = "attempts alternate initial, failover, initial … until one opens or the login timeout expires"
    exercised = []
    for o in _usable(opens):
        bad = _alternation_violation(o)
        if bad is not None:
            a, want = bad
            seq = ",".join("I" if x.role == "initial" else "F" for x in o.attempts[: a.n])
            return _verdict(
                rule,
                False,
                expected,
                f"{a.label()} went to the {a.role} partner; expected {want} (sequence {seq})",
                (o.invoke.index, *a.events),
                opens,
            )
        if o.failed and not o.attempts and _database_missing(o) is False:
            # No attempt seen anywhere (refused connects never reach a proxy, and this client did
            # not report its own): no server answered, so no non-retryable answer can explain an
            # early end - giving up before the login timeout is the client's own doing.
            gave_up = o.rel(o.end.t)
            if lt is None or gave_up < lt - tol:
                limit = f"{_s(lt - gave_up)} before the login timeout {_s(lt)}" if lt else "with no login timeout"
                return _verdict(
                    rule,
                    False,
                    expected,
                    f"open at event {o.invoke.index} gave up after {_s(gave_up)}, {limit}, with no "
                    "attempt seen (refused connects are invisible to the proxies and the client "
                    "recorded none)",
                    (o.invoke.index, o.end.index),
                    opens,
                )
        if o.failed and o.attempts:
            last = o.attempts[-1]
            gave_up = o.rel(o.end.t)
            if last.outcome != "error" and (lt is None or gave_up < lt - tol):
                limit = f"{_s(lt - gave_up)} before the login timeout {_s(lt)}" if lt else "with no login timeout"
                return _verdict(
                    rule,
                    False,
                    expected,
                    f"open at event {o.invoke.index} gave up after {_s(gave_up)} and "
                    f"{len(o.attempts)} attempt(s), {limit}",
                    (o.invoke.index, o.end.index, *last.events),
                    opens,
                )
        if len(o.attempts) >= 2 or o.failed:
            exercised.append(o)
    if not exercised:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no open needed a second attempt or failed (alternation not exercised)",
            [o.invoke.index for o in opens],
            opens,
        )
    return _verdict(
        rule,
        True,
        expected,
        f"{len(exercised)} open(s) alternated over {sum(len(o.attempts) for o in exercised)} attempt(s)",
        [i for o in exercised for a in o.attempts for i in a.events],
        opens,
    )


def check_mir_5(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    login_timeout: float | None = None,
    retry_base: float | None = None,
    process: Any = None,
    tolerance: float = DEFAULT_TOLERANCE,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-5 retry time schedule: attempt ``k`` (round ``r = ceil(k/2)``) is abandoned at
    ``RetryTime = r × 0.08 × LT`` (± ``tolerance``), never held longer; an attempt that fails or opens
    earlier must do so within its retry time. The last attempt may be cut to the time left before
    the login timeout (MIR-6).

    ``retry_base`` replaces LT as the base of the schedule for a client with no login timeout.
    Exercised when some attempt ran into its retry time (or a violation is seen)."""
    rule = "MIR-5"
    ini = _require_partner(initial, rule, "initial")
    fo = _require_partner(failover, rule, "failover")
    tol = _tolerance(tolerance)
    lt = _login_timeout(login_timeout, rule, required=False)
    base = lt if lt is not None else retry_base
    if base is None:
        raise ConfigError("MIR-5 needs login_timeout (or retry_base for a client with no login timeout)")
    horizon = _horizon(events)
    opens = _opens(events, ini, fo, process=process, use_client_view=use_client_view)
    expected = f"attempt in round r held at most r × 0.08 × {base:g} s (±{tol:.3f}), abandoned at that time"
    timed = []
    for o in _usable(opens):
        deadline = o.t0 + lt if lt is not None else math.inf
        for a in o.attempts:
            rt = retry_time(a.round, base)
            allowed = max(0.0, min(rt, deadline - a.start))
            held = _end_time(a, o, horizon) - a.start
            what = "took" if a.outcome == "opened" else "held"
            exp = (
                f"expected {_s(allowed)} ±{tol:.3f}"
                if a.outcome == "timeout"
                else f"expected at most {_s(allowed)} +{tol:.3f}"
            )
            if allowed < rt - 1e-9:
                exp += f" (retry time {_s(rt)} cut by the login timeout)"
            if a.outcome == "timeout" and abs(held - allowed) > tol:
                return _verdict(
                    rule,
                    False,
                    expected,
                    f"{a.label()} held {_s(held)}; {exp}",
                    (o.invoke.index, *a.events),
                    opens,
                    retry_time=rt,
                    allowed=allowed,
                    held=held,
                )
            if held > allowed + tol and (
                a.end is not None or a.outcome == "opened" or horizon > a.start + allowed + tol
            ):
                return _verdict(
                    rule,
                    False,
                    expected,
                    f"{a.label()} {what} {_s(held)} ({a.outcome}); {exp}",
                    (o.invoke.index, *a.events, *((o.end.index,) if a.outcome == "opened" else ())),
                    opens,
                    retry_time=rt,
                    allowed=allowed,
                    held=held,
                )
            if a.outcome == "timeout":
                timed.append((o, a))
    if not timed:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no attempt ran into its retry time (schedule not exercised)",
            [o.invoke.index for o in opens],
            opens,
        )
    o, a = timed[-1]
    return _verdict(
        rule,
        True,
        expected,
        f"{len(timed)} attempt(s) abandoned on schedule; last: {a.label()} held {_s(a.duration or 0)}",
        [i for _, x in timed for i in x.events],
        opens,
    )


def check_mir_6(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    login_timeout: float | None = None,
    process: Any = None,
    tolerance: float = DEFAULT_TOLERANCE,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-6 truncated last round: no attempt extends past the login timeout and a failed open ends
    by ``LT + tolerance``; when the last attempt of a failed open was abandoned (timeout), it was cut
    to end at the login timeout (± ``tolerance``) rather than the client giving up with time left.

    Exercised by a failed open (the client ran into its login timeout)."""
    rule = "MIR-6"
    ini = _require_partner(initial, rule, "initial")
    fo = _require_partner(failover, rule, "failover")
    tol = _tolerance(tolerance)
    lt = _login_timeout(login_timeout, rule)
    assert lt is not None
    horizon = _horizon(events)
    opens = _opens(events, ini, fo, process=process, use_client_view=use_client_view)
    expected = f"no attempt past the login timeout {_s(lt)} (+{tol:.3f}); the last attempt truncated to it"
    exercised = []
    for o in _usable(opens):
        deadline = o.t0 + lt
        for a in o.attempts:
            opened = a.outcome == "opened" and o.end is not None
            end = o.end.t if opened and o.end is not None else _end_time(a, o, horizon)
            if end > deadline + tol and (a.end is not None or opened or horizon > deadline + tol):
                what = "opened" if opened else "ended"
                return _verdict(
                    rule,
                    False,
                    expected,
                    f"{a.label()} {what} at +{_s(o.rel(end))}, {_s(end - deadline)} past the login timeout",
                    (o.invoke.index, *a.events, *((o.end.index,) if opened and o.end is not None else ())),
                    opens,
                )
        if o.end is not None and o.end.t > deadline + tol:
            what = {"op.ok": "succeeded", "op.fail": "failed"}.get(o.end.type, "ended")
            return _verdict(
                rule,
                False,
                expected,
                f"open at event {o.invoke.index} {what} at +{_s(o.rel(o.end.t))}, "
                f"{_s(o.end.t - deadline)} past the login timeout",
                (o.invoke.index, o.end.index),
                opens,
            )
        if o.failed and o.attempts:
            last = o.attempts[-1]
            if last.outcome == "timeout" and last.end is not None and abs(last.end - deadline) > tol:
                return _verdict(
                    rule,
                    False,
                    expected,
                    f"{last.label()} was abandoned at +{_s(o.rel(last.end))}; expected it "
                    f"truncated to end at the login timeout +{_s(lt)} ±{tol:.3f}",
                    (o.invoke.index, o.end.index, *last.events),
                    opens,
                )
            exercised.append(o)
    if not exercised:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no open ran into its login timeout (rule not exercised)",
            [o.invoke.index for o in opens],
            opens,
        )
    o = exercised[-1]
    return _verdict(
        rule,
        True,
        expected,
        f"{len(exercised)} failed open(s) stayed within the login timeout; last failed at "
        f"+{_s(o.rel(o.end.t))} after {len(o.attempts)} attempt(s)",
        [i for x in exercised for i in (x.invoke.index, x.end.index, *(x.attempts[-1].events if x.attempts else ()))],
        opens,
    )


def check_mir_7(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    delays: Sequence[float] = DEFAULT_DELAYS,
    process: Any = None,
    tolerance: float = DEFAULT_TOLERANCE,
    fast_reset: float = DEFAULT_FAST_RESET,
    use_client_view: bool = True,
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
    ``details["not_judged"]``. Exercised by a fast round followed by another round."""
    rule = "MIR-7"
    ini = _require_partner(initial, rule, "initial")
    fo = _require_partner(failover, rule, "failover")
    tol = _tolerance(tolerance)
    delays = tuple(float(d) for d in delays)
    if not delays or any(d < 0 for d in delays):
        raise ConfigError("MIR-7: delays must be a non-empty list of seconds >= 0")
    opens = _opens(events, ini, fo, process=process, use_client_view=use_client_view)
    expected = (
        f"delay after a fast round r = {'/'.join(f'{d * 1000:g}' for d in delays)} ms (±{tol:.3f}); "
        "none after a timed-out round or inside a round"
    )
    judged: list[int] = []
    not_judged: list[int] = []
    n_delays = 0
    for o in _usable(opens):
        rounds: dict[int, list[Attempt]] = {}
        for a in o.attempts:
            rounds.setdefault(a.round, []).append(a)
        for r, atts in sorted(rounds.items()):
            if len(atts) == 2 and atts[0].end is not None:
                gap = atts[1].start - atts[0].end
                if gap > tol:
                    return _verdict(
                        rule,
                        False,
                        expected,
                        f"{_s(gap)} between {atts[0].label()} and {atts[1].label()}; expected "
                        f"no delay inside a round (≤ {tol:.3f})",
                        (*atts[0].events, *atts[1].events),
                        opens,
                    )
            nxt = rounds.get(r + 1)
            if not nxt or len(atts) < 2 or atts[-1].end is None:
                continue
            gap = nxt[0].start - atts[-1].end
            outcomes = {a.outcome for a in atts}
            ev = (*atts[-1].events, *nxt[0].events)
            fast = all(
                a.outcome in FAST_OUTCOMES
                or (a.outcome == "reset" and a.duration is not None and a.duration <= fast_reset)
                for a in atts
            )
            if fast:
                want = retry_delay(r, delays)
                if abs(gap - want) > tol:
                    return _verdict(
                        rule,
                        False,
                        expected,
                        f"delay after round {r} ({'/'.join(a.outcome for a in atts)}) was "
                        f"{_s(gap)}; expected {_s(want)} ±{tol:.3f}",
                        ev,
                        opens,
                    )
                judged.extend(ev)
                n_delays += 1
            elif outcomes == {"timeout"}:
                if gap > tol:
                    return _verdict(
                        rule,
                        False,
                        expected,
                        f"delay after round {r} (timed out) was {_s(gap)}; expected none (≤ {tol:.3f})",
                        ev,
                        opens,
                    )
            else:
                not_judged.append(atts[-1].events[0])
    if not judged:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no round of fast refusals / inactive answers followed by another round",
            [o.invoke.index for o in opens],
            opens,
            not_judged=not_judged,
        )
    return _verdict(
        rule,
        True,
        expected,
        f"{n_delays} delay(s) after fast rounds on schedule",
        judged,
        opens,
        not_judged=not_judged,
    )


def check_mir_8(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    window: float | None = None,
    login_timeout: float | None = None,
    process: Any = None,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-8 no timeout, no end: with both partners and no login timeout, an open that cannot connect
    is still alternating after ``window`` seconds: it has not failed, its attempts alternate, and
    both partners got an attempt in the second half of the window. The history must reach
    ``invoke + window`` (else unknown)."""
    rule = "MIR-8"
    ini = _require_partner(initial, rule, "initial")
    fo = _require_partner(failover, rule, "failover")
    if login_timeout is not None:
        raise ConfigError("MIR-8 is about a client with no login timeout; pass login_timeout=None")
    if window is None or not float(window) > 0:
        raise ConfigError("MIR-8 needs window: the observation window in seconds (> 0)")
    window = float(window)
    horizon = _horizon(events)
    opens = _opens(events, ini, fo, process=process, use_client_view=use_client_view)
    expected = f"still alternating initial/failover {_s(window)} after the open began; no failure"
    judged = []
    for o in _usable(opens):
        stop = o.t0 + window
        if o.end is not None and o.end.t <= stop and (o.aborted or o.end.type == "op.info"):
            continue  # the application ended it within the window: not observed long enough
        if o.end is not None and o.end.type != "op.ok" and o.end.t <= stop:
            return _verdict(
                rule,
                False,
                expected,
                f"open at event {o.invoke.index} gave up after {_s(o.rel(o.end.t))} with no "
                f"login timeout ({o.end.type}: {str(o.end.get('error'))[:60]})",
                (o.invoke.index, o.end.index),
                opens,
            )
        if o.ok and o.end is not None and o.end.t <= stop:
            continue
        if horizon < stop:
            continue
        inside = [a for a in o.attempts if a.start <= stop]
        bad = _alternation_violation(Open(o.process, o.op_id, o.invoke, None, None, inside))
        if bad is not None:
            a, want = bad
            return _verdict(
                rule,
                False,
                expected,
                f"{a.label()} went to the {a.role} partner; expected {want}",
                (o.invoke.index, *a.events),
                opens,
            )
        late = [a for a in inside if a.start >= o.t0 + window / 2]
        for role in ("initial", "failover"):
            if not any(a.role == role for a in late):
                last = [a for a in inside if a.role == role]
                when = f"last at +{_s(o.rel(last[-1].start))}" if last else "none at all"
                return _verdict(
                    rule,
                    False,
                    expected,
                    f"no attempt to the {role} partner in the second half of the window ({when})",
                    (o.invoke.index, *(last[-1].events if last else ())),
                    opens,
                )
        judged.append((o, inside))
    if not judged:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no open observed for the whole window without connecting",
            [o.invoke.index for o in opens],
            opens,
        )
    o, inside = judged[-1]
    return _verdict(
        rule,
        True,
        expected,
        f"{len(inside)} attempts alternating within {_s(window)}; last started at +{_s(o.rel(inside[-1].start))}",
        [i for a in inside[-4:] for i in a.events],
        opens,
    )


def check_mir_9(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    variant: str = "native",
    process: Any = None,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-9 partner cache update: after a successful open the client caches the server's current
    mirror as its failover partner (``native``: after every open; ``managed``: after the first one
    only); the initial partner is never replaced. Judged on the failover-slot attempts (2, 4, …) of
    later opens, which must go to the cached partner.

    What the server published comes from ``mirroring.partner`` events (``node`` = the principal,
    ``partner`` = the mirror's client-facing ``host:port``; see docs/events.md); without them, from the
    client's own ``op.ok`` value ``partner`` (noted in ``details``)."""
    rule = "MIR-9"
    ini = _require_partner(initial, rule, "initial")
    given = _require_partner(failover, rule, "failover (the partner given in the connection string)")
    if variant not in ("native", "managed"):
        raise ConfigError(f"MIR-9: variant must be 'native' or 'managed', not {variant!r}")
    ordered = _ordered(events)
    pubs = [e for e in ordered if e.type == "mirroring.partner" and e.get("partner")]
    published_names = [str(e.get("partner")) for e in pubs]
    published_names += [  # what clients say they learned (fallback below)
        str(e.get("value")["partner"])
        for e in ordered
        if e.type == "op.ok" and isinstance(e.get("value"), dict) and e.get("value").get("partner")
    ]
    opens = _opens(events, ini, [*given, *published_names], process=process, use_client_view=use_client_view)
    expected = f"{variant}: failover attempts go to the mirror the server published at " + (
        "the last successful open" if variant == "native" else "the first successful open"
    )
    cache: list[str] | None = list(given)
    learned = False
    judged: list[int] = []
    n_judged = 0
    used_client_view = False
    for o in _usable(opens):
        for a in o.attempts:
            if a.n % 2 == 1 and a.role != "initial":
                return _verdict(
                    rule,
                    False,
                    expected,
                    f"{a.label()} went to {sorted(a.ids)} instead of the initial partner "
                    "(the initial partner name must never be overwritten)",
                    (o.invoke.index, *a.events),
                    opens,
                )
            if a.n % 2 == 0 and cache is not None and learned:
                if not any(_matches(c, a.ids) for c in cache):
                    return _verdict(
                        rule,
                        False,
                        expected,
                        f"{a.label()} went to {sorted(a.ids)}; expected the cached failover partner {cache[0]}",
                        (o.invoke.index, *a.events),
                        opens,
                    )
                judged.extend(a.events)
                n_judged += 1
        if not o.ok or o.end is None:
            continue
        served = o.attempts[-1].ids if o.attempts else frozenset()
        pub = [
            e
            for e in pubs
            if e.t <= o.end.t and (e.get("node") is None or not served or _matches(str(e.get("node")), served))
        ]
        value = o.end.get("value")
        learned_now: str | None = None
        if pub:
            learned_now = str(pub[-1].get("partner"))
        elif isinstance(value, dict) and value.get("partner"):
            learned_now = str(value["partner"])
            used_client_view = True
        if variant == "managed" and learned:
            continue
        if learned_now is None:
            cache = None  # what the client learned is unknown from here on
            continue
        cache, learned = [learned_now], True
    if not judged:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no failover attempt after the client learned a partner (rule not exercised)",
            [o.invoke.index for o in opens],
            opens,
        )
    extra = {"partner_source": "client op.ok value" if used_client_view else "mirroring.partner events"}
    return _verdict(
        rule,
        True,
        expected,
        f"{n_judged} failover attempt(s) went to the cached partner",
        judged,
        opens,
        **extra,
    )


def _identities(ordered: list[Event], names: list[str]) -> list[str]:
    """``names`` plus the proxy names / listen and client addresses the history links to them."""
    out = list(names)
    for e in ordered:
        if e.type == "conn.accepted" and e.get("node") is not None and any(_same(n, str(e.get("node"))) for n in names):
            out += [str(e.get(k)) for k in ("proxy", "listen") if e.get(k)]
        elif e.type == "topology.up":
            for node in e.get("nodes") or []:
                if isinstance(node, dict) and any(_same(n, str(node.get("name"))) for n in names):
                    out += [str(node[k]) for k in ("client_address",) if node.get(k)]
    return sorted(set(out))


def _principal_from_history(ordered: list[Event], process: Any) -> list[str] | Verdict:
    first = next(
        (
            e
            for e in ordered
            if e.type == "op.invoke" and e.get("f") == "open" and (process is None or e.get("process") == process)
        ),
        None,
    )
    expected = "the first connect works iff the principal is the initial or the failover partner"
    if first is None:
        return Verdict("MIR-10", UNKNOWN, expected=expected, observed="no open in the history")
    end = next(
        (
            e
            for e in ordered
            if e.type in END_TYPES
            and e.get("op_id") == first.get("op_id")
            and e.get("process") == first.get("process")
            and e.t >= first.t
        ),
        None,
    )
    principal = None
    for e in ordered:
        if e.t > first.t:
            if e.type == "role.change" and (end is None or e.t <= end.t):
                return Verdict(
                    "MIR-10",
                    UNKNOWN,
                    expected=expected,
                    observed=f"roles changed during the first open (event {e.index})",
                    evidence=(first.index, e.index),
                )
            continue
        if e.type == "role.change" and e.get("new_role") == "principal":
            principal = str(e.get("node"))
        elif e.type == "node.start" and e.get("role") == "principal":
            principal = str(e.get("node"))
        elif e.type == "topology.up":
            for node in e.get("nodes") or []:
                if isinstance(node, dict) and node.get("role") == "principal":
                    principal = str(node.get("name"))
    if principal is None:
        return Verdict(
            "MIR-10",
            UNKNOWN,
            expected=expected,
            observed="no principal given and none named in the history before the first open",
            evidence=(first.index,),
        )
    return [principal]


def check_mir_10(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    principal: PartnerNames = None,
    process: Any = None,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-10 stale failover partner: the first open with ``Server=A; Failover Partner=B`` succeeds,
    on the principal, iff the principal is A or B; when A is only a mirror and B is stale it fails.
    ``principal`` names the partner that is principal at the time (its proxy / node / address);
    without it, the principal is read from the history (the last ``topology.up`` / ``node.start`` /
    ``role.change`` naming a principal before the first open) and a role change during that open
    makes the verdict unknown."""
    rule = "MIR-10"
    ini = _require_partner(initial, rule, "initial")
    fo = _require_partner(failover, rule, "failover")
    ordered = _ordered(events)
    if principal is None:
        derived = _principal_from_history(ordered, process)
        if isinstance(derived, Verdict):
            return derived
        prin = derived
    else:
        prin = _names(principal)
    prin = _identities(ordered, prin)
    opens = _opens(events, ini, fo + prin, process=process, use_client_view=use_client_view)
    should = any(_matches(p, ini + fo) for p in prin)
    expected = (
        "the first connect works, on the principal"
        if should
        else "the first connect fails (the initial partner is a mirror, the failover partner stale)"
    )
    first = next((o for o in opens if o.end is not None), None)
    if first is None or first.ambiguous or first.end is None or first.end.type == "op.info":
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no decided first open in the history",
            [o.invoke.index for o in opens],
            opens,
        )
    ev = (first.invoke.index, first.end.index)
    if first.ok != should:
        return _verdict(
            rule,
            False,
            expected,
            f"first open {'succeeded' if first.ok else 'failed'} after {_s(first.rel(first.end.t))}"
            f" ({len(first.attempts)} attempt(s))",
            ev + tuple(i for a in first.attempts for i in a.events),
            opens,
        )
    if first.ok:
        if not first.attempts:
            return _verdict(rule, UNKNOWN, expected, "first open succeeded but no attempt was observed", ev, opens)
        last = first.attempts[-1]
        if not any(_matches(p, last.ids) for p in prin):
            return _verdict(
                rule,
                False,
                expected,
                f"first open succeeded on {sorted(last.ids)}, which is not the principal",
                ev + last.events,
                opens,
            )
        return _verdict(
            rule,
            True,
            expected,
            f"first open succeeded on the principal via {last.label()}",
            ev + last.events,
            opens,
        )
    return _verdict(
        rule,
        True,
        expected,
        f"first open failed after {_s(first.rel(first.end.t))} and {len(first.attempts)} "
        f"attempt(s) ({str(first.end.get('error'))[:60]})",
        ev,
        opens,
    )


def check_mir_11(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    process: Any = None,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-11 reconnect is not automatic: when an established connection breaks (its proxy connection
    is closed by the server side, ``by`` ≠ ``client``), the process's next operation fails
    (``op.fail``/``op.info``) unless the application opened again first, and no new connection to a
    partner is accepted outside an open. Exercised by a break followed by an operation."""
    rule = "MIR-11"
    ini = _require_partner(initial, rule, "initial")
    fo = _names(failover)
    ordered = _ordered(events)
    all_opens = _opens(events, ini, fo, use_client_view=use_client_view)
    opens = [o for o in all_opens if process is None or o.process == process]
    expected = "a broken connection surfaces as an error; nothing reconnects without a new open"
    windows = [(o.t0, o.end.t if o.end else math.inf) for o in all_opens]
    judged: list[int] = []
    for o in _usable(opens):
        if not o.ok or not o.attempts or o.attempts[-1].source != "proxy":
            continue
        conn = o.attempts[-1]
        closed = next(
            (
                e
                for e in ordered
                if e.type == "conn.closed" and e.get("proxy") == conn.proxy and e.get("conn_id") == conn.conn_id
            ),
            None,
        )
        if closed is None or closed.get("by") == "client":
            continue
        tb = closed.t
        for e in ordered:
            if e.type == "conn.accepted" and e.t > tb and any(_matches(n, _event_ids(e)) for n in ini + fo):
                if not any(lo <= e.t <= hi for lo, hi in windows):
                    return _verdict(
                        rule,
                        False,
                        expected,
                        f"connection to {e.get('proxy')} accepted {_s(e.t - tb)} after the break "
                        "outside any open: an automatic reconnect",
                        (closed.index, e.index),
                        opens,
                    )
        if any(
            p is not o and p.process == o.process and p.ok and p.end is not None and o.end.t < p.end.t <= tb
            for p in all_opens
        ):
            continue  # the process opened another connection before this one broke: ops are ambiguous
        later = [
            e
            for e in ordered
            if e.get("process") == o.process and e.t >= o.end.t and e.type.startswith("op.") and e.index != o.end.index
        ]
        for e in later:
            if e.type == "op.invoke" and e.get("f") == "open" and e.t >= tb:
                break
            if e.type in END_TYPES and e.get("f") not in ("open", "close") and e.t >= tb:
                inv = next((x for x in later if x.type == "op.invoke" and x.get("op_id") == e.get("op_id")), None)
                if inv is None or inv.t < tb:
                    continue  # in flight when the connection broke: either outcome is possible
                if e.type == "op.ok":
                    return _verdict(
                        rule,
                        False,
                        expected,
                        f"{e.get('f')} op {e.get('op_id')} succeeded {_s(e.t - tb)} after the "
                        "connection broke, without a new open",
                        (closed.index, *((inv.index,) if inv else ()), e.index),
                        opens,
                    )
                judged.extend((closed.index, e.index))
                break
    if not judged:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no established connection broke before an operation of its process",
            [o.invoke.index for o in opens],
            opens,
        )
    return _verdict(
        rule,
        True,
        expected,
        f"{len(judged) // 2} break(s) surfaced as an error; no automatic reconnect",
        judged,
        opens,
    )


def _norm_name(text: Any) -> str:
    return " ".join(str(text).split()).lower()


def check_mir_12(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    initial_name: str | None = None,
    process: Any = None,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-12 redirection is transparent in naming: a connection opened on the failover partner
    presents itself as a connection to the initial partner name - the ``op.ok`` value's
    ``presented_server`` equals ``initial_name`` (default: the open's ``op.invoke`` value
    ``initial``). Exercised by a redirected open."""
    rule = "MIR-12"
    ini = _require_partner(initial, rule, "initial")
    fo = _require_partner(failover, rule, "failover")
    opens = _opens(events, ini, fo, process=process, use_client_view=use_client_view)
    expected = "a redirected connection presents the initial partner's name"
    judged: list[int] = []
    for o in _usable(opens):
        if not o.ok or not o.attempts or o.end is None or o.attempts[-1].role != "failover":
            continue
        want = initial_name if initial_name is not None else _open_value(o).get("initial")
        value = o.end.get("value")
        shown = value.get("presented_server") if isinstance(value, dict) else None
        if want is None or shown is None:
            continue
        ev = (o.invoke.index, o.end.index, *o.attempts[-1].events)
        if _norm_name(shown) != _norm_name(want):
            return _verdict(
                rule,
                False,
                expected,
                f"open redirected to the failover partner presents {shown!r}; expected {want!r}",
                ev,
                opens,
            )
        judged.extend(ev)
    if not judged:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no redirected open with a presented_server in its op.ok value",
            [o.invoke.index for o in opens],
            opens,
        )
    return _verdict(rule, True, expected, "redirected open(s) presented the initial partner name", judged, opens)


def _shutdowns(events: list[Event]) -> list[tuple[float, str, int]]:
    out = []
    for e in events:
        if e.type == "node.stop" and e.get("node"):
            out.append((e.t - float(e.get("seconds") or 0.0), str(e.get("node")), e.index))
        elif e.type == "node.kill" and e.get("node"):
            out.append((e.t, str(e.get("node")), e.index))
        elif e.type == "fault.start" and e.get("fault") in SHUTDOWN_FAULTS and e.get("node"):
            out.append((e.t, str(e.get("node")), e.index))
    return out


def check_mir_13(
    events: list[Event],
    *,
    initial: PartnerNames = None,
    failover: PartnerNames = None,
    login_timeout: float | None = None,
    delays: Sequence[float] = DEFAULT_DELAYS,
    process: Any = None,
    tolerance: float = DEFAULT_TOLERANCE,
    use_client_view: bool = True,
) -> Verdict:
    """MIR-13 shutdown aborts at once: an attempt pending on a partner when that partner's server is
    shut down (``node.stop``/``node.kill``/``fault.start`` stop|kill|shutdown) ends when the server
    closes it, and the client's next step (next attempt, or the end of the open) follows within
    ``tolerance`` (plus the MIR-7 delay if the attempt closed a round) - never after waiting out the
    retry time."""
    rule = "MIR-13"
    ini = _require_partner(initial, rule, "initial")
    fo = _names(failover)
    tol = _tolerance(tolerance)
    delays = tuple(float(d) for d in delays)
    opens = _opens(events, ini, fo, process=process, use_client_view=use_client_view)
    expected = f"a pending attempt is abandoned as soon as the server shuts down (next step ≤ {tol:.3f} s)"
    stops = _shutdowns(_ordered(events))
    if not stops:
        return _verdict(rule, UNKNOWN, expected, "no node.stop / node.kill / stop fault in the history", [], opens)
    judged: list[int] = []
    not_judged: list[int] = []
    for o in _usable(opens):
        for a in o.attempts:
            for ts, node, sidx in stops:
                names = ini if a.role == "initial" else fo
                if not _matches(node, a.ids) and not any(_same(node, n) for n in names):
                    continue
                if not (a.start <= ts and (a.end is None or a.end >= ts - tol)):
                    continue
                if a.outcome == "opened":
                    continue
                if a.end is None:
                    not_judged.append(a.events[0])
                    continue
                if a.source == "proxy" and a.closed_by == "client" and a.bytes_down == 0:
                    not_judged.append(a.events[0])  # the server never closed it: not a shutdown abort
                    continue
                # (closed by the client after the server answered - e.g. "the database system is
                # shutting down" - is the server ending the attempt: judged like a server close)
                if a.end - ts > tol and a.outcome == "timeout":
                    return _verdict(
                        rule,
                        False,
                        expected,
                        f"{a.label()} pending at the shutdown was held {_s(a.end - ts)} longer "
                        "(waited out its retry time)",
                        (sidx, *a.events),
                        opens,
                    )
                nxt = next((b for b in o.attempts if b.n == a.n + 1), None)
                step_t = nxt.start if nxt else (o.end.t if o.end else None)
                if step_t is None:
                    continue
                allow = retry_delay(a.round, delays) if a.n % 2 == 0 else 0.0
                if step_t - a.end > allow + tol:
                    step = f"attempt {a.n + 1}" if nxt else "the end of the open"
                    return _verdict(
                        rule,
                        False,
                        expected,
                        f"{a.label()} was closed by the shutdown at +{_s(o.rel(a.end))} but "
                        f"{step} came {_s(step_t - a.end)} later; expected ≤ "
                        f"{_s(allow)} +{tol:.3f}",
                        (sidx, *a.events, *((nxt.events[0],) if nxt else (o.end.index,))),
                        opens,
                    )
                judged.extend((sidx, *a.events))
    if not judged:
        return _verdict(
            rule,
            UNKNOWN,
            expected,
            "no attempt was pending when a partner shut down",
            [s for _, _, s in stops],
            opens,
            not_judged=not_judged,
        )
    return _verdict(
        rule,
        True,
        expected,
        "attempt(s) pending at the shutdown were abandoned at once",
        judged,
        opens,
        not_judged=not_judged,
    )


CHECKERS = {
    "MIR-1": check_mir_1,
    "MIR-2": check_mir_2,
    "MIR-3": check_mir_3,
    "MIR-4": check_mir_4,
    "MIR-5": check_mir_5,
    "MIR-6": check_mir_6,
    "MIR-7": check_mir_7,
    "MIR-8": check_mir_8,
    "MIR-9": check_mir_9,
    "MIR-10": check_mir_10,
    "MIR-11": check_mir_11,
    "MIR-12": check_mir_12,
    "MIR-13": check_mir_13,
}


def _register() -> None:
    try:
        from harness.rules.registry import register
    except ImportError:  # pragma: no cover - registry not present
        return
    for rule_id, fn in list(CHECKERS.items()):
        # the module's names become the recording wrappers (verdicts carry their parameters)
        globals()[fn.__name__] = CHECKERS[rule_id] = register(rule_id, fn).checker


_register()
