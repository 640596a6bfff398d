"""Fixtures of the LPQ suites: ``scenario`` - a helper that makes a fresh instance of the client
under test per scenario (``--client NAME``, default libpq), opens host lists with it (bounded in
time), records the servers' view and collects the scenario's verdicts. A spec the driver does not
offer (no host list, no such ``target_session_attrs``, no random order) gives *not offered*
verdicts for the scenario's rules (a matrix cell of its own, never a violation nor a pass of the
rule) and is not opened. Every client is shut down at teardown."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from harness.history.core import History
from harness.plugin.options import VERDICTS_KEY
from harness.rules.verdict import UNKNOWN, Verdict
from harness.workload.lpq import Outcome, bounded_open, not_offered, probe_landing, record_servers


class Scenarios:
    """Scenario bookkeeping of one LPQ test."""

    def __init__(self, request: pytest.FixtureRequest, factory: Callable[..., Any], history: History) -> None:
        self.request, self.factory, self.history = request, factory, history
        self.clients: list[Any] = []
        self.verdicts: list[Verdict] = []

    def client(self, process: str) -> Any:
        """A fresh client under test recording under ``process`` (the scenario's name)."""
        c = self.factory(history=self.history, process=process)
        self.clients.append(c)
        self.history.meta.setdefault("drivers", {})[process] = getattr(c, "driver", type(c).__name__)
        return c

    def offered(self, client: Any, spec: Any, rules: Sequence[str]) -> bool:
        """False (and *not offered* verdicts for ``rules``) when the driver cannot express ``spec``."""
        why = not_offered(client, spec)
        if why is None:
            return True
        process = getattr(client, "process", None)
        self.history.record("lpq.not_offered", process=process, reason=why, rules=list(rules))
        stash = self.request.node.stash.setdefault(VERDICTS_KEY, [])
        for rule in rules:
            stash.append(Verdict(rule, UNKNOWN, expected="the driver offers this", observed=f"not offered: {why}",
                                 details={"not_offered": why, "params": {"process": process}}))
        return False

    def open(self, client: Any, spec: Any, topology: Any, *, faults: Sequence[Any] = (), wait: float = 8.0,
             after: float = 4.0, write: bool = False, keep: bool = False, label: str = "") -> Outcome:
        """Open (bounded), record where the session landed, close it (unless ``keep``)."""
        out = bounded_open(client, spec, self.history, faults=faults, wait=wait, after=after, label=label)
        if out.pending:  # stop it, so that its further attempts cannot mix with the next scenario's
            with contextlib.suppress(Exception):
                client.shutdown()
            self.history.record("lpq.client_stopped", process=getattr(client, "process", None),
                                reason="open still pending at the end of its scenario")
        if out.ok:
            probe_landing(out.conn, topology, self.history, client, write=write)
            if not keep:
                with contextlib.suppress(Exception):
                    out.conn.close()
        return out

    def servers(self, topology: Any, nodes: Sequence[str], unreachable: Sequence[str] = ()) -> None:
        """Record the listed servers' roles (``lpq.servers``)."""
        record_servers(self.history, topology, nodes, unreachable)


@pytest.fixture
def scenario(request: pytest.FixtureRequest, client_factory: Callable[..., Any],
             history: History) -> Iterator[Scenarios]:
    """The LPQ scenario helper (see the module docstring)."""
    s = Scenarios(request, client_factory, history)
    yield s
    for c in reversed(s.clients):
        with contextlib.suppress(Exception):
            c.shutdown()
