"""Coordinated switchover (PER-1/PER-4): the ``coord.*`` hook protocol and ``faults.coordinate``,
against a real pair: the coordinator is told before the principal goes and after the new one is up."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from harness.errors import ConfigError, HarnessError
from harness.faults import Faults
from harness.faults.coordination import CoordinationError, SwitchoverCoordinator, check_coordinator, run_coordinated
from harness.history.core import History
from harness.topology import Pair


class Observer:
    """A coordinating client that records what the topology looked like at each hook."""

    def __init__(self, pair: Any, name: str = "observer", fail_in: str | None = None) -> None:
        self.pair = pair
        self.name = name
        self.fail_in = fail_in
        self.seen: list[tuple[str, Any]] = []

    def _principal_in_recovery(self) -> bool:
        with psycopg.connect(self.pair.principal.dsn(), autocommit=True, connect_timeout=3) as conn:
            return bool(conn.execute("SELECT pg_is_in_recovery()").fetchone()[0])

    def before_switchover(self) -> dict[str, Any]:
        self.seen.append(("before", self.pair.principal.name))
        assert not self._principal_in_recovery()
        if self.fail_in == "before":
            raise RuntimeError("drain refused")
        return {"drained": 1}

    def after_switchover(self, new_principal_address: tuple[str, int]) -> dict[str, Any]:
        self.seen.append(("after", tuple(new_principal_address)))
        if self.fail_in == "after":
            raise RuntimeError("resume refused")
        return {"resumed": 1}


def test_run_coordinated_orders_hooks_and_records_events() -> None:
    calls: list[str] = []

    class C:
        def __init__(self, name: str) -> None:
            self.name = name

        def before_switchover(self) -> None:
            calls.append(f"before {self.name}")

        def after_switchover(self, address: tuple[str, int]) -> None:
            calls.append(f"after {self.name} {address[1]}")

    h = History()
    result = run_coordinated([C("a"), C("b")], lambda: calls.append("switch") or 42, lambda: ("127.0.0.1", 5),
                             h.record, fault_id=7)
    assert result == 42
    assert calls == ["before a", "before b", "switch", "after b 5", "after a 5"]
    types = [e.type for e in h.events()]
    assert types == ["coord.before", "coord.before_done", "coord.before", "coord.before_done",
                     "coord.after", "coord.after_done", "coord.after", "coord.after_done"]
    assert all(e.get("fault_id") == 7 for e in h.events())


def test_run_coordinated_without_coordinators_is_just_the_action() -> None:
    h = History()
    assert run_coordinated([], lambda: "done", lambda: ("x", 1), h.record) == "done"
    assert h.events() == []


def test_not_a_coordinator_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="before_switchover\\(\\) and after_switchover"):
        check_coordinator(object())


@pytest.mark.parametrize("fail_in", ["before", "after"])
def test_failing_hook_is_a_harness_error_and_clients_are_released(fail_in: str) -> None:
    released: list[str] = []

    class Good:
        name = "good"

        def before_switchover(self) -> None:
            pass

        def after_switchover(self, address: tuple[str, int]) -> None:
            released.append("good")

    class Bad(Good):
        name = "bad"

        def before_switchover(self) -> None:
            if fail_in == "before":
                raise RuntimeError("no")

        def after_switchover(self, address: tuple[str, int]) -> None:
            if fail_in == "after":
                raise RuntimeError("no")

    h = History()
    switched: list[bool] = []
    with pytest.raises(CoordinationError, match=f"{fail_in}_switchover of bad failed") as exc:
        run_coordinated([Good(), Bad()], lambda: switched.append(True), lambda: ("h", 1), h.record)
    assert isinstance(exc.value, HarnessError) and not isinstance(exc.value, AssertionError)
    assert released == ["good"]  # the drained client is always resumed
    assert switched == ([] if fail_in == "before" else [True])
    assert [e.get("phase") for e in h.events("coord.error")] == [fail_in]


def test_faults_switchover_coordinates_a_registered_client() -> None:
    h = History()
    with Pair(mode="sync", history=h) as pair:
        faults = Faults(pair, h)
        faults.switchover()  # nobody coordinates: as before, no coord.* events
        assert h.events("coord") == []
        old = pair.principal.name
        observer = Observer(pair)
        assert isinstance(observer, SwitchoverCoordinator)
        stop = faults.coordinate(observer)
        faults.switchover()
        assert observer.seen == [("before", old), ("after", tuple(pair.principal.client_address))]
        assert pair.principal.name != old
        coord = h.events("coord")
        assert [e.type for e in coord] == ["coord.before", "coord.before_done", "coord.after", "coord.after_done"]
        start = [e for e in h.events("fault.start") if e.index < coord[0].index and e.get("fault") == "switchover"][-1]
        end = [e for e in h.events("fault.end") if e.get("fault") == "switchover"][-1]
        assert start.get("id") == coord[0].get("fault_id") and end.index > coord[-1].index
        assert coord[1].get("result") == {"drained": 1}
        stop()
        faults.switchover()
        assert len(observer.seen) == 2


def test_faults_switchover_with_failing_coordinator_records_the_error() -> None:
    h = History()
    with Pair(mode="sync", history=h) as pair:
        faults = Faults(pair, h)
        faults.coordinate(Observer(pair, fail_in="before"))
        old = pair.principal.name
        with pytest.raises(CoordinationError):
            faults.switchover()
        assert pair.principal.name == old  # no role swap after a failed drain
        end = [e for e in h.events("fault.end") if e.get("fault") == "switchover"][-1]
        assert "CoordinationError" in end.get("error")
