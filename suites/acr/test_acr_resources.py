"""ACR-4: a member fails while the session holds resources that cannot move to another member - a held
cursor (``WITH HOLD``), a temporary table: SQL30081N (SQLSTATE 08001), and the special registers go
back to the last COMMIT point (a SET issued in the failed transaction is not replayed)."""

from __future__ import annotations

import pytest

from harness import Check, History, Pair
from harness.faults.acr import AcrFaults
from harness.rules.acr import judge
from harness.topology.acr import AcrGroups


@pytest.mark.rule("ACR-4", "ACR-6")
@pytest.mark.topology(mode="sync")
def test_held_cursor_and_temporary_table_are_not_reusable(pair: Pair, acr: AcrGroups, acr_faults: AcrFaults,
                                                          make_app: object, history: History, check: Check) -> None:
    """Two cases on one connection: a held cursor open across COMMIT, then a temporary table; each
    time the member dies in the middle of a transaction that also issued a SET."""
    app = make_app()  # type: ignore[operator]
    app.connect()
    app.execute("SET search_path TO public")
    app.execute("DECLARE held CURSOR WITH HOLD FOR SELECT generate_series(1, 10)")
    app.commit()
    app.execute("SELECT 1")
    app.execute("SET statement_timeout = '25s'")
    with acr_faults.member("m1"):
        app.attempt(lambda: app.execute("SELECT 2"))
        app.attempt(lambda: app.execute("SELECT 3"))  # the next statement: a new transport, registers at COMMIT
        app.attempt(app.commit)
        app.attempt(lambda: app.execute("CREATE TEMPORARY TABLE scratch (x int)"))
        app.attempt(app.commit)
        app.attempt(lambda: app.execute("SELECT 4"))
        app.attempt(lambda: app.execute("SET statement_timeout = '26s'"))
        with acr_faults.member("m2"), acr_faults.member("m3"):
            app.attempt(lambda: app.execute("SELECT 5"))
        app.attempt(lambda: app.execute("SELECT 6"))
    check(judge(history.events(), history.meta, "ACR-4", "ACR-6"))
