"""A stand-in history for a long-lived ICM cluster (docs/icm.md): the cluster and its backing topology
outlive one test, so they record through a :class:`HistoryRelay` that each test binds to its own
history (OBS-1: the settlers of late fault-proxy events follow the binding)."""

from __future__ import annotations

from typing import Any


class HistoryRelay:
    """A stand-in history for a cluster (and its backing topology) that outlives one test: records go
    to the history :meth:`bind` points it at (none: dropped), and the settlers the topology registers
    (OBS-1: late fault-proxy events) are registered on that history too."""

    def __init__(self) -> None:
        self.target: Any = None
        self._settlers: list[Any] = []
        self._removers: list[Any] = []

    def record(self, type: str, t: float | None = None, **fields: Any) -> Any:  # noqa: A002 - History's name
        """Record into the bound history (if any)."""
        target = self.target
        return None if target is None else target.record(type, t=t, **fields)

    def add_settler(self, settle: Any) -> Any:
        """Keep ``settle`` for every history bound later; returns its remover."""
        self._settlers.append(settle)
        if self.target is not None:
            self._removers.append(self.target.add_settler(settle))
        return lambda: self._settlers.remove(settle) if settle in self._settlers else None

    def bind(self, history: Any) -> None:
        """Send records to ``history`` from now on (None: stop)."""
        for remove in self._removers:
            remove()
        self._removers = []
        self.target = history
        if history is not None:
            self._removers = [history.add_settler(s) for s in self._settlers]
