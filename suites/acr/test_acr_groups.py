"""ACR-6 (the group-wide address last), ACR-7 (lazy transport, non-seamless mode) and ACR-8 (reason
codes 2 then 4, the alternate group, the failed member not retried on that connection)."""

from __future__ import annotations

import pytest

from harness import Check, History, Pair
from harness.faults.acr import AcrFaults
from harness.rules.acr import judge
from harness.topology.acr import AcrGroups


@pytest.mark.rule("ACR-2", "ACR-6")
@pytest.mark.topology(mode="sync")
def test_every_member_down_then_the_group_address(pair: Pair, acr: AcrGroups, acr_faults: AcrFaults,
                                                  make_app: object, history: History, check: Check) -> None:
    """Every member of the list is killed while the group-wide address still serves: the client tries
    each member, then the group address (and gets through); then the group address fails too: the
    client gives up (SQL30081N) only after trying it."""
    app = make_app()  # type: ignore[operator]
    app.connect()
    app.execute("SELECT 1")
    app.commit()
    with acr_faults.members(["m1", "m2", "m3"]):
        app.attempt(lambda: app.execute("SELECT 2"))
        app.attempt(app.commit)
        with acr_faults.member("group"):
            app.attempt(lambda: app.execute("SELECT 3"))
    check(judge(history.events(), history.meta, "ACR-2", "ACR-6"))


@pytest.mark.rule("ACR-6", "ACR-7", "ACR-8")
@pytest.mark.topology(mode="sync")
@pytest.mark.acr(alternate=2)
def test_non_seamless_reroute_to_the_alternate_group(pair: Pair, acr: AcrGroups, acr_faults: AcrFaults,
                                                     make_app: object, history: History, check: Check) -> None:
    """Non-seamless mode (WLB): ``connect`` binds no transport; the first SET binds one. m1 dies:
    SQL30108N reason code 2 and no new transport until the next statement, which gets the registers
    of the last COMMIT point first. Then the whole primary group dies: reason code 2 (the connection
    failed), then 4 (no member reachable), then the next statement runs on the alternate group."""
    app = make_app(seamless=False)  # type: ignore[operator]
    app.connect()
    app.execute("SET search_path TO public")
    app.execute("SELECT 1")
    app.commit()
    with acr_faults.member("m1"):
        app.attempt(lambda: app.execute("SELECT 2"))
        app.attempt(lambda: app.execute("SELECT 2"))
        app.attempt(app.commit)
        with acr_faults.members(["m2", "m3", "group"]):
            for _ in range(3):
                if app.attempt(lambda: app.execute("SELECT 3")) is None:
                    break
            app.attempt(app.commit)
    events = history.events()
    check(judge(events, history.meta, "ACR-6", "ACR-7", "ACR-8"))
