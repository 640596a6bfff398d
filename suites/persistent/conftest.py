"""Fixtures of the PER suites (RULEBOOK PER-1..PER-8, DUR-1 through the client under test).

* ``per_client``: the client under test (``--client NAME``; default the reference proxy), started in
  front of the test's ``pair`` through :func:`harness.clients.persistent.open_client` and,
  when it coordinates, registered on ``faults`` (``faults.coordinate``), so ``faults.switchover()``
  drains it before and resumes it after. Stopped in teardown (before the pair goes down).
* ``@pytest.mark.windows(drain=S, recovery=S)``: the client's drain window (PER-4) and recovery
  window (PER-3) for this test - short, so the suites run quickly (defaults 1.5 s and 3 s). They are
  written to the history's ``meta["rule_params"]`` so a saved history re-checks with the same values.
* ``session_factory``: makes :class:`~harness.workload.oltp.TrackedSession` objects through the
  client, closed in teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness import Faults, History, Pair
from harness.clients.persistent import PersistentClient, open_client
from harness.clients.registry import resolve_client
from harness.plugin import rule_ids_of
from harness.workload.oltp import TrackedSession, session_class

DRAIN_WINDOW = 1.5
RECOVERY_WINDOW = 3.0
WINDOWED_RULES = ("PER-3", "PER-4", "PER-6", "PER-7", "PER-8")


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``windows`` and ``engines`` markers."""
    config.addinivalue_line("markers", "windows(drain=S, recovery=S): drain / recovery window of the PER client")
    config.addinivalue_line("markers", "engines(*names): the --engine values a test is written for (others: "
                                       "deselected; the engine-neutral tests carry no such marker)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect tests written for another engine's SQL or driver (``@pytest.mark.engines``): the
    PostgreSQL-only PER-2/6/8 tests on ``--engine mariadb`` and the MySQL-only ones on postgres.
    They are not skipped - they are not part of that engine's suite (docs/persistent.md)."""
    engine = config.getoption("engine", default="postgres")
    keep, drop = [], []
    for item in items:
        mark = item.get_closest_marker("engines")
        (drop if mark is not None and engine not in mark.args else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _windows(request: pytest.FixtureRequest) -> tuple[float, float]:
    mark = request.node.get_closest_marker("windows")
    kwargs = dict(mark.kwargs) if mark else {}
    return float(kwargs.get("drain", DRAIN_WINDOW)), float(kwargs.get("recovery", RECOVERY_WINDOW))


@pytest.fixture
def windows(request: pytest.FixtureRequest) -> tuple[float, float]:
    """``(drain_window, recovery_window)`` of this test (``@pytest.mark.windows``)."""
    return _windows(request)


@pytest.fixture
def per_client(request: pytest.FixtureRequest, pair: Pair, faults: Faults, history: History, client_spec: str | None,
               windows: tuple[float, float]) -> Iterator[PersistentClient]:
    """The PER client under test, started in front of ``pair`` and coordinated with ``faults``."""
    ids = rule_ids_of(request.node)
    if any(r.startswith("PER-") for r in ids):
        factory = request.getfixturevalue("client_factory")
    else:  # DUR-1 through the persistent client under test
        factory = resolve_client(client_spec, "persistent").factory
    drain, recovery = windows
    client = open_client(factory, pair=pair, history=history, drain_window=drain, recovery_window=recovery)
    try:
        describe = getattr(client, "describe", None)
        history.meta["client_under_test"] = describe() if describe else {"client": client.name}
        params = history.meta.setdefault("rule_params", {})
        for rule in WINDOWED_RULES:
            if rule == "PER-3":
                params[rule] = {"recovery_window": recovery}
            elif rule in ("PER-4", "PER-6", "PER-7", "PER-8"):
                params[rule] = {"drain_window": drain}
        stop_coordinating = faults.coordinate(client) if client.coordinates else None
        yield client
        if stop_coordinating is not None:
            stop_coordinating()
    finally:
        client.stop()


@pytest.fixture
def session_factory(per_client: PersistentClient, history: History,
                    pair: Pair) -> Iterator[Callable[..., TrackedSession]]:
    """``session_factory(process, **TrackedSession options)``: an application session through the
    client under test (closed at teardown)."""
    made: list[TrackedSession] = []

    def make(process: str, **options: Any) -> TrackedSession:
        options.setdefault("reconnect", False)
        options.setdefault("op_timeout", 20.0)
        s = session_class(pair.engine.name)(per_client.dsn(), history, process, **options)
        s.connect()
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
