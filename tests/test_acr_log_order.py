"""The ACR checkers order what a server received by the server's own log order, never by a re-derived
time or a text sort (RULEBOOK ACR-2, ACR-3, ACR-4, ACR-7: the replay of the special registers is judged
from the server's view). Equal log times are normal: a fast client's SETs and statement land in one
millisecond of the log.

* (tests/test_acr_real_log.py: a real PostgreSQL log with a replay and its statement in one
  millisecond, spliced into an ACR history: a correct fast client keeps every ACR rule);
* property (hypothesis): any bursts of server statements sharing one log time give every ACR
  checker the verdict it gives with distinct times, for keeping and for breaking histories;
* property (hypothesis): a server log read by :class:`StatementLog` in any cut of reads gives the
  same events, in log order, with times that never contradict it."""

from __future__ import annotations

import inspect
import random
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_acr_checkers import (  # the synthetic ACR histories of the checker tests
    ALL,
    SETS,
    H,
    _first_statement_case,
    _held_cursor_case,
    _later_statement_case,
)

from harness.history.core import Event
from harness.rules.acr import check_seamless_statement_replay
from harness.topology.serverlog import StatementLog

# ---------------------------------------------------------------------- the histories judged


def _cases() -> dict[str, H]:
    return {
        "first-kept": _first_statement_case(),
        "first-error": _first_statement_case(seamless=False),
        "first-no-replay": _first_statement_case(replay=[]),
        "first-one-set": _first_statement_case(replay=SETS[:1]),
        "first-reversed": _first_statement_case(replay=list(reversed(SETS))),
        "later-kept": _later_statement_case(),
        "later-no-replay": _later_statement_case(replay=False),
        "later-silent": _later_statement_case("ok"),
        "held-kept": _held_cursor_case(),
        "held-wrong-registers": _held_cursor_case(replay=[*SETS, "SET work_mem = '8MB'"]),
        "held-108n": _held_cursor_case("08506"),
    }


CASES = _cases()


def _bursts(events: list[Event]) -> list[list[int]]:
    """Runs of consecutive server statements of one session (positions in ``events``)."""
    runs: list[list[int]] = []
    for i, e in enumerate(events):
        if e.type != "server.stmt":
            continue
        prev = events[i - 1] if i else None
        if runs and prev is not None and prev.type == "server.stmt" and prev.get("session") == e.get("session"):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _share_times(events: list[Event], joins: list[bool]) -> list[Event]:
    """``events`` with each server statement given the log time of the statement before it in its
    burst where ``joins`` says so (cycled): what a log with millisecond times shows of a fast client."""
    out = list(events)
    k = 0
    for run in _bursts(events):
        for a, b in zip(run, run[1:], strict=False):
            if joins[k % len(joins)]:
                out[b] = Event(out[b].index, out[a].t, out[b].type, dict(out[b].fields))
            k += 1
    return out


def _judge(checker: Any, events: list[Event], mode: str = "seamless") -> Any:
    """``checker`` on ``events`` for a client run in ``mode`` (the rules of the other mode: unknown)."""
    takes_mode = "mode" in inspect.signature(checker).parameters
    return checker(events, mode=mode) if takes_mode else checker(events)


def _verdicts(events: list[Event]) -> list[Any]:
    return [_judge(c, events).valid for c in ALL]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(CASES)), st.lists(st.booleans(), min_size=1, max_size=12))
def test_equal_log_times_give_the_verdict_of_distinct_times(case: str, joins: list[bool]) -> None:
    events = CASES[case].events()
    shared = _share_times(events, joins)
    assert _verdicts(shared) == _verdicts(events), case


def test_every_burst_in_one_millisecond_keeps_and_breaks_as_before() -> None:
    """The extreme of the property: every burst logged in one millisecond (no sampling luck)."""
    for name, h in CASES.items():
        events = h.events()
        assert _verdicts(_share_times(events, [True])) == _verdicts(events), name
    # the property is not vacuous: the cases keep and break ACR-2
    assert check_seamless_statement_replay(CASES["first-kept"].events()).valid is True
    assert check_seamless_statement_replay(_share_times(CASES["first-reversed"].events(), [True])).valid is False


# ---------------------------------------------------------------------- StatementLog: any cut of reads


_LOG = [
    "1765000000.123 [41] acr|s1|app|127.0.0.1(5000)| LOG:  connection received: host=127.0.0.1 port=5000",
    "1765000000.123 [41] acr|s1|app|127.0.0.1(5000)| LOG:  statement: SET search_path TO public",
    "1765000000.123 [41] acr|s1|app|127.0.0.1(5000)| LOG:  statement: SET statement_timeout = '20s'",
    "1765000000.123 [41] acr|s1|app|127.0.0.1(5000)| LOG:  statement: SELECT a,",
    "\tb FROM t",
    "1765000000.122 [42] acr|s2|app|127.0.0.1(5001)| LOG:  statement: SELECT 1",
    "1765000000.124 [41] acr|s1|app|127.0.0.1(5000)| LOG:  execute <unnamed>: SELECT $1",
    "1765000000.124 [41] acr|s1|app|127.0.0.1(5000)| LOG:  disconnection: session time: 0:00:00.010",
]


def _read_in_cuts(cuts: list[int]) -> list[tuple[str, float, dict[str, Any]]]:
    text = "\n".join(_LOG) + "\n"
    got: list[tuple[str, float, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "server.log"
        path.write_text("")
        log = StatementLog(path, lambda type_, t, **f: got.append((type_, t, f)), "n1")
        pos = 0
        for cut in sorted(set(cuts)):
            with path.open("a") as fh:
                fh.write(text[pos:cut])
            pos = cut
            log.read()
        with path.open("a") as fh:
            fh.write(text[pos:])
        log.read(flush=True)
    return got


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len("\n".join(_LOG)) + 1), max_size=10))
def test_any_cut_of_log_reads_gives_the_same_events_in_log_order(cuts: list[int]) -> None:
    got = _read_in_cuts(cuts)
    whole = _read_in_cuts([])
    assert [(t, f) for t, _, f in got] == [(t, f) for t, _, f in whole]
    times = [t for _, t, _ in got]
    assert times == sorted(times)  # a line logged "earlier" by another backend does not jump the order
    assert [f.get("sql") for _, _, f in got if f.get("sql")] == [
        "SET search_path TO public", "SET statement_timeout = '20s'", "SELECT a,\nb FROM t", "SELECT 1", "SELECT $1"]
    # the three lines of one millisecond share their time; the offset is fixed, so every cut agrees
    assert len({t for _, t, f in got[1:4]}) == 1
    assert abs((times[-1] - times[1]) - 0.001) < 1e-6


def test_a_random_interleaving_of_reads_never_reorders_a_session() -> None:
    """A deterministic sample of many cuts (beside the hypothesis property)."""
    rng = random.Random(7)
    size = len("\n".join(_LOG))
    for _ in range(50):
        got = _read_in_cuts([rng.randrange(size) for _ in range(rng.randrange(1, 30))])
        s1 = [f["sql"] for t, _, f in got if t == "server.stmt" and f["session"] == "s1"]
        assert s1 == ["SET search_path TO public", "SET statement_timeout = '20s'", "SELECT a,\nb FROM t", "SELECT $1"]
