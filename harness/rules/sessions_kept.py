"""PER-1 judged from what a persistent proxy and a real client saw (the seed's sysbench
measurement): every client connection the proxy opened stays open across every switchover - each
drain keeps all sessions and closes none, no session opens after the first switchover (a reconnect),
and the client itself reports no error. Pure: reads events only (``persist.*`` from the proxy,
``sysbench.result`` from the run, ``fault.start`` of switchovers)."""

from __future__ import annotations

from harness.history.core import Event
from harness.rules.verdict import Verdict

RULE = "PER-1"


def check_every_session_kept(events: list[Event], *, threads: int, min_switchovers: int = 5) -> Verdict:
    """PER-1: ``threads`` client sessions, all kept by every drain of at least ``min_switchovers``
    switchovers (persist.drain_end kept == threads, closed == 0), no session opened after the first
    switchover, and the client's own result without error (``sysbench.result``). Unknown when the
    run did not happen as planned (too few switchovers or sessions, no client result)."""
    expected = (f"{threads} sessions kept across >= {min_switchovers} switchovers, no reconnect, "
                "0 client errors")
    switchovers = [e for e in events if e.type == "fault.start" and e.get("fault") == "switchover"]
    drains = [e for e in events if e.type == "persist.drain_end"]
    opens = [e for e in events if e.type == "persist.session_open"]
    results = [e for e in events if e.type == "sysbench.result"]
    if len(switchovers) < min_switchovers or len(drains) < min_switchovers or not results:
        return Verdict(RULE, "unknown", expected, f"{len(switchovers)} switchover(s), {len(drains)} drain(s), "
                       f"{len(results)} client result(s): not the planned run")
    first = min(e.t for e in switchovers)
    late = [e for e in opens if e.t > first]
    short = [e for e in drains if int(e.get("kept", 0)) != threads or int(e.get("closed", 0))]
    closed = [e for e in events if e.type == "persist.closed"]
    result = results[-1]
    problems = []
    if len(opens) - len(late) < threads:
        problems.append(f"only {len(opens) - len(late)} of {threads} sessions open before the first switchover")
    if short:
        problems.append("drains kept " + ", ".join(f"{e.get('kept')}/{threads} (closed {e.get('closed')})"
                                                    for e in short))
    if late:
        problems.append(f"{len(late)} session(s) opened after the first switchover (reconnects)")
    if closed:
        problems.append(f"{len(closed)} session(s) closed by the proxy: "
                        + ", ".join(sorted({str(e.get('reason')) for e in closed})))
    if int(result.get("errors", 0)) or int(result.get("reconnects", 0)) or int(result.get("exit_code", 0)):
        problems.append(f"client reported errors={result.get('errors')} reconnects={result.get('reconnects')} "
                        f"exit={result.get('exit_code')}")
    evidence = tuple(e.index for e in [*short, *late, *closed][:20])
    observed = "; ".join(problems) or (f"{threads}/{threads} kept in each of {len(drains)} drains, "
                                       f"{result.get('transactions')} transactions, 0 errors")
    return Verdict(RULE, not problems, expected, observed, evidence,
                   {"drains": len(drains), "switchovers": len(switchovers), "sessions": len(opens)})
