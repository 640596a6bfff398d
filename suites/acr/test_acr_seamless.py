"""ACR-1, ACR-2, ACR-3, ACR-5, ACR-8 (reason code 2) and DUR-1 in the seamless mode (the DB2 default):
a member killed before the first statement of a transaction, in the middle of one, and at COMMIT /
ROLLBACK after a full fetch. The application's transport is on ``m1`` when the member fails; the
group keeps serving through the other members (one primary behind per-member addresses, docs/acr.md)."""

from __future__ import annotations

import pytest

from harness import Check, History, Pair
from harness.errors import Sql30108N
from harness.faults.acr import AcrFaults
from harness.rules.acr import judge
from harness.rules.durability import check_no_acknowledged_write_lost
from harness.topology.acr import AcrGroups
from harness.workload.acr import final_read

SETS = ["SET search_path TO public", "SET statement_timeout = '20s'"]


@pytest.mark.rule("ACR-1", "ACR-2", "ACR-6", "DUR-1")
@pytest.mark.topology(mode="sync")
@pytest.mark.acr(weights=[10, 50, 90])
def test_member_killed_before_first_statement(pair: Pair, acr: AcrGroups, acr_faults: AcrFaults, make_app: object,
                                              history: History, check: Check) -> None:
    """ACR-2: the first statement of a transaction meets a dead member: it returns normally, rerun on
    another member after the two SETs were replayed (judged from what the server received). ACR-1:
    the server list says m3/90, m2/50, m1/10 - the reroute goes to m3 first (the configured order is
    m1, m2, m3). DUR-1: the keys committed before and after are on the primary."""
    app = make_app()  # type: ignore[operator]
    app.connect()
    for s in SETS:
        app.execute(s)
    app.execute("SELECT 1")
    app.write(1)
    app.commit()
    with acr_faults.member("m1"):
        app.attempt(lambda: app.execute("SELECT count(*) FROM acr_keys"))
        app.attempt(lambda: (app.write(2), app.commit()))
    final_read(pair.principal.dsn(direct=True), history)
    events = history.events()
    check([*judge(events, history.meta, "ACR-1", "ACR-2", "ACR-6"),
           check_no_acknowledged_write_lost(events, mode=pair.mode)])


@pytest.mark.rule("ACR-3", "ACR-6", "ACR-8", "DUR-1")
@pytest.mark.topology(mode="sync")
def test_member_killed_in_the_middle_of_a_transaction(pair: Pair, acr: AcrGroups, acr_faults: AcrFaults,
                                                      make_app: object, history: History, check: Check) -> None:
    """ACR-3: the second statement meets a dead member: the transaction is rolled back, the client
    reconnects and replays the SETs before it raises SQL30108N; the application retries the whole
    transaction. ACR-8: reason code 2 (a member of the current group failed), and the connection does
    not go back to m1. DUR-1: nothing acknowledged is lost."""
    app = make_app()  # type: ignore[operator]
    app.connect()
    for s in SETS:
        app.execute(s)
    app.write(1)
    app.commit()
    with acr_faults.member("m1"):
        app.attempt(lambda: app.write(2))  # first statement (seamless)
        app.attempt(lambda: app.write(3))  # would be fine; the next one meets the second failure
        with acr_faults.member("m2"):
            app.attempt(lambda: app.write(4))
        if isinstance(app.last_error, Sql30108N) or app.last_error is None:
            app.attempt(lambda: (app.write(2), app.write(3), app.write(4), app.commit()))
    final_read(pair.principal.dsn(direct=True), history)
    events = history.events()
    check([*judge(events, history.meta, "ACR-3", "ACR-6", "ACR-8"),
           check_no_acknowledged_write_lost(events, mode=pair.mode)])


@pytest.mark.rule("ACR-5", "ACR-6")
@pytest.mark.topology(mode="sync")
def test_commit_and_rollback_after_full_fetch(pair: Pair, acr: AcrGroups, acr_faults: AcrFaults, make_app: object,
                                              history: History, check: Check) -> None:
    """ACR-5: a read-only transaction whose result was fully fetched meets a dead member at COMMIT (and
    another at ROLLBACK): both fail over seamlessly. A transaction that declared a cursor is not
    seamless at COMMIT (SQL30108N or SQL30081N)."""
    app = make_app()  # type: ignore[operator]
    app.connect()
    app.execute(SETS[0])
    app.execute("SELECT k FROM acr_keys")
    with acr_faults.member("m1"):
        app.attempt(app.commit)
        app.attempt(lambda: app.execute("SELECT generate_series(1, 5)"))
        with acr_faults.member("m2"):
            app.attempt(app.rollback)
            app.attempt(lambda: app.execute("DECLARE c CURSOR FOR SELECT 1"))
            with acr_faults.member("m3"):
                app.attempt(app.commit)
    check(judge(history.events(), history.meta, "ACR-5", "ACR-6"))
