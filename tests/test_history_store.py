"""History persistence: JSON-lines round trip, streaming writer, loader errors, thread safety."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import ConfigError
from harness.history import Event, History, HistoryWriter, load_jsonl, read_jsonl, save_jsonl
from harness.redact import redact_data


def _sample() -> History:
    h = History(meta={"test": "t::x", "rule_params": {"DUR-1": {"mode": "async"}}})
    h.record("node.start", node="pg1", role="primary", seconds=0.21)
    h.record("conn.accepted", t=h.events()[0].t + 0.1234567891234, proxy="pg1", conn_id=7,
             client="127.0.0.1:5000", listen="127.0.0.1:6000", upstream="127.0.0.1:7000", node="pg1")
    h.record("op.ok", process="c1", op_id=1, f="read_all", value=[1, "k2", None, {"x": [1.5]}])
    h.record("fault.end", fault="partition", id="f1", node=None, seconds=1.0, error="ünïcode <&> error")
    return h


def test_round_trip_keeps_index_t_type_fields_and_meta(tmp_path: Path) -> None:
    h = _sample()
    path = save_jsonl(h, tmp_path / "h.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["meta"]["test"] == "t::x"
    assert len(lines) == 1 + len(h)
    loaded = load_jsonl(path)
    assert loaded.events() == h.events()  # Event is a dataclass: index, t (exact float), type, fields
    assert loaded.meta == h.meta
    assert [e.index for e in loaded] == [0, 1, 2, 3]


def test_record_after_load_continues_after_highest_index(tmp_path: Path) -> None:
    events = [Event(0, 1.0, "a"), Event(5, 2.0, "b")]  # a filtered (non-dense) history
    save_jsonl(events, tmp_path / "h.jsonl", meta={"k": 1})
    loaded = load_jsonl(tmp_path / "h.jsonl")
    assert loaded.record("c").index == 6
    assert loaded.meta["k"] == 1


def test_non_json_values_are_written_as_text(tmp_path: Path) -> None:
    h = History()
    h.record("x", value=(1, 2), s={3, 1}, b=b"\xffab", p=Path("/tmp/z"), err=ValueError("boom"))
    fields = load_jsonl(save_jsonl(h, tmp_path / "h.jsonl")).events()[0].fields
    assert fields == {"value": [1, 2], "s": [1, 3], "b": "\\xffab", "p": "/tmp/z", "err": "ValueError: boom"}


def test_lines_out_of_order_are_sorted_by_index(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"meta": {}}\n{"index": 1, "t": 2.0, "type": "b"}\n'
                    '{"index": 0, "t": 1.0, "type": "a"}\n')
    assert [e.type for e in load_jsonl(path)] == ["a", "b"]


def test_torn_last_line_is_skipped_but_a_bad_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"meta": {}}\n{"index": 0, "t": 1.0, "type": "a"}\n{"index": 1, "t": 2.0, "ty')
    assert len(load_jsonl(path)) == 1
    path.write_text('{"meta": {}}\n{"index": 0, "t"\n{"index": 1, "t": 2.0, "type": "b"}\n')
    with pytest.raises(ConfigError, match=r"h\.jsonl:2: not an event line"):
        load_jsonl(path)


@pytest.mark.parametrize("content, message", [
    ("", "is empty"),
    ('{"index": 0, "t": 1, "type": "a"}\n', "first line must be the header"),
    ("not json\n", "header is not JSON"),
    ('{"meta": {}, "version": 99}\n', "newer than this harness"),
    ('{"meta": {}}\n{"index": 0, "t": 1, "type": "a"}\n{"index": 0, "t": 2, "type": "b"}\n', "appears twice"),
])
def test_bad_files_give_clear_config_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        read_jsonl(path)


def test_missing_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_jsonl(tmp_path / "nope.jsonl")


def test_many_writer_threads_dense_indices_ordered_clock_and_streamed_file(tmp_path: Path) -> None:
    """16 threads record 400 events each while a HistoryWriter streams them: every event is kept once,
    indices are dense, t never decreases with the index, each thread's own order is preserved, and
    the streamed file loads back identical to the in-memory history."""
    h = History(meta={"test": "concurrency"})
    threads_n, per_thread = 16, 400
    barrier = threading.Barrier(threads_n)
    seen_by_listener: list[int] = []
    lock = threading.Lock()

    def listener(e: Event) -> None:
        with lock:
            seen_by_listener.append(e.index)

    h.subscribe(listener)

    def work(n: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            h.record("op.ok", process=f"p{n}", op_id=i, f="write", value=f"{n}-{i}")

    streamed = tmp_path / "streamed.jsonl"
    with HistoryWriter(h, streamed):
        threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = h.events()
    assert len(events) == threads_n * per_thread
    assert [e.index for e in events] == list(range(len(events)))
    assert all(a.t <= b.t for a, b in zip(events, events[1:], strict=False))
    for n in range(threads_n):
        mine = [e.get("op_id") for e in events if e.get("process") == f"p{n}"]
        assert mine == list(range(per_thread))
    assert sorted(seen_by_listener) == list(range(len(events)))
    assert load_jsonl(streamed).events() == events
    saved = load_jsonl(save_jsonl(h, tmp_path / "saved.jsonl"))
    assert saved.events() == events


def test_saving_while_threads_record_gives_a_consistent_prefix(tmp_path: Path) -> None:
    """Saves taken while 4 threads record (a bounded number of events each) are dense prefixes."""
    h = History()

    def work() -> None:
        for _ in range(3000):
            h.record("tick")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    snapshots = []
    while any(t.is_alive() for t in threads) and len(snapshots) < 5:
        snapshots.append(load_jsonl(save_jsonl(h, tmp_path / f"s{len(snapshots)}.jsonl")))
    for t in threads:
        t.join()
    snapshots.append(load_jsonl(save_jsonl(h, tmp_path / "final.jsonl")))
    for snap in snapshots:
        assert [e.index for e in snap] == list(range(len(snap)))
    assert len(snapshots[-1]) == 12000


scalars = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False)
json_values = st.recursive(
    scalars | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=10)
field_names = st.text(min_size=1, max_size=10).filter(lambda k: k not in ("index", "t", "type"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["op.ok", "conn.closed", "fault.start", "x.ü"]),
                          st.floats(0, 1e6, allow_nan=False),
                          st.dictionaries(field_names, json_values, max_size=5)), max_size=20))
def test_round_trip_of_arbitrary_json_fields(tmp_path: Path, records: list) -> None:
    h = History(meta={"m": "x"})
    for type_, t, fields in records:
        h.record(type_, t=t, **fields)
    loaded = load_jsonl(save_jsonl(h, tmp_path / "prop.jsonl"))
    assert len(loaded) == len(h)
    for a, b in zip(loaded.events(), h.events(), strict=True):
        # what is written is the event with its secrets masked (harness.redact), everything else exact
        assert (a.index, a.type, a.fields) == (b.index, b.type, redact_data(b.fields))
        assert a.t == b.t and not math.isnan(a.t)
