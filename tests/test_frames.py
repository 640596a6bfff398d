"""The persistent proxy's framing walk (harness/persistproxy/frames.py, PER-1 data path): the compiled
walk and its Python twin give the same answer on any bytes, and that answer is right."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.persistproxy import frames as fr
from harness.persistproxy import protocol as pq


def _messages(kinds: bytes, size: int = 3) -> bytes:
    return b"".join(pq.msg(bytes([k]), bytes(size)) for k in kinds)


def test_the_compiled_walk_is_the_one_in_use() -> None:
    """`make setup` builds the extension (gcc is part of the set-up): the proxy must not run the
    interpreted walk by accident, or its throughput figures would be of another program."""
    assert fr.COMPILED, "harness.persistproxy._frames is not built: run `make setup` (needs gcc)"
    from harness.persistproxy import _frames
    assert fr.frames is _frames.frames


def test_a_run_of_data_rows_is_one_entry_and_other_types_are_not_merged() -> None:
    data = _messages(b"2TDDDCZ")
    kinds, ends = fr.frames(data, fr.DATA_ROW)
    assert kinds == b"2TDCZ"
    assert ends == [8, 16, 40, 48, 56]
    kinds, ends = fr.frames(data, fr.NO_RUNS)
    assert kinds == b"2TDDDCZ"
    assert ends == [8, 16, 24, 32, 40, 48, 56]


def test_the_walk_stops_before_an_incomplete_message_and_before_a_bad_length() -> None:
    whole = _messages(b"BE")
    assert fr.frames(whole + b"S\0\0\0\x08ab", fr.NO_RUNS) == (b"BE", [8, 16])  # 2 of 4 payload bytes
    assert fr.frames(whole + b"S\0\0", fr.NO_RUNS) == (b"BE", [8, 16])  # not even a header
    assert fr.frames(whole + b"S\0\0\0\x03" + whole, fr.NO_RUNS) == (b"BE", [8, 16])  # length 3 < 4
    assert fr.frames(whole + b"S\xff\xff\xff\xff", fr.NO_RUNS) == (b"BE", [8, 16])  # negative
    assert fr.frames(b"", fr.DATA_ROW) == (b"", [])


def test_many_entries_grow_past_the_first_buffer() -> None:
    kinds = bytes(b"BDES" * 50)
    got_kinds, ends = fr.frames(_messages(kinds, 0), fr.NO_RUNS)
    assert got_kinds == kinds
    assert ends == [5 * (i + 1) for i in range(200)]


def test_any_buffer_type_is_accepted() -> None:
    data = _messages(b"DDC")
    for view in (data, bytearray(data), memoryview(data)):
        assert fr.frames(view, fr.DATA_ROW) == (b"DC", [16, 24])


_message = st.tuples(st.sampled_from(b"DCZ2TnBESPQd"), st.binary(max_size=12)).map(
    lambda km: pq.msg(bytes([km[0]]), km[1]))
_tail = st.one_of(st.just(b""), st.binary(max_size=9),
                  st.integers(-5, 40).map(lambda n: b"D" + struct.pack("!i", n)))


@settings(max_examples=400, deadline=None)
@given(st.lists(_message, max_size=30), _tail, st.sampled_from([fr.DATA_ROW, fr.NO_RUNS, ord("C")]))
def test_compiled_and_python_walks_agree_and_are_right(messages: list[bytes], tail: bytes, run: int) -> None:
    data = b"".join(messages) + tail
    kinds, ends = fr.frames_py(data, run)
    assert fr.frames(data, run) == (kinds, ends)
    # right: the entries cover whole messages from the start, runs merged, and the walk stopped where
    # the next header is short, invalid or its message incomplete
    expected_kinds = bytearray()
    expected_ends: list[int] = []
    pos = 0
    for m in messages:
        pos += len(m)
        if m[0] == run and expected_kinds and expected_kinds[-1] == run:
            expected_ends[-1] = pos
        else:
            expected_kinds.append(m[0])
            expected_ends.append(pos)
    # a tail may itself hold complete messages: only check that the walk covered every given one
    # and that what it reports past them is consistent with the tail's own framing
    assert kinds[:len(expected_kinds) - 1] == bytes(expected_kinds[:-1])
    assert ends[:len(expected_ends) - 1] == expected_ends[:-1]
    if not tail:
        assert (kinds, ends) == (bytes(expected_kinds), expected_ends)
    assert not ends or ends[-1] <= len(data)
