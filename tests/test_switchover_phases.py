"""Where a switchover's stall goes (harness.report.switchover_phases; PER-1 context): the phases of one
session's stall always add up to it, missing or disordered marks collapse their phase, equal
timestamps give empty phases, never negative ones."""

from __future__ import annotations

import pytest

from harness.report.stalls import spanning_gap, spanning_stall
from harness.report.switchover_phases import PHASES, split_stall, summarize

pytestmark = pytest.mark.rule("PER-1")

MARKS = {"drain_start": 10.0, "drained": 10.05, "stop": 10.06, "writable": 10.16, "resumed": 10.26}


def test_every_phase_of_a_coordinated_switchover() -> None:
    phases = split_stall((9.99, 10.3), MARKS)
    assert list(phases) == list(PHASES)
    assert phases == pytest.approx({"lead": 0.01, "drain": 0.05, "hold": 0.01, "unwritable": 0.10,
                                    "reattach": 0.10, "release": 0.04})
    assert sum(phases.values()) == pytest.approx(0.31)


def test_a_client_that_does_not_coordinate_has_no_drain_or_reattach() -> None:
    phases = split_stall((9.9, 10.5), {"drain_start": None, "drained": None, "stop": 10.0, "writable": 10.2,
                                       "resumed": None})
    assert phases == pytest.approx({"lead": 0.0, "drain": 0.0, "hold": 0.1, "unwritable": 0.2, "reattach": 0.0,
                                    "release": 0.3})


def test_a_session_that_stalls_from_inside_the_drain() -> None:
    """Its last success came after the drain had started (a busy session finishing its transaction):
    no lead, only the rest of the drain counts."""
    phases = split_stall((10.03, 10.27), MARKS)
    assert phases["lead"] == 0.0
    assert phases["drain"] == pytest.approx(0.02)
    assert phases["release"] == pytest.approx(0.01)
    assert sum(phases.values()) == pytest.approx(0.24)


def test_a_session_released_before_the_resume_returned() -> None:
    """Its first success came before ``coord.after_done``: the resume's tail is not its stall."""
    phases = split_stall((9.99, 10.2), MARKS)
    assert phases["reattach"] == pytest.approx(0.04)
    assert phases["release"] == 0.0
    assert sum(phases.values()) == pytest.approx(0.21)


def test_equal_timestamps_give_empty_phases() -> None:
    same = dict.fromkeys(MARKS, 10.0)
    phases = split_stall((10.0, 10.0), same)
    assert set(phases.values()) == {0.0}
    phases = split_stall((9.9, 10.1), same)
    assert phases["lead"] == pytest.approx(0.1) and phases["release"] == pytest.approx(0.1)
    assert all(phases[p] == 0.0 for p in ("drain", "hold", "unwritable", "reattach"))


def test_a_mark_out_of_order_collapses_its_phase() -> None:
    """``resumed`` before ``writable`` (a broken history): the reattach is empty, never negative."""
    marks = {**MARKS, "resumed": 10.1}
    phases = split_stall((9.99, 10.3), marks)
    assert phases["reattach"] == 0.0
    assert min(phases.values()) >= 0.0
    assert sum(phases.values()) == pytest.approx(0.31)


def test_a_stall_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot end"):
        split_stall((10.3, 10.0), MARKS)


def test_summary_is_per_phase_median_and_largest() -> None:
    runs = [split_stall((9.99, end), MARKS) for end in (10.27, 10.3, 10.4)]
    summary = summarize(runs)
    assert summary.count == 3
    assert summary.median["release"] == pytest.approx(0.04)
    assert summary.largest["release"] == pytest.approx(0.14)
    assert summary.stall_median == pytest.approx(0.31)
    assert "release 0.040/0.140" in summary.row()
    with pytest.raises(ValueError):
        summarize([])


def test_spanning_gap_is_where_spanning_stall_lies() -> None:
    times = [9.0, 9.5, 9.9, 10.4, 10.5]
    start, end, censored = spanning_gap(times, (10.0, 10.2), (9.0, 11.0))
    assert (start, end, censored) == (9.9, 10.4, False)
    assert spanning_stall(times, (10.0, 10.2), (9.0, 11.0)) == (pytest.approx(0.5), False)
    # no success after the outage: censored, up to the window's end
    assert spanning_gap([9.0, 9.9], (10.0, 10.2), (9.0, 11.0)) == (9.9, 11.0, True)
