"""The mirroring suites' timing-retry helper (``harness.workload.mirroring``): a violation of a
timing rule is retried only when the machine demonstrably stalled, never a try whose violations are
all of non-timing rules, and the last try's verdicts are what the test asserts."""

from __future__ import annotations

import time

from harness.history.core import History
from harness.rules.verdict import Verdict
from harness.workload.mirroring import judge_with_stall_retry


def _scenario(results: list[list[Verdict]]):
    calls: list[int] = []

    def scenario(k: int) -> list[Verdict]:
        calls.append(k)
        time.sleep(0.03)  # long enough for the monitor to wake a few times
        return results[min(k, len(results)) - 1]

    return scenario, calls


def test_timing_violation_with_a_stall_is_retried_and_recorded() -> None:
    h = History()
    bad, good = [Verdict("MIR-5", False, observed="held 0.070 s")], [Verdict("MIR-5", True)]
    scenario, calls = _scenario([bad, good])
    out = judge_with_stall_retry(h, scenario, threshold=-1.0)  # every wake-up counts as a stall
    assert calls == [1, 2] and out == good
    assert h.meta["timing_retries"][0]["try"] == 1 and h.events("harness.retry")


def test_no_retry_without_a_stall_or_for_a_non_timing_rule_and_last_try_wins() -> None:
    bad5 = [Verdict("MIR-5", False)]
    scenario, calls = _scenario([bad5])
    assert judge_with_stall_retry(History(), scenario, threshold=60.0) == bad5 and calls == [1]
    bad4 = [Verdict("MIR-4", False), Verdict("MIR-1", True)]
    scenario, calls = _scenario([bad4])
    assert judge_with_stall_retry(History(), scenario, threshold=-1.0) == bad4 and calls == [1]
    scenario, calls = _scenario([bad5])
    assert judge_with_stall_retry(History(), scenario, tries=3, threshold=-1.0) == bad5 and calls == [1, 2, 3]


def test_a_timing_violation_in_every_try_of_a_machine_stalled_beyond_any_tolerance_is_unknown() -> None:
    """OBS-1: the machine (or the fault proxy's log) was late by more than any tolerance in every
    try: the timing verdict could not be observed, so it is *unknown*, never a violation; the other
    rules' verdicts are kept, and tries with small stalls only still decide."""
    def stalled(k: int) -> list[Verdict]:
        time.sleep(0.03)  # the monitor wakes a few times; threshold=-1: each wake-up counts as a stall
        return [Verdict("MIR-13", False, observed="attempt 4 came 0.068 s later"), Verdict("MIR-4", False)]

    h = History()
    out = judge_with_stall_retry(h, stalled, tries=2, threshold=-1.0, unobservable=0.0)  # any stall is too much
    assert [v.status for v in out] == ["unknown", "violated"]
    assert "not observable" in out[0].observed and "0.068 s" in out[0].observed
    assert h.events("harness.unobservable")
    scenario, calls = _scenario([[Verdict("MIR-13", False)]])  # stalls below `unobservable`: the violation stands
    assert judge_with_stall_retry(History(), scenario, tries=2, threshold=-1.0, unobservable=5.0)[0].valid is False
    assert calls == [1, 2]
