"""Member faults of an ACR group (RULEBOOK ACR-1…9): one member's address fails while the others serve.

* ``member(name, how="kill")``: the member's proxy is disabled - its connections drop, new connects
  are refused (seen from outside by the refused-connect capture) - the stand-in of a member that died.
* ``member(name, how="blackhole")``: nothing answers on that member's address (connects hang, sent
  bytes are swallowed) - a member that hangs, for receive / query timeouts and interrupts (ACR-9).
* ``group(name)``: every member of a group and its group-wide address at once.

Each is a scoped fault recorded as ``fault.start`` / ``fault.end`` (``fault`` = ``member.kill`` /
``member.blackhole``, ``node`` = the member), restored and republished (``acr.members``) on exit;
``after=`` / ``duration=`` run it in the background like every scoped fault."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from typing import Any

from harness.errors import ConfigError
from harness.faults.vocabulary import ScheduledFault, Scoped, seconds
from harness.topology.acr import AcrGroups

_ids = itertools.count(1)


class AcrFaults:
    """Faults of one :class:`~harness.topology.acr.AcrGroups`, recorded into ``history``."""

    def __init__(self, groups: AcrGroups, history: Any = None) -> None:
        self.groups = groups
        self.history = history

    def _record(self, type_: str, **fields: Any) -> None:
        if self.history is not None:
            self.history.record(type_, **fields)

    @contextlib.contextmanager
    def _fault(self, names: list[str], how: str) -> Iterator[None]:
        if how not in ("kill", "blackhole"):
            raise ConfigError(f"an ACR member fault is how='kill' or how='blackhole', not {how!r}")
        members = [self.groups.address(n) for n in names]  # ConfigError naming the members first
        ids: list[tuple[int, str, float]] = []
        failed: list[str] = []
        try:
            for m in members:
                fid = next(_ids)
                self._record("fault.start", fault=f"member.{how}", id=fid, node=m.name,
                             params={"how": how, "proxy": m.proxy, "listen": m.address, "group": m.group})
                ids.append((fid, m.name, time.monotonic()))
                self.groups.fail(m.name, how)
                failed.append(m.name)
            yield
        finally:
            if self.history is not None:
                self.groups.topology.settle_observations()
            for name in reversed(failed):
                self.groups.restore(name)
            for fid, name, t0 in ids:
                self._record("fault.end", fault=f"member.{how}", id=fid, node=name,
                             seconds=time.monotonic() - t0, error=None)

    def member(self, name: str, how: str = "kill", after: float | None = None,
               duration: float | None = None) -> Scoped:
        """One member (or a group-wide address: ``group`` / ``agroup``) fails for the block."""
        return self._scheduled(f"member-{how}-{name}", [name], how, after, duration)

    def members(self, names: list[str], how: str = "kill", after: float | None = None,
                duration: float | None = None) -> Scoped:
        """Several addresses fail together for the block (e.g. every member of the primary group)."""
        return self._scheduled(f"members-{how}-{'-'.join(names)}", list(names), how, after, duration)

    def _scheduled(self, label: str, names: list[str], how: str, after: float | None,
                   duration: float | None) -> Scoped:
        if after is None and duration is None:
            return self._fault(names, how)
        return ScheduledFault(label, lambda: self._fault(names, how), seconds(f"{label}: after=", after or 0),
                              None if duration is None else seconds(f"{label}: duration=", duration))
