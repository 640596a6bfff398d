"""MIR-2 (database required), MIR-11 (no automatic reconnect), MIR-12 (redirection is transparent
in naming) and MIR-13 (a server shutdown aborts a pending attempt at once), on a principal +
mirror pair behind the fault proxy (mirror with hot standby off: an inactive partner)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness import Check, Faults, History, Pair
from harness.errors import HarnessError
from harness.rules.connstring import ConnectionStringError
from harness.rules.mirroring import (
    check_database_required,
    check_initial_partner_first,
    check_no_automatic_reconnect,
    check_partner_alternation,
    check_redirect_keeps_initial_name,
    check_shutdown_aborts_attempts,
)
from harness.rules.verdict import Verdict
from harness.workload.mirroring import (
    CLIENT_ERRORS,
    BackgroundOpen,
    connstring,
    judge_with_stall_retry,
    open_during,
    partner,
    partners,
    try_open,
    wait_until,
)

TOL = 0.020
GRACE = 1.0


def _unavailable_database_verdict(history: History, process: str, login_timeout: float) -> Verdict:
    """MIR-2, second sentence: "An unavailable database raises an error". Kept when the open of a
    database that does not exist ended in an error (``op.fail``) raised to the application;
    **(interpretation)** it must also not outlast the login timeout (+``TOL``) - the server's
    answer is final, there is nothing to wait for."""
    events = history.events()
    invokes = [e for e in events if e.type == "op.invoke" and e.get("f") == "open" and e.get("process") == process]
    expected = "opening a database that does not exist raises an error (by the login timeout)"
    if len(invokes) != 1:
        return Verdict("MIR-2", "unknown", expected=expected, observed=f"{len(invokes)} opens of {process}")
    inv = invokes[0]
    end = next((e for e in events if e.type in ("op.ok", "op.fail", "op.info") and e.get("f") == "open"
                and e.get("process") == process and e.get("op_id") == inv.get("op_id")), None)
    if end is None:
        return Verdict("MIR-2", False, expected=expected, evidence=(inv.index,),
                       observed="the open never returned")
    took = end.t - inv.t
    if end.type != "op.fail":
        return Verdict("MIR-2", False, expected=expected, evidence=(inv.index, end.index),
                       observed=f"the open ended {end.type} after {took:.3f} s")
    if took > login_timeout + TOL:
        return Verdict("MIR-2", False, expected=expected, evidence=(inv.index, end.index),
                       observed=f"the error came after {took:.3f} s, past the login timeout {login_timeout:g} s")
    return Verdict("MIR-2", True, expected=expected, evidence=(inv.index, end.index),
                   observed=f"error after {took:.3f} s: {str(end.get('error'))[:120]}")


@pytest.mark.rule("MIR-2")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_database_is_required(pair: Pair, history: History, check: Check, make_client: Any) -> None:
    """MIR-2: a connection string without ``Database`` is refused by the client, with no connection
    attempt at either partner's proxy (no failover is possible without it); a database that does
    not exist raises an error. (A client-level rule: both strings name the real pair.)"""
    lt = 1.0
    no_db = make_client("no-database")
    try_open(no_db, connstring(pair, "n1", "n2", login_timeout=lt, database=None), history,
             label="no Database", accept=(*CLIENT_ERRORS, ConnectionStringError))
    missing = make_client("missing-database")
    try_open(missing, connstring(pair, "n1", "n2", login_timeout=lt, database="no_such_db"), history,
             label="Database=no_such_db")
    check([
        check_database_required(history.events(), initial=partner(pair, "n1"), failover=partner(pair, "n2"),
                    process="no-database"),
        _unavailable_database_verdict(history, "missing-database", lt),
    ])


@pytest.mark.rule("MIR-1", "MIR-4", "MIR-12")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_redirected_connection_presents_the_initial_partner_name(pair: Pair, faults: Faults, history: History,
                                                                 check: Check, make_client: Any) -> None:
    """MIR-12: a connection redirected to the failover partner still presents the initial
    partner's name (``Server=`` value), in two redirections (LT = 2 s):

    * ``Server=<mirror n2>; Failover Partner=<principal n1>``: n2 answers "inactive", the open
      lands on n1 (MIR-1: n2 first; MIR-4: then the failover partner);
    * after a failover (n1 killed, n2 promoted) with n1's proxy refusing connects (``refuse``):
      ``Server=n1; Failover Partner=n2`` lands on n2."""
    lt = 2.0
    first = make_client("via-inactive-initial")
    res = try_open(first, connstring(pair, "n2", "n1", login_timeout=lt), history, label="initial inactive")
    res.close()
    faults.failover()
    second = make_client("via-refused-initial")
    with faults.partition("n1", how="refuse"):
        bg = BackgroundOpen(second, connstring(pair, "n1", "n2", login_timeout=lt), history, label="initial refused")
        bg.wait(lt + GRACE)
    bg.finish(10.0).close()
    events = history.events()
    inactive = {"initial": partner(pair, "n2"), "failover": partner(pair, "n1"), "process": "via-inactive-initial"}
    refused = {"initial": partner(pair, "n1"), "failover": partner(pair, "n2"), "process": "via-refused-initial"}
    check([
        check_initial_partner_first(events, **inactive),
        check_partner_alternation(events, **inactive, login_timeout=lt, tolerance=TOL),
        check_redirect_keeps_initial_name(events, **inactive),
        check_redirect_keeps_initial_name(events, **refused),
    ])


@pytest.mark.rule("MIR-4", "MIR-11")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_broken_connection_is_not_reconnected(pair: Pair, faults: Faults, history: History, check: Check,
                                              client: Any) -> None:
    """MIR-11: an established connection (``Server=n1; Failover Partner=n2``, on the principal n1)
    is broken by a planned switchover. The application sees an error on its next statement, and
    again on the one after (nothing reconnects by itself; no partner connection is accepted outside
    an open). A new open with the same string then fails over: n1 (now the mirror) answers inactive
    and the failover partner n2 opens (MIR-4: initial, then failover), serving writes."""
    lt = 2.0
    text = connstring(pair, "n1", "n2", login_timeout=lt)
    res = try_open(client, text, history, label="before switchover")
    errors: list[BaseException] = []
    if res.ok:  # (a client that cannot open a healthy pair is judged by MIR-4; MIR-11 is then unknown)
        try:
            res.conn.execute("SELECT 1")
        except CLIENT_ERRORS as exc:
            errors.append(exc)
    faults.switchover()
    if res.ok:
        for _ in range(2):
            try:
                res.conn.execute("SELECT 1")
            except CLIENT_ERRORS as exc:
                errors.append(exc)
    history.record("client.outcome", process="app", f="execute", label="around the switchover",
                   errors=[f"{type(e).__name__}: {str(e)[:200]}" for e in errors])
    again = try_open(client, text, history, label="after switchover")
    if again.ok:
        try:
            again.conn.execute("SELECT pg_is_in_recovery()")
        except CLIENT_ERRORS:
            pass
        again.close()
    events = history.events()
    names = {"initial": partner(pair, "n1"), "failover": partner(pair, "n2"), "process": "app"}
    check([
        check_no_automatic_reconnect(events, **names),
        check_partner_alternation(events, **names, login_timeout=lt, tolerance=TOL),
    ])


@pytest.mark.rule("MIR-4", "MIR-13")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_server_shutdown_aborts_a_pending_attempt_at_once(pair: Pair, faults: Faults, history: History, check: Check,
                                                          make_client: Any) -> None:
    """MIR-13: the principal n1's postmaster is paused (SIGSTOP: a new connection is accepted by the
    kernel and then hangs), so attempt 1 of ``Server=n1; Failover Partner=n2`` (LT = 8 s: retry time
    640 ms, room for a container's stop to take half a second under load) is pending when n1 is shut
    down (fast) 120 ms later. The client must abandon it as soon
    as the server closes it and go on at once (next attempt within 20 ms), not wait out the retry
    time. n1 restarts 0.3 s later; the open then succeeds on it (MIR-4: alternation until it opens).
    Runs under the machine-stall monitor (``judge_with_stall_retry``)."""
    lt = 8.0
    text = connstring(pair, "n1", "n2", login_timeout=lt)
    proxy = pair.links.client_proxy("n1")

    def scenario(k: int) -> list[Verdict]:
        with faults.pause("n1"):
            t0 = time.monotonic()
            bg = BackgroundOpen(make_client(f"app-{k}"), text, history, label="pending at shutdown")
            if not wait_until(lambda: any(e.get("proxy") == proxy and e.t >= t0
                                          for e in history.events("conn.upstream_connected")), 1.0):
                raise HarnessError("precondition: no attempt reached the paused n1 within 1 s")
            time.sleep(0.12)
            with faults.stop("n1", mode="fast"):
                time.sleep(0.3)
        bg.wait(lt + GRACE)
        bg.finish(10.0).close()
        events = history.events()
        names = {"initial": partner(pair, "n1"), "failover": partner(pair, "n2"), "process": f"app-{k}"}
        return [
            check_shutdown_aborts_attempts(events, **names, login_timeout=lt, tolerance=TOL),
            check_partner_alternation(events, **names, login_timeout=lt, tolerance=TOL),
        ]

    check(judge_with_stall_retry(history, scenario))


@pytest.mark.rule("MIR-1", "MIR-4")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_refused_first_partner_seen_from_outside(pair: Pair, faults: Faults, history: History, check: Check,
                                                 client: Any) -> None:
    """``Server=<mirror n2>; Failover Partner=<principal n1>`` with n2's proxy refusing connects
    (``refuse``: the listener is disabled, the kernel answers the SYN with an RST), LT = 2 s. MIR-1:
    attempt 1 goes to n2; MIR-4: then n1, which opens. No fault proxy sees the refused connect: the
    harness's packet capture does (``conn.refused``), so a client that reports no attempts of its own
    is judged as well. Where the capture is unavailable (not root), such a client gets *unknown*
    (a harness error), never a violation (OBS-1)."""
    lt = 2.0
    open_during(client, connstring(pair, "n2", "n1", login_timeout=lt), history, [faults.partition("n2", how="refuse")],
                wait=lt + GRACE, label="n2 refused").close()
    events = history.events()
    names = partners(pair, "n2", "n1", "app")
    check([
        check_initial_partner_first(events, **names, use_client_view=False),  # judged on what the harness saw itself
        check_partner_alternation(events, **names, login_timeout=lt, tolerance=TOL, use_client_view=False),
        check_initial_partner_first(events, **names),
        check_partner_alternation(events, **names, login_timeout=lt, tolerance=TOL),
    ])


@pytest.mark.rule("MIR-1", "MIR-4")
@pytest.mark.topology(mode="sync", mirror_readable=True)
def test_readable_standby_first_is_not_a_connection_to_the_principal(pair: Pair, history: History, check: Check,
                                                                    client: Any) -> None:
    """``Server=<standby n2>; Failover Partner=<principal n1>`` where n2 is a *readable* hot standby
    (it accepts the login but is not the principal), LT = 2 s.
    **(interpretation, docs/mirroring.md)** a connection that lands on a readable standby and stays
    there has not reached the principal the rule demands: MIR-4 alternation goes on to the failover
    partner n1, and the open ends there - an open that ends on n2 violates MIR-4. MIR-1: n2 first."""
    lt = 2.0
    res = try_open(client, connstring(pair, "n2", "n1", login_timeout=lt), history, label="readable standby first")
    in_recovery = None
    if res.ok:
        try:
            in_recovery = res.conn.execute("SELECT pg_is_in_recovery()")
        except CLIENT_ERRORS:
            pass
        res.close()
    history.record("client.outcome", process="app", f="execute", label="pg_is_in_recovery()",
                   value=str(in_recovery))
    events = history.events()
    names = partners(pair, "n2", "n1", "app")
    check([
        check_initial_partner_first(events, **names),
        check_partner_alternation(events, **names, login_timeout=lt, tolerance=TOL),
    ])
