"""Property-based fuzzing (hypothesis) of the PostgreSQL frontend messages a logged-in client sends
into the persistent proxy (no traceback): random bytes, typed messages with random bodies, and mutated
valid messages. Property, for every input: the proxy answers or closes *that* session within a
bounded time (never hangs, never answers "internal error" XX000), logs no traceback, keeps
running, and a second, concurrent session keeps working (a query on it after every input).

Real parts: the proxy (``ThreadedPersistentProxy``, trust on both sides so that a login is cheap)
in front of a real PostgreSQL 15 (``LocalServer``). Bounded: derandomized, 320 inputs in all,
well under 20 s on 2 busy cores.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.persistproxy import ProxyConfig, ThreadedPersistentProxy
from harness.persistproxy import protocol as pq
from tests.support import rawpg
from tests.support.pgserver import LocalServer

pytestmark = pytest.mark.rule("PER-1")

USER = "apptrust"
FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Target:
    """The proxy under fuzz, its healthy concurrent session and the traceback collector."""

    proxy: ThreadedPersistentProxy
    good: psycopg.Connection[Any]
    logs: rawpg.TracebackCollector
    tried: int = 0


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    server = LocalServer("fuzz")
    try:
        server.start()
        config = ProxyConfig(user=USER, front_auth="trust", front_users={USER: ""},
                             candidates=[server.server_address], auth_timeout=5.0)
        with ThreadedPersistentProxy(config) as proxy, rawpg.TracebackCollector() as logs:
            host, port = proxy.address  # type: ignore[misc]
            with psycopg.connect(host=host, port=port, user=USER, dbname="app", autocommit=True) as good:
                good.execute("SET application_name = 'fuzz-survivor'")
                yield Target(proxy, good, logs)
    finally:
        server.stop(remove=True)


def check_one(t: Target, data: bytes) -> bytes:
    """Send ``data`` after a valid login and assert the property (module docstring)."""
    t.tried += 1
    reply = rawpg.send_and_close(t.proxy.address, USER, data)  # type: ignore[arg-type]
    assert b"XX000" not in reply, reply[:300]
    assert t.logs.records == [], t.logs.records
    row = t.good.execute("SELECT current_setting('application_name'), 1 + 1").fetchone()
    assert row == ("fuzz-survivor", 2)
    return reply


# --------------------------------------------------------------------------------------------- strategies

FRONT_TYPES = b"QPBEDCSHFXdcf"


def _m(kind: bytes, payload: bytes = b"") -> bytes:
    return pq.msg(kind, payload)


#: valid frontend messages and short conversations (the seeds that get mutated)
VALID: list[bytes] = [
    pq.query("SELECT 1"),
    pq.query("SET application_name = 'x'; SELECT current_setting('application_name')"),
    pq.query("BEGIN; SELECT 1; COMMIT"),
    _m(b"P", b"s1\0SELECT $1::int\0" + struct.pack("!hi", 1, 23))
    + _m(b"B", b"\0s1\0" + struct.pack("!hh", 0, 1) + struct.pack("!i", 1) + b"7" + struct.pack("!h", 0))
    + _m(b"D", b"P\0") + _m(b"E", b"\0" + struct.pack("!i", 0)) + pq.SYNC,
    _m(b"C", b"Ss1\0") + pq.SYNC,
    _m(b"D", b"Snone\0") + _m(b"H"),
    _m(b"F", struct.pack("!ih", 1317, 0) + struct.pack("!h", 0) + struct.pack("!h", 0)),  # FunctionCall
    pq.query("COPY (SELECT 1) TO STDOUT"),
    _m(b"d", b"1\n") + _m(b"c"),
    _m(b"f", b"client gave up\0"),
    pq.SYNC,
    pq.TERMINATE,
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid seed with 1-3 mutations: flipped byte, truncation, inserted bytes, a removed NUL, a
    rewritten length field or type byte."""
    data = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "drop_nul", "length", "type"]))
        if not data:
            data += b"Q"
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[i:]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "drop_nul" and b"\0" in data[1:]:
            nul = data.index(b"\0", 1) if draw(st.booleans()) else data.rindex(b"\0")
            del data[nul]
        elif op == "length" and len(data) >= 5:
            data[1:5] = struct.pack("!i", draw(st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(0, 64))))
        elif op == "type":
            data[0] = draw(st.sampled_from(FRONT_TYPES + b"p!\0\xff"))
    return bytes(data)


def _typed(kind: int, body: bytes, lie: int | None) -> bytes:
    length = len(body) + 4 if lie is None else lie
    return bytes([kind]) + struct.pack("!i", length) + body


#: a frontend message type with a random body (correct or wrong length field)
typed = st.builds(_typed, st.sampled_from(FRONT_TYPES), st.binary(max_size=48),
                  st.one_of(st.none(), st.integers(-8, 80)))


# --------------------------------------------------------------------------------------------- tests


@settings(FUZZ, max_examples=80)
@given(data=st.binary(min_size=1, max_size=200))
def test_random_bytes_after_login(target: Target, data: bytes) -> None:
    """Random bytes after a valid login: answered or closed, no traceback, others unaffected."""
    check_one(target, data)


@settings(FUZZ, max_examples=100)
@given(data=st.lists(typed, min_size=1, max_size=4).map(b"".join))
def test_typed_messages_with_random_bodies(target: Target, data: bytes) -> None:
    """1-4 messages of real frontend types with random bodies and (sometimes) lying lengths."""
    check_one(target, data)


@settings(FUZZ, max_examples=140)
@given(data=st.lists(st.one_of(mutated(), st.sampled_from(VALID)), min_size=1, max_size=4).map(b"".join))
def test_mutated_valid_messages(target: Target, data: bytes) -> None:
    """Sequences of valid and mutated valid messages (the shapes a buggy driver sends)."""
    check_one(target, data)


def test_fuzz_left_no_session_behind(target: Target) -> None:
    """After the fuzz runs above, every fuzz session is gone: only the healthy one is left, and
    the proxy still accepts new sessions."""
    deadline = time.monotonic() + 3
    while len(target.proxy.status()["sessions"]) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    sessions = target.proxy.status()["sessions"]
    assert len(sessions) == 1 and sessions[0]["gucs"] == 1, sessions
    s = rawpg.login(target.proxy.address, USER)  # type: ignore[arg-type]
    s.close()
    assert target.logs.records == []
