"""Coordinated switchover (PER-1/PER-4): the ``coord.*`` hook protocol and ``faults.coordinate``,
against a real pair: the coordinator is told before the principal goes and after the new one is up."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from harness.errors import ConfigError, HarnessError, TopologyError
from harness.faults import Faults
from harness.faults.coordination import (
    CoordinationError,
    SwitchoverCoordinator,
    catch_up,
    check_coordinator,
    run_coordinated,
)
from harness.history.core import History
from harness.topology import Pair
from harness.topology.run import locked


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


# --------------------------------------------------------------------- early resume (PER-1)

class Hooks:
    """Coordinators for :func:`run_coordinated` alone: what each hook saw, in order."""

    def __init__(self, calls: list[str], name: str, fail_after: bool = False) -> None:
        self.calls, self.name, self.fail_after = calls, name, fail_after

    def before_switchover(self) -> None:
        self.calls.append(f"before {self.name}")

    def after_switchover(self, address: tuple[str, int]) -> None:
        self.calls.append(f"after {self.name} {address[1]}")
        if self.fail_after:
            raise RuntimeError("resume refused")


def test_early_resume_releases_clients_while_the_action_goes_on() -> None:
    calls: list[str] = []
    h = History()
    writable = threading.Event()
    resumed = threading.Event()

    class Waits(Hooks):
        def after_switchover(self, address: tuple[str, int]) -> None:
            super().after_switchover(address)
            resumed.set()

    def action(on_writable: Any) -> str:
        calls.append("promoted")
        writable.set()
        on_writable()
        # the rest of the switchover: it can only finish because the clients were resumed meanwhile
        assert resumed.wait(10), "clients were not resumed while the switchover went on"
        calls.append("old principal rejoined")
        return "done"

    # after_switchover runs in reverse order: the waiting hook is registered first, so it is called
    # last and "resumed" means every hook has run (with it second, "after a" raced the action's end)
    result = run_coordinated([Waits(calls, "a"), Hooks(calls, "b")], action, lambda: ("127.0.0.1", 7), h.record,
                             fault_id=3, early=True)
    assert result == "done"
    assert calls == ["before a", "before b", "promoted", "after b 7", "after a 7", "old principal rejoined"]
    assert [(e.type, e.get("stage")) for e in h.events("coord.after")] == [
        ("coord.after", "writable"), ("coord.after_done", "writable")] * 2


def test_resume_first_releases_the_inside_clients_before_the_rest_of_the_action() -> None:
    # PER-1 stall: the rejoin's CHECKPOINT, pg_rewind and server start wait until every coordinator
    # that resumes inside the switchover is resumed; the others are resumed beside, as before
    calls: list[str] = []
    h = History()
    threads: dict[str, str] = {}
    rest_started = threading.Event()

    class Inside(Hooks):
        resume_inside_switchover = True

        def after_switchover(self, address: tuple[str, int]) -> None:
            threads[self.name] = threading.current_thread().name
            super().after_switchover(address)

    class Beside(Hooks):
        def after_switchover(self, address: tuple[str, int]) -> None:
            threads[self.name] = threading.current_thread().name
            assert rest_started.wait(10)  # it may run only once the action went on
            super().after_switchover(address)

    def action(on_writable: Any) -> str:
        calls.append("promoted")
        on_writable()
        calls.append("old principal rejoined")
        rest_started.set()
        on_writable()  # a second call is ignored
        return "done"

    with pytest.raises(CoordinationError, match="after_switchover of b failed"):
        run_coordinated([Beside(calls, "c"), Inside(calls, "a"), Inside(calls, "b", fail_after=True)], action,
                        lambda: ("127.0.0.1", 7), h.record, early=True, resume_first=True)
    # both inside clients released (the failing one too) before the action went on, the other one
    # after; the error is raised only once the action has completed
    assert calls == ["before c", "before a", "before b", "promoted", "after b 7", "after a 7",
                     "old principal rejoined", "after c 7"]
    me = threading.current_thread().name
    assert threads == {"a": me, "b": me, "c": "coord-resume"}
    assert [e.get("stage") for e in h.events("coord.after") if e.type == "coord.after"] == ["writable"] * 3
    assert [e.get("phase") for e in h.events("coord.error")] == ["after"]


def test_catch_up_drains_then_resumes_at_the_given_principal() -> None:
    calls: list[str] = []
    catch_up(Hooks(calls, "idle"), ("127.0.0.1", 5433))
    assert calls == ["before idle", "after idle 5433"]


def test_an_inside_resume_that_takes_the_run_lock_is_an_error_not_a_hang(tmp_path) -> None:
    with locked(tmp_path):
        with pytest.raises(TopologyError, match="already held by this thread"):
            with locked(tmp_path):
                pass
    # another thread waits for it as before, and the lock is free again afterwards
    got = threading.Event()

    def take() -> None:
        with locked(tmp_path):
            got.set()

    with locked(tmp_path):
        t = threading.Thread(target=take)
        t.start()
        assert not got.wait(0.2)
    assert got.wait(5)
    t.join()


def test_early_resume_hooks_run_once_and_the_action_error_wins() -> None:
    calls: list[str] = []
    h = History()

    def action(on_writable: Any) -> None:
        on_writable()
        on_writable()  # a second call is ignored
        raise TopologyError("pg_rewind failed")

    with pytest.raises(TopologyError, match="pg_rewind failed"):
        run_coordinated([Hooks(calls, "a")], action, lambda: ("h", 1), h.record, early=True)
    assert calls == ["before a", "after a 1"]  # resumed once, before the failure was known
    assert [e.get("stage") for e in h.events("coord.after") if e.type == "coord.after"] == ["writable"]


def test_early_resume_before_the_new_principal_is_writable_falls_back_to_done() -> None:
    calls: list[str] = []
    h = History()

    def action(on_writable: Any) -> None:
        raise TopologyError("promotion failed")  # never writable: resumed after the failure

    with pytest.raises(TopologyError, match="promotion failed"):
        run_coordinated([Hooks(calls, "a")], action, lambda: ("h", 1), h.record, early=True)
    assert calls == ["before a", "after a 1"]
    assert [e.get("stage") for e in h.events("coord.after") if e.type == "coord.after"] == ["done"]


def test_early_resume_hook_failure_is_raised_after_the_action_completed() -> None:
    calls: list[str] = []
    h = History()

    def action(on_writable: Any) -> str:
        on_writable()
        time.sleep(0.05)
        calls.append("rest of the switchover")
        return "ok"

    with pytest.raises(CoordinationError, match="after_switchover of bad failed"):
        run_coordinated([Hooks(calls, "good"), Hooks(calls, "bad", fail_after=True)], action, lambda: ("h", 1),
                        h.record, early=True)
    assert "rest of the switchover" in calls and "after good 1" in calls  # every client released anyway
    assert [e.get("phase") for e in h.events("coord.error")] == ["after"]


class Writer(Observer):
    """At the early resume, commits one row on the new principal (as a resumed client would) and
    records when the commit was acknowledged."""

    def __init__(self, pair: Any) -> None:
        super().__init__(pair, name="writer")
        self.commit_acked: float | None = None
        self.old_state: str | None = None

    def after_switchover(self, new_principal_address: tuple[str, int]) -> dict[str, Any]:
        self.seen.append(("after", tuple(new_principal_address)))
        old = next(n for n in self.pair.nodes if n.role != "principal")
        self.old_state = old.state
        with psycopg.connect(self.pair.principal.dsn(), autocommit=True, connect_timeout=5) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS early (k int)")
            conn.execute("INSERT INTO early VALUES (1)")
        self.commit_acked = time.monotonic()
        return {"resumed": 1}


def test_faults_switchover_resumes_when_writable_and_sync_commits_wait_for_the_old_principal() -> None:
    """Sync pair: the coordinator is resumed between ``switchover.writable`` and the old principal's
    rejoin; its commit is acknowledged only once the old principal runs again (DUR-1); switchover()
    itself returns with the pair complete."""
    h = History()
    with Pair(mode="sync", history=h) as pair:
        faults = Faults(pair, h)
        old = pair.principal.name
        writer = Writer(pair)
        faults.coordinate(writer)
        faults.switchover()
        assert pair.principal.name != old and pair.node(old).role == "mirror" and pair.node(old).state == "running"
        writable = h.events("switchover.writable")[-1]
        after = [e for e in h.events("coord.after") if e.type == "coord.after"][-1]
        rejoined = h.events("switchover.rejoined")[-1]
        restarted = [e for e in h.events("node.start") if e.get("node") == old][-1]
        end = [e for e in h.events("fault.end") if e.get("fault") == "switchover"][-1]
        assert writable.get("node") == pair.principal.name and rejoined.get("node") == old
        assert after.get("stage") == "writable"
        assert writable.index < after.index < end.index and rejoined.index < end.index
        assert after.t < restarted.t  # resumed before the old principal was even started again
        assert writer.old_state == "stopped"
        assert writer.commit_acked is not None and writer.commit_acked > restarted.t  # DUR-1: waited for it
        with pair.principal.admin() as conn:
            assert conn.execute("SELECT state FROM pg_stat_replication").fetchone()[0] == "streaming"


def test_faults_switchover_in_an_async_pair_resumes_every_client_before_the_old_principal_rejoins() -> None:
    """Async pair (PER-1 stall): the coordinators' resumes run before the rejoin's CHECKPOINT, pg_rewind
    and server start, not beside them; the resumed client's commit is acknowledged at once."""
    h = History()
    with Pair(mode="async", history=h, links="direct") as pair:
        faults = Faults(pair, h)
        old = pair.principal.name
        slow: dict[str, str] = {}

        class SlowWriter(Writer):
            resume_inside_switchover = True

            def after_switchover(self, new_principal_address: tuple[str, int]) -> dict[str, Any]:
                result = super().after_switchover(new_principal_address)
                time.sleep(0.5)  # longer than the rejoin's rewind and start: it waits for this
                slow["old_after"] = next(n for n in self.pair.nodes if n.name == old).state
                return result

        writer = SlowWriter(pair)
        faults.coordinate(writer)
        faults.switchover()
        done = [e for e in h.events("coord.after_done") if e.get("client") == "writer"][-1]
        restarted = [e for e in h.events("node.start") if e.get("node") == old][-1]
        assert done.get("stage") == "writable"
        assert writer.old_state == "stopped" and slow["old_after"] == "stopped"
        assert done.index < restarted.index
        assert writer.commit_acked is not None and writer.commit_acked < restarted.t
        assert pair.node(old).role == "mirror" and pair.node(old).state == "running"


def test_switchover_completes_when_on_writable_raises_then_raises_it() -> None:
    h = History()
    with Pair(mode="async", history=h, links="direct") as pair:
        old = pair.principal.name

        def boom() -> None:
            raise RuntimeError("client refused to resume")

        with pytest.raises(RuntimeError, match="client refused to resume"):
            pair.switchover(on_writable=boom)
        assert pair.principal.name != old and pair.node(old).state == "running"
        assert [e.get("node") for e in h.events("switchover.rejoined")] == [old]


def test_faults_switchover_resumes_clients_when_the_rest_of_the_switchover_fails(monkeypatch) -> None:
    """The old principal cannot be made a standby (a harness failure after the promotion): the
    coordinator was resumed at the writable point all the same, and the error is the topology's."""
    h = History()
    with Pair(mode="async", history=h, links="direct") as pair:
        faults = Faults(pair, h)
        observer = Observer(pair)
        faults.coordinate(observer)
        new = pair.mirror.name

        def broken(name: str) -> None:
            raise TopologyError(f"cannot mark {name} a standby (injected)")

        monkeypatch.setattr(pair, "_make_standby", broken)
        with pytest.raises(TopologyError, match="injected"):
            faults.switchover()
        assert observer.seen[-1] == ("after", tuple(pair.node(new).client_address))
        assert [e.get("stage") for e in h.events("coord.after_done")] == ["writable"]
        end = [e for e in h.events("fault.end") if e.get("fault") == "switchover"][-1]
        assert "injected" in end.get("error") and h.events("switchover.rejoined") == []
