"""MIR-9 (partner cache update after a role change) and MIR-10 (stale failover partner), on a group
of three nodes A = n1, B = n2, C = n3 (standbys with hot standby off: inactive partners, or readable
hot standbys), and MIR-9 on a pair (a redirected client that reopens). The
principal publishes its current mirror's client-facing address as ``mirroring.partner`` (the
PostgreSQL stand-in for the mirror name SQL Server returns at login); the topology records each
change as a ``mirroring.partner`` event, which is what the MIR-9 checker compares the client's
failover attempts with."""

from __future__ import annotations

from typing import Any

import pytest

from harness import Check, Faults, Group, History, Pair, Topology
from harness.errors import HarnessError
from harness.rules.mirroring import (
    check_initial_partner_first,
    check_partner_alternation,
    check_partner_cache_update,
    check_stale_failover_partner,
)
from harness.workload.mirroring import (
    BackgroundOpen,
    client_address,
    client_variant,
    connstring,
    partner,
    partners,
    try_open,
)

LT = 1.0
GRACE = 1.0


def _published(history: History, principal: str) -> str | None:
    """The last ``mirroring.partner`` the topology recorded for ``principal`` (``host:port``)."""
    pubs = [e for e in history.events("mirroring.partner") if e.get("node") == principal]
    return str(pubs[-1].get("partner")) if pubs else None


def _require_published(topology: Topology, history: History, principal: str, mirror: str) -> None:
    """Harness precondition (OBS-1): ``principal`` is the principal and publishes ``mirror``."""
    host, port = client_address(topology, mirror)
    seen = _published(history, principal)
    if topology.principal.name != principal or seen != f"{host}:{port}":
        raise HarnessError(f"scenario needs {principal} as principal publishing {mirror} ({host}:{port}); "
                           f"principal is {topology.principal.name}, it published {seen!r}")


def _open_and_close(client: Any, text: str, history: History, label: str) -> None:
    """One open by the application; a connection is closed at once (only the attempts matter)."""
    bg = BackgroundOpen(client, text, history, label=label)
    bg.wait(LT + GRACE)
    bg.finish(10.0).close()


@pytest.mark.rule("MIR-9")
@pytest.mark.topology(mode="sync", mirror_readable=False, nodes=3)
def test_failover_partner_cache_follows_role_changes(group: Group, faults: Faults, history: History, check: Check,
                                                     client: Any) -> None:
    """MIR-9 with one client instance and ``Server=A; Failover Partner=B`` (LT = 1 s):

    1. open on A (principal, publishes B): both variants cache B;
    2. failover (A killed, B promoted, B publishes C); open: A fails, the failover attempt goes to the
       cached B and opens; *native* now caches C, *managed* keeps B (it learns once);
    3. switchover to C (C publishes B; A still down); open: attempt 2 goes to the cached partner -
       C for native (opens), B for managed (now only a mirror: the open runs into its LT).

    Odd attempts always go to A (the initial partner is never overwritten). The test judges the
    variant the client declares (``client.variant``: the reference clients ``reference-native`` /
    ``reference-managed``); **(interpretation)** a client that declares none is judged as native."""
    variant = client_variant(client)
    history.meta.setdefault("rule_params", {})["MIR-9"] = {"variant": variant}
    text = connstring(group, "n1", "n2", login_timeout=LT)
    _require_published(group, history, "n1", "n2")
    _open_and_close(client, text, history, "1: principal A")
    faults.failover()  # n1 killed, n2 promoted
    _require_published(group, history, "n2", "n3")
    _open_and_close(client, text, history, "2: principal B after failover")
    faults.switchover("n3")
    _require_published(group, history, "n3", "n2")
    _open_and_close(client, text, history, "3: principal C after switchover")
    check(check_partner_cache_update(history.events(), initial=partner(group, "n1"), failover=partner(group, "n2"),
                      variant=variant, process="app"))


def _four_cases(group: Group, faults: Faults, history: History, make_client: Any) -> list[Any]:
    """MIR-10's four first connects (see the tests below) and their verdicts."""
    text = connstring(group, "n1", "n2", login_timeout=LT)
    names = {"initial": partner(group, "n1"), "failover": partner(group, "n2")}
    cases: list[tuple[str, str]] = []

    def first_connect(case: str, principal: str, mirror: str) -> None:
        _require_published(group, history, principal, mirror)
        app = make_client(case)
        result = try_open(app, text, history, label=f"{case}: principal {principal}, mirror {mirror}")
        result.close()
        cases.append((case, principal))

    first_connect("case-A-B", "n1", "n2")
    faults.switchover("n2")
    first_connect("case-B-A", "n2", "n1")
    faults.switchover("n3")
    with faults.stop("n2"):  # B is no longer a partner (restarted as a standby at the end)
        first_connect("case-C-A", "n3", "n1")
        faults.switchover("n1")
        first_connect("case-A-C", "n1", "n3")
    return [check_stale_failover_partner(history.events(), **names, principal=partner(group, principal), process=case)
            for case, principal in cases]


@pytest.mark.rule("MIR-10")
@pytest.mark.topology(mode="sync", mirror_readable=False, nodes=3)
def test_stale_failover_partner_four_cases(group: Group, faults: Faults, history: History, check: Check,
                                           make_client: Any) -> None:
    """MIR-10: ``Server=A; Failover Partner=B``, first connect of a fresh client (empty cache) in each
    of the four cases (LT = 1 s):

    | principal | mirror | first connect works? |
    |---|---|---|
    | A | B | yes |
    | B | A | yes (via failover partner B) |
    | C | A | no (A is only a mirror, B is stopped: stale) |
    | A | C | yes (A answers; B stale) |

    Reached by switchover to B, switchover to C + stop B, switchover back to A. The checker judges
    each case's first open against the principal the test names."""
    check(_four_cases(group, faults, history, make_client))


@pytest.mark.rule("MIR-10")
@pytest.mark.topology(mode="sync", mirror_readable=True, nodes=3)
def test_stale_failover_partner_four_cases_with_readable_standbys(group: Group, faults: Faults, history: History,
                                                                  check: Check, make_client: Any) -> None:
    """MIR-10's four cases with *readable* hot standbys: a standby accepts the login but is not the
    principal. **(interpretation, docs/mirroring.md)** a first connect that lands on a readable
    standby and stays there is not "the first connect works": in case C | A the connect must still
    fail (A only a standby, B stale), and in case B | A it must end on B, not on A."""
    check(_four_cases(group, faults, history, make_client))


@pytest.mark.rule("MIR-1", "MIR-4", "MIR-9")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_redirected_then_reopened_in_a_pair(pair: Pair, faults: Faults, history: History, check: Check,
                                            client: Any) -> None:
    """MIR-9 in a two-node pair, ``Server=A (n1); Failover Partner=B (n2)``, LT = 1 s: after a
    switchover B is the principal and publishes A - the initial partner - as its mirror.
    **(interpretation, RULEBOOK MIR-9)** the client then caches the server it is connected to (B) as
    the failover partner. Open 1 is redirected (A inactive → B); open 2 with the same client must
    reach the principal again: attempts initial → failover, on B (MIR-4: the open ends on the
    principal; MIR-9: attempt 2 goes to the cached B). A client that caches A twice tries A, A, A …
    and fails while B is up."""
    variant = client_variant(client)
    history.meta.setdefault("rule_params", {})["MIR-9"] = {"variant": variant}
    faults.switchover("n2")
    _require_published(pair, history, "n2", "n1")
    text = connstring(pair, "n1", "n2", login_timeout=LT)
    _open_and_close(client, text, history, "1: redirected to B")
    _open_and_close(client, text, history, "2: reopened")
    events = history.events()
    names = partners(pair, "n1", "n2", "app")
    check([
        check_initial_partner_first(events, **names),
        check_partner_alternation(events, **names, login_timeout=LT),
        check_partner_cache_update(events, **names, variant=variant),
    ])
