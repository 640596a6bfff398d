"""What the report carries of a history (docs/reports.md, "Report size"): a passed test's windows
around faults and evidence with every rare event, a failed test's whole history compressed; the
saved history file stays whole either way."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.history.core import Event, History
from harness.report.attachment import BULK_PREFIXES, compressed, trim, trimmed_jsonl


def _history(fault_at: float = 50.0) -> History:
    h = History(meta={"test": "t"})
    h.record("topology.up", t=0.0)
    for i in range(100):
        h.record("op.invoke", t=float(i), process="w", op_id=i, f="write")
        h.record("op.ok", t=float(i) + 0.5, process="w", op_id=i, f="write")
    h.record("fault.start", t=fault_at, fault="switchover", id=1)
    h.record("fault.end", t=fault_at + 0.3, fault="switchover", id=1)
    h.record("harness.note", t=99.0, what="x")
    return h


def test_a_passed_test_keeps_rare_events_and_bulk_near_faults_and_evidence() -> None:
    events = _history().events()
    kept = trim(events, evidence=[10])
    types = [e.type for e in kept]
    assert "topology.up" in types and "harness.note" in types and types.count("fault.start") == 1
    bulk_t = sorted({e.t for e in kept if e.type.startswith(BULK_PREFIXES)})
    evidence_t = events[10].t
    assert all(49.0 <= t <= 51.3 or evidence_t - 1 <= t <= evidence_t + 1 for t in bulk_t)
    assert 49.0 in bulk_t and 51.0 in bulk_t and 52.0 not in bulk_t
    dense = History()
    for i in range(1000):
        dense.record("op.ok", t=i * 0.001)
    dense.record("fault.start", t=0.5)
    assert len(trim(dense.events(), per_side=25)) == 51  # 25 each side of the fault, and the fault
    assert [e.index for e in kept] == sorted(e.index for e in kept)
    assert len(kept) < len(events) / 5


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["op.ok", "conn.accepted", "fault.start", "harness.x"]),
                          st.integers(0, 20)), max_size=60), st.floats(0.0, 3.0), st.integers(1, 5))
def test_trim_keeps_exactly_the_nearest_bulk_events_even_with_equal_times(items: list[tuple[str, int]],
                                                                         window: float, per_side: int) -> None:
    events = [Event(i, float(t), typ, {}) for i, (typ, t) in enumerate(items)]  # many share a time
    kept = {e.index for e in trim(events, window=window, per_side=per_side)}
    marks = sorted({e.t for e in events if e.type.startswith("fault.")})
    bulk = sorted((e for e in events if e.type.startswith(BULK_PREFIXES)), key=lambda e: (e.t, e.index))
    want = set()
    for m in marks:
        before = [e for e in bulk if e.t < m][-per_side:]
        after = [e for e in bulk if e.t >= m][:per_side]
        want |= {e.index for e in before + after if abs(e.t - m) <= window}
    for e in events:
        assert (e.index in kept) == (not e.type.startswith(BULK_PREFIXES) or e.index in want), (e, marks)


def test_the_trimmed_header_says_what_was_cut_and_where_the_whole_is() -> None:
    h = _history()
    text = trimmed_jsonl(dict(h.meta), h.events(), [], "/x/t.jsonl")
    head = json.loads(text.splitlines()[0])
    assert head["meta"]["trimmed"]["of"] == len(h.events())
    assert head["meta"]["trimmed"]["kept"] == len(text.splitlines()) - 1
    assert head["meta"]["trimmed"]["full_history"] == "/x/t.jsonl"
    assert gzip.decompress(compressed(text)) == text.encode()


SUITE = '''
import time

import pytest
from harness.rules.verdict import Verdict


@pytest.mark.rule("DUR-1")
@pytest.mark.parametrize("ok", [True, False])
def test_many_ops(history, check, ok):
    base = time.monotonic() - 100
    for i in range(3000):  # 30 s of requests, long before the fault
        history.record("op.invoke", t=base + i * 0.01, process="w", op_id=i, f="write", value=i)
    history.record("fault.start", fault="switchover", id=1)
    history.record("fault.end", fault="switchover", id=1)
    check(Verdict("DUR-1", ok, expected="nothing lost", observed="as expected" if ok else "lost"))
'''


def test_the_report_attaches_a_window_for_a_pass_and_the_whole_for_a_failure(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    results = tmp_path / "allure-results"
    env = {**os.environ, "FAILOVER_HARNESS_REPORTS": str(tmp_path / "reports")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "test_suite.py",
                           f"--alluredir={results}", f"--history-dir={tmp_path / 'h'}", "--rootdir", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:]  # one passed, one failed
    by_status = {}
    for p in results.glob("*-result.json"):
        r = json.loads(p.read_text())
        by_status[r["status"]] = {a["name"]: results / a["source"] for a in r.get("attachments", [])}
    passed = next(path for name, path in by_status["passed"].items() if name.endswith(".jsonl"))
    lines = passed.read_text().splitlines()
    assert json.loads(lines[0])["meta"]["trimmed"]["of"] > 3000 and len(lines) < 20
    failed = next(path for name, path in by_status["failed"].items() if "whole history" in name)
    whole = gzip.decompress(failed.read_bytes()).decode().splitlines()
    assert len(whole) > 3000
    saved = sorted((tmp_path / "h").glob("*.jsonl"))
    assert len(saved) == 2 and all(len(p.read_text().splitlines()) > 3000 for p in saved)  # files stay whole
