"""MIR-5 / MIR-6 with the documented default login timeout of 15 s (``Connect Timeout`` left out of
the connection string) and both partners black-holed: the exact table of the rulebook.

| attempt | partner | round | retry time | cumulative |
|---|---|---|---|---|
| 1 | initial | 1 | 1.2 s | 1.2 s |
| 2 | failover | 1 | 1.2 s | 2.4 s |
| 3 | initial | 2 | 2.4 s | 4.8 s |
| 4 | failover | 2 | 2.4 s | 7.2 s |
| 5 | initial | 3 | 3.6 s | 10.8 s |
| 6 | failover | 3 | 3.6 s | 14.4 s |
| 7 | initial | 4 | 4.8 s cut to the 0.6 s left | 15.0 s |

Three rounds use 14.4 s; the fourth round is truncated to one final quick attempt on the initial
partner (MIR-6); nothing extends past 15 s. Slow (≈16 s); still part of ``make chaos``."""

from __future__ import annotations

from typing import Any

import pytest

from harness import Check, Faults, History, Pair
from harness.rules.mirroring import (
    check_initial_partner_first,
    check_partner_alternation,
    check_retry_time_schedule,
    check_truncated_last_round,
)
from harness.rules.verdict import Verdict
from harness.workload.mirroring import BackgroundOpen, connstring, hold_times, judge_with_stall_retry, partner

DEFAULT_LT = 15.0
TOL = 0.020
#: (partner, expected hold in s) per attempt: the rulebook's table for LT = 15 s.
TABLE: tuple[tuple[str, float], ...] = (("initial", 1.2), ("failover", 1.2), ("initial", 2.4), ("failover", 2.4),
                                       ("initial", 3.6), ("failover", 3.6), ("initial", 0.6))


def _table_verdicts(history: History, pair: Pair, t_open: float) -> list[Verdict]:
    """The table row by row, from the fault proxies (``t_open`` = when the open was invoked):

    * MIR-5: attempts 1-6 go I, F, I, F, I, F and are held 1.2, 1.2, 2.4, 2.4, 3.6, 3.6 s, each
      ±TOL - the three rounds' 14.4 s (their sum is reported; each row carries its own tolerance);
    * MIR-6: then exactly one more attempt, on the initial partner, starting no earlier than
      14.4 s − TOL (the three rounds were not cut short), held what is left of the 15 s (≈0.6 s,
      less what rounds 1-3 overran) ±TOL, and ending at 15 s ±TOL; 7 attempts in all."""
    proxies = {pair.links.client_proxy("n1"): "initial", pair.links.client_proxy("n2"): "failover"}
    seen = hold_times(history, list(proxies), t_open)
    rows = [f"{k}:{proxies[h.proxy][0].upper()}:{'held' if h.seconds is None else f'{h.seconds:.3f}'}"
            for k, h in enumerate(seen, 1)]
    evidence = [i for h in seen for i in (h.accepted.index, *((h.closed.index,) if h.closed else ()))]
    table = "; ".join(f"{k}:{p[0].upper()}:{s:g}" for k, (p, s) in enumerate(TABLE, 1))

    def row_ok(k: int) -> bool:
        if k >= len(seen):
            return False
        h, (want_partner, want) = seen[k], TABLE[k]
        return proxies[h.proxy] == want_partner and h.seconds is not None and abs(h.seconds - want) <= TOL

    held6 = [h.seconds for h in seen[:6] if h.seconds is not None]
    mir5 = Verdict("MIR-5", len(seen) >= 6 and all(row_ok(k) for k in range(6)),
                   expected=f"attempts 1-6 held {table.rsplit(';', 1)[0]} s (each ±{TOL}): 14.4 s over three rounds",
                   observed=f"attempts {'; '.join(rows[:6]) or 'none'}"
                            + (f" (sum {sum(held6):.3f} s)" if len(held6) == 6 else ""),
                   evidence=tuple(evidence[:12]), details={"table": table, "observed": rows})
    ok6, note = False, "no attempt 7"
    if len(seen) >= 7 and seen[6].closed is not None:
        last = seen[6]
        start, end = last.accepted.t - t_open, last.closed.t - t_open
        left = DEFAULT_LT - start
        ok6 = (len(seen) == 7 and proxies[last.proxy] == "initial" and start >= 14.4 - TOL
               and abs((last.seconds or 0.0) - left) <= TOL and abs(end - DEFAULT_LT) <= TOL)
        note = (f"attempt 7 to the {proxies[last.proxy]} partner from +{start:.3f} s, held {last.seconds:.3f} s "
                f"(left: {left:.3f} s), ended at +{end:.3f} s")
    mir6 = Verdict("MIR-6", ok6,
                   expected=f"round 4 cut to one attempt on the initial partner, from 14.4 s, held the ≈0.6 s left "
                            f"and ending at {DEFAULT_LT:g} s (±{TOL}); 7 attempts in all",
                   observed=f"{len(seen)} attempts; {note}",
                   evidence=tuple(evidence[12:] or evidence[-2:]), details={"table": table, "observed": rows})
    return [mir5, mir6]


@pytest.mark.slow
@pytest.mark.rule("MIR-1", "MIR-4", "MIR-5", "MIR-6")
@pytest.mark.topology(mode="sync", mirror_readable=False)
def test_default_15s_login_timeout_exact_schedule(pair: Pair, faults: Faults, history: History, check: Check,
                                                  make_client: Any) -> None:
    """Both partners black-holed, default LT (15 s): the attempts are held exactly as the rulebook's
    table says (MIR-5: 1.2, 1.2, 2.4, 2.4, 3.6, 3.6 s; MIR-6: then one 0.6 s attempt on the initial
    partner ending at 15 s; ±20 ms each), alternating from the initial partner (MIR-1, MIR-4).
    Under the machine-stall monitor, a try spoilt by a recorded stall is run once more (two tries)."""
    text = connstring(pair, "n1", "n2", login_timeout="default")
    history.meta.setdefault("rule_params", {}).update(
        {rule: {"login_timeout": DEFAULT_LT} for rule in ("MIR-4", "MIR-5", "MIR-6")})

    def scenario(k: int) -> list[Verdict]:
        with faults.partition("n1", how="blackhole"), faults.partition("n2", how="blackhole"):
            bg = BackgroundOpen(make_client(f"app-{k}"), text, history, label="default login timeout")
            bg.wait(DEFAULT_LT + 1.0)
        bg.finish(10.0)
        events = history.events()
        names = {"initial": partner(pair, "n1"), "failover": partner(pair, "n2"), "process": f"app-{k}"}
        return [
            check_initial_partner_first(events, **names),
            check_partner_alternation(events, **names, login_timeout=DEFAULT_LT, tolerance=TOL),
            check_retry_time_schedule(events, **names, login_timeout=DEFAULT_LT, tolerance=TOL),
            check_truncated_last_round(events, **names, login_timeout=DEFAULT_LT, tolerance=TOL),
            *_table_verdicts(history, pair, bg.started_at),
        ]

    check(judge_with_stall_retry(history, scenario, tries=2))
