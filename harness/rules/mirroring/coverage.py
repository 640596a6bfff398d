"""What the harness could observe of the partners' refused connects (OBS-1; MIR-1 … MIR-13). Pure.

A connect is refused without any fault proxy seeing it while the partner's proxy is disabled - a
``partition how=refuse``: ``fault.start``/``fault.end`` with ``fault="partition"`` and ``params.how
= "refuse"``; ``params.proxy`` / ``params.listen`` (and the fault's ``node``) name the partner.
Such connects are still observed when

* the refused-connect capture watched that partner's listen address the whole time (``harness.capture``
  events: ``available: true`` with the ``targets`` it watches, until an ``available: false`` one), or
* the client reported its own attempts (``attempt.*``) for the open.

Otherwise the open may hold attempts nobody saw, and :meth:`Observability.unobserved` says so in a
sentence that names the fault event and why the capture could not see it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.history.core import Event
from harness.rules.mirroring.names import matches

REFUSE_FAULTS = frozenset({"partition"})


@dataclass(frozen=True)
class Window:
    """A stretch of time (monotonic seconds) concerning the partner named by ``ids``."""

    ids: frozenset[str]
    start: float
    end: float
    index: int  # the event that opened it


def _ids(*values: object) -> frozenset[str]:
    return frozenset(str(v) for v in values if v not in (None, ""))


def refuse_windows(events: Iterable[Event]) -> list[Window]:
    """The refuse partitions of the history (a partition still on at the end lasts forever)."""
    starts: dict[object, Event] = {}
    ends: dict[object, float] = {}
    for e in events:
        if e.type == "fault.start" and e.get("fault") in REFUSE_FAULTS:
            params = e.get("params") or {}
            if isinstance(params, dict) and params.get("how") == "refuse":
                starts[e.get("id", e.index)] = e
        elif e.type == "fault.end" and e.get("fault") in REFUSE_FAULTS:
            ends.setdefault(e.get("id"), e.t)
    out = []
    for key, e in starts.items():
        params = e.get("params") or {}
        out.append(Window(_ids(e.get("node"), params.get("proxy"), params.get("listen")), e.t,
                          ends.get(key, math.inf), e.index))
    return out


@dataclass(frozen=True)
class Coverage:
    """The capture's view: the windows in which it watched a listen address, and the last reason it
    gave for not watching (None when it never said it could not)."""

    watched: tuple[Window, ...]
    reason: str | None
    announced: bool  # some harness.capture event exists

    @classmethod
    def of(cls, events: Iterable[Event]) -> Coverage:
        """Read the ``harness.capture`` events."""
        open_: dict[frozenset[str], tuple[float, int]] = {}
        watched: list[Window] = []
        reason: str | None = None
        announced = False
        for e in events:
            if e.type != "harness.capture":
                continue
            announced = True
            targets = [_ids(t.get("listen"), t.get("proxy"), t.get("node"))
                       for t in e.get("targets") or [] if isinstance(t, dict)]
            if e.get("available") is True:
                for ids in targets:
                    open_.setdefault(ids, (e.t, e.index))
                continue
            reason = str(e.get("reason") or "the capture was unavailable")
            for ids in targets or list(open_):
                if ids in open_:
                    t0, idx = open_.pop(ids)
                    watched.append(Window(ids, t0, e.t, idx))
        watched += [Window(ids, t0, math.inf, idx) for ids, (t0, idx) in open_.items()]
        return cls(tuple(watched), reason, announced)

    def covers(self, names: Sequence[str], start: float, end: float) -> bool:
        """Whether the capture watched a listen address of partner ``names`` from ``start`` to ``end``."""
        return any(w.start <= start and end <= w.end and any(matches(n, w.ids) for n in names) for w in self.watched)

    def why_not(self) -> str:
        """Why the capture did not see them, in words."""
        if not self.announced:
            return "the history records no refused-connect capture"
        if self.reason:
            return f"the refused-connect capture was unavailable ({self.reason})"
        return "the refused-connect capture did not watch that address"


@dataclass(frozen=True)
class Observability:
    """The refuse partitions and the capture's coverage of one history, read once."""

    refusals: tuple[Window, ...]
    coverage: Coverage

    @classmethod
    def of(cls, events: Sequence[Event]) -> Observability:
        """Read a (time-ordered) history."""
        return cls(tuple(refuse_windows(events)), Coverage.of(events))

    def unobserved(self, partners: Mapping[str, Sequence[str]], t0: float, t1: float, *,
                   client_reported: bool) -> list[str]:
        """Why an open from ``t0`` to ``t1`` may miss refused connects to one of ``partners`` (role →
        names): one sentence per partner whose connects were refused in that span and seen neither by
        the capture nor by the client (empty when the open's attempts are all observable)."""
        if client_reported:
            return []
        out = []
        for role, names in partners.items():
            for w in self.refusals:
                lo, hi = max(t0, w.start), min(t1, w.end)
                if lo > hi or not any(matches(n, w.ids) for n in names) or self.coverage.covers(names, lo, hi):
                    continue
                out.append(f"connects to the {role} partner were refused (partition how=refuse, event {w.index}) "
                           f"during the open, {self.coverage.why_not()}, and the client reported no attempts")
                break
        return out
