"""ACR-9 (non-seamless mode): a receive timeout and a query timeout on a member that stopped answering
(black-holed) yield SQL30108N with failure code 1-3 within the timeout; an interrupt (cancel) yields
SQL30108N with failure code 4. A client without such timeouts would hang: the member is killed
after :data:`GIVE_UP` s so the call ends (and is judged)."""

from __future__ import annotations

import pytest

from harness import Check, History, Pair
from harness.faults.acr import AcrFaults
from harness.rules.acr import check_group_address_tried_last, check_timeout_failure_codes
from harness.topology.acr import AcrGroups

TIMEOUT = 1.0
TOLERANCE = 1.5
GIVE_UP = 4.0


def _blackholed_call(app: object, acr_faults: AcrFaults, member: str, cancel_after: float | None = None) -> None:
    app.execute("SELECT 1")  # type: ignore[attr-defined]
    app.commit()  # type: ignore[attr-defined]
    with acr_faults.member(member, how="blackhole"):
        killer = acr_faults.member(member, after=GIVE_UP, duration=0.5)  # ends a call that would hang
        try:
            if cancel_after is not None:
                app.cancel_after(cancel_after)  # type: ignore[attr-defined]
            app.attempt(lambda: app.execute("SELECT 2"))  # type: ignore[attr-defined]
        finally:
            killer.stop()  # type: ignore[attr-defined]  # not needed any more: cancelled unless it started
            killer.join(10)  # type: ignore[attr-defined]


@pytest.mark.rule("ACR-6", "ACR-9")
@pytest.mark.topology(mode="sync")
def test_receive_timeout_query_timeout_and_interrupt(pair: Pair, acr: AcrGroups, acr_faults: AcrFaults,
                                                     make_app: object, history: History, check: Check) -> None:
    """Three applications one after another, each on m1 when it stops answering: ``receive_timeout``,
    ``query_timeout`` (both :data:`TIMEOUT` s), and an interrupt after 0.5 s."""
    cases = [("app-receive", {"receive_timeout": TIMEOUT}, None), ("app-query", {"query_timeout": TIMEOUT}, None),
             ("app-interrupt", {}, 0.5)]
    for process, options, cancel in cases:
        app = make_app(process, seamless=False, **options)  # type: ignore[operator]
        app.connect()
        _blackholed_call(app, acr_faults, "m1", cancel)
        app.client.shutdown()
    events = history.events()
    check([*(check_timeout_failure_codes(events, process=p, receive_timeout=o.get("receive_timeout"),
                         query_timeout=o.get("query_timeout"), tolerance=TOLERANCE) for p, o, _ in cases),
           *(check_group_address_tried_last(events, process=p) for p, _, _ in cases)])
