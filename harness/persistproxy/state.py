"""Per-session state the proxy tracks so that a session can be moved to a new principal (PER-1,
PER-2) or refused with the right reason (PER-4..PER-8).

Transactional state (GUCs set with SET, temporary tables, WITH HOLD cursors, LISTEN channels) is
kept in two layers: ``committed`` and a copy-on-write ``pending`` layer for the transaction in
progress, merged when the server reports the transaction ended with a commit and dropped on a
rollback. Prepared statements are not transactional in PostgreSQL and are applied at once.
"""

from __future__ import annotations

import copy
import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from . import protocol as pq
from .sqlstate import Effect, classify, split_statements

# ParameterStatus names that are not session settings (never replayed).
NOT_SETTABLE = frozenset({
    "server_version", "server_encoding", "integer_datetimes", "is_superuser", "in_hot_standby",
    "session_authorization", "scram_iterations",
})


@dataclass
class TxState:
    """The transactional part of session state."""

    gucs: dict[str, str] = field(default_factory=dict)  # GUC name -> SET statement text
    temp_tables: set[str] = field(default_factory=set)
    hold_cursors: set[str] = field(default_factory=set)
    cursors: set[str] = field(default_factory=set)  # without HOLD: live until the transaction ends
    listens: set[str] = field(default_factory=set)


class Pending:
    """One client request in flight, in protocol order; answered by the backend in the same order.

    A plain ``__slots__`` class, not a dataclass: one is made per frontend message on the data path
    (PER-1: the proxy must keep up with the application)."""

    __slots__ = ("kind", "name", "raw", "sql", "index", "creates", "_statements")

    def __init__(self, kind: str, name: str = "", raw: bytes = b"", sql: str = "") -> None:
        self.kind = kind  # 'P','B','D','E','C','S','Q','F'; the proxy's own: 'p','q' (Parse), 's' (Sync)
        self.name = name
        self.raw = raw
        self.sql = sql  # for 'Q' and 'E': the query text, split lazily
        self.index = 0  # for 'Q': next statement to be completed
        self.creates = False  # for 'E' (made by _execute_item): a ``SELECT n`` tag may mean SELECT INTO
        self._statements: list[Any] | None = None

    def __repr__(self) -> str:
        return f"Pending({self.kind!r}, name={self.name!r}, sql={self.sql[:40]!r})"

    def statement(self, i: int) -> Any | None:
        """The ``i``-th statement of ``sql`` (split on first use only)."""
        if self._statements is None:
            self._statements = split_statements(self.sql)
        return self._statements[i] if i < len(self._statements) else None


_STATUS = {73: "I", 84: "T", 69: "E"}  # ReadyForQuery's status byte

# Requests that carry nothing but their kind: shared, never changed (only 'Q' items are mutated).
_BIND = Pending("B")
_SYNC = Pending("S")
_DESCRIBE = Pending("D")
_FUNCTION_CALL = Pending("F")
_EXECUTE_UNKNOWN = Pending("E")  # an Execute of a portal whose SQL the proxy never saw

# Command tags after which the statement may have changed tracked state (others are not parsed),
# as the bytes of the CommandComplete message: the data path compares them undecoded.
_TAGS = frozenset({
    b"SET", b"RESET", b"PREPARE", b"DEALLOCATE", b"DEALLOCATE ALL", b"DECLARE CURSOR", b"CLOSE CURSOR",
    b"CLOSE CURSOR ALL", b"LISTEN", b"UNLISTEN", b"DISCARD ALL", b"DISCARD TEMP", b"CREATE TABLE",
    b"CREATE TABLE AS", b"CREATE VIEW", b"CREATE SEQUENCE", b"DROP TABLE", b"DROP VIEW", b"DROP SEQUENCE",
})


# What the server answers to one [Parse,] Bind, [Describe,] Execute, Sync: [ParseComplete,]
# BindComplete, [RowDescription or NoData,] [DataRows, one entry of .frames.frames,] CommandComplete,
# ReadyForQuery.
_SIMPLE_ANSWERS = frozenset(parse + answer for parse in (b"", b"1")
                            for answer in (b"2TDCZ", b"2TCZ", b"2nCZ", b"2DCZ", b"2CZ"))
# The requests with a one-call path: [Parse,] Bind, [Describe,] Execute, Sync.
_SIMPLE_REQUESTS = frozenset({b"BDES", b"BES", b"PBDES", b"PBES"})


@functools.lru_cache(maxsize=4096)
def _execute_item(sql: str) -> Pending:
    """The in-flight item of an Execute of ``sql``: one per statement text, shared by all its
    Executes in every session (an 'E' item is never changed; its split statements are a function of
    the text), so the data path allocates nothing per Execute, nor per Parse of a text seen before."""
    if not sql:
        return _EXECUTE_UNKNOWN
    item = Pending("E", sql=sql)
    item.creates = _maybe_creates(sql)
    return item


@functools.lru_cache(maxsize=4096)
def _execute_item_for(sql: bytes, codec: str) -> Pending:
    """:func:`_execute_item` of a Parse's SQL as its undecoded bytes (the one-call path of an
    unprepared statement decodes each text once, not at every Parse)."""
    return _execute_item(sql.decode(codec, "surrogateescape"))


def _names(message: bytes, count: int) -> list[int]:
    """The offsets of the NULs ending the first ``count`` strings of ``message``'s payload; a
    :class:`ProtocolError` when one is missing (a malformed message, never a crash)."""
    ends = []
    pos = 5
    for _ in range(count):
        pos = message.find(b"\0", pos)
        if pos < 0:
            raise pq.ProtocolError("a string field is not NUL-terminated")
        ends.append(pos)
        pos += 1
    return ends


class SessionState:
    """Everything the proxy knows about one session (PER-2 replay data, PER-5..8 blockers)."""

    def __init__(self, startup: dict[str, str]) -> None:
        self.startup = dict(startup)
        self.committed = TxState()
        self.pending_tx: TxState | None = None
        self.prepared_parse: dict[str, bytes] = {}  # protocol-level named statements: Parse message
        self.prepared_sql: dict[str, str] = {}  # SQL PREPARE name -> statement text
        self.unnamed_parse: bytes | None = None
        # statement name / portal name, as the message's bytes -> the in-flight item of its Execute
        # (holding its SQL, to classify the statement when it completes)
        self.statement_exec: dict[bytes, Pending] = {b"": _EXECUTE_UNKNOWN}
        self.portal_exec: dict[bytes, Pending] = {}
        self.reported: dict[str, str] = {}  # last ParameterStatus values
        self.codec = "utf-8"  # Python codec of the client's current client_encoding
        self.txn_status = "I"
        self.inflight: deque[Pending] = deque()
        self.unsynced = False  # extended-protocol messages sent without Sync yet
        self.copy_in_progress = False
        self.rows_started = False  # DataRow delivered for a result not yet complete (PER-6)
        self.cycle_error = False
        self.last_tag = b""  # the last CommandComplete's tag, undecoded
        self.snapshot_gucs: dict[str, str] = {}  # from pg_settings at a planned drain
        self.counters = {"statements": 0, "replays": 0}
        self.injected = False  # the proxy's own Parse/Sync (lazy re-prepare) may be in ``inflight``

    # ----------------------------------------------------------------------- views
    @property
    def tx(self) -> TxState:
        """The state as of now (including the open transaction)."""
        return self.pending_tx if self.pending_tx is not None else self.committed

    def _writable(self) -> TxState:
        if self.pending_tx is None:
            self.pending_tx = copy.deepcopy(self.committed)
        return self.pending_tx

    def is_idle(self) -> bool:
        """True when every request was answered and no transaction is open (PER-4 'idle')."""
        return not self.inflight and not self.unsynced and self.txn_status == "I"

    def blocker(self) -> tuple[str, str] | None:
        """Why this session cannot be kept right now, as ``(reason, rule)``, or None (PER-4..8)."""
        tx = self.tx
        if self.copy_in_progress:
            return "COPY in progress", "PER-8"
        if tx.cursors or tx.hold_cursors:
            return "session has an open cursor", "PER-8"
        if self.rows_started:
            return "result only partly delivered", "PER-6"
        if self.txn_status in ("T", "E"):
            return "transaction still open", "PER-7"
        if self.inflight or self.unsynced:
            return "request still running", "PER-4"
        if tx.temp_tables:
            return "session holds temporary tables", "PER-5"
        return None

    def summary(self) -> dict[str, Any]:
        """Sizes and flags for the admin ``status``."""
        tx = self.tx
        return {
            "txn_status": self.txn_status,
            "idle": self.is_idle(),
            "gucs": len(tx.gucs) + len(self.snapshot_gucs),
            "guc_names": sorted(set(tx.gucs) | set(self.snapshot_gucs)),
            "prepared": len(self.prepared_parse) + len(self.prepared_sql),
            "temp_tables": len(tx.temp_tables),
            "cursors": len(tx.cursors) + len(tx.hold_cursors),
            "listens": len(tx.listens),
            "copy_in_progress": self.copy_in_progress,
            "partial_result": self.rows_started,
            "inflight": len(self.inflight),
            "statements": self.counters["statements"],
            "replays": self.counters["replays"],
        }

    # ----------------------------------------------------------------------- front messages
    def on_front(self, kind: bytes, message: bytes) -> None:
        """Record a client message that is being forwarded to the back connection (``kind`` is its
        first byte; the type is read from ``message`` itself)."""
        t = message[0]
        inflight = self.inflight
        if t == 66:  # 'B' Bind: portal -> the statement's Execute item
            portal_end = message.find(b"\0", 5)
            stmt_end = message.find(b"\0", portal_end + 1)
            if portal_end < 0 or stmt_end < 0:
                raise pq.ProtocolError("a string field is not NUL-terminated")
            self.portal_exec[message[5:portal_end]] = self.statement_exec.get(
                message[portal_end + 1:stmt_end], _EXECUTE_UNKNOWN)
            inflight.append(_BIND)
            self.unsynced = True
        elif t == 69:  # 'E' Execute
            portal_end = message.find(b"\0", 5)
            if portal_end < 0:
                raise pq.ProtocolError("a string field is not NUL-terminated")
            inflight.append(self.portal_exec.get(message[5:portal_end], _EXECUTE_UNKNOWN))
            self.counters["statements"] += 1
            self.unsynced = True
        elif t == 83:  # 'S' Sync
            inflight.append(_SYNC)
            self.unsynced = False
        elif t == 80:  # 'P' Parse
            name, sql = pq.parse_parse(message, self.codec)
            inflight.append(Pending("P", name=name, raw=message))
            self.statement_exec[message[5:_names(message, 1)[0]]] = _execute_item(sql)
            self.unsynced = True
        elif t == 81:  # 'Q' Query
            sql = pq.read_cstr(message, 5, self.codec)[0]
            inflight.append(Pending("Q", sql=sql))
            self.counters["statements"] += 1
            self.unnamed_parse = None
            self.statement_exec[b""] = _EXECUTE_UNKNOWN
        elif t == 68:  # 'D' Describe
            inflight.append(_DESCRIBE)
            self.unsynced = True
        elif t == 67:  # 'C' Close
            what, name = pq.parse_close_or_describe(message)
            inflight.append(Pending("C", name=what + name))
            self.unsynced = True
        elif t == 70:  # 'F' FunctionCall
            inflight.append(_FUNCTION_CALL)

    def on_simple_request(self, buf: bytes, kinds: bytes, ends: list[int]) -> bool:
        """The commonest request in one call: [Parse,] Bind, [Describe,] Execute and Sync of one
        statement, whole in ``buf`` (what sysbench, psycopg and pgjdbc send per statement: without
        the Parse once it is prepared, with it when it is not). Records exactly what :meth:`on_front`
        of each message would; returns False, having recorded nothing, for any other ``kinds`` (from
        :func:`.frames.frames`) or a malformed string field."""
        if kinds not in _SIMPLE_REQUESTS:
            return False
        parsed = kinds[0] == 80  # 'P'
        bind_at = ends[0] if parsed else 0
        bind_end = ends[1] if parsed else ends[0]
        execute_at, execute_end = ends[-3], ends[-2]
        portal_end = buf.find(b"\0", bind_at + 5, bind_end)
        stmt_end = buf.find(b"\0", portal_end + 1, bind_end)
        run_end = buf.find(b"\0", execute_at + 5, execute_end)
        if portal_end < 0 or stmt_end < 0 or run_end < 0:
            return False  # on_front names the malformed message
        inflight = self.inflight
        if parsed:
            parse_end = ends[0]
            name_end = buf.find(b"\0", 5, parse_end)
            sql_end = buf.find(b"\0", name_end + 1, parse_end)
            if name_end < 0 or sql_end < 0:
                return False
            codec = self.codec
            raw = buf[:parse_end]
            inflight.append(Pending("P", name=buf[5:name_end].decode(codec, "surrogateescape"), raw=raw))
            self.statement_exec[buf[5:name_end]] = _execute_item_for(buf[name_end + 1:sql_end], codec)
        portal_exec = self.portal_exec
        portal_exec[buf[bind_at + 5:portal_end]] = self.statement_exec.get(buf[portal_end + 1:stmt_end],
                                                                           _EXECUTE_UNKNOWN)
        inflight.append(_BIND)
        if kinds[-3] == 68:  # 'D' Describe
            inflight.append(_DESCRIBE)
        inflight.append(portal_exec.get(buf[execute_at + 5:run_end], _EXECUTE_UNKNOWN))
        inflight.append(_SYNC)
        self.counters["statements"] += 1
        self.unsynced = False
        return True

    # ----------------------------------------------------------------------- back messages
    def _pop(self, kinds: str) -> Pending | None:
        while self.inflight:
            item = self.inflight.popleft()
            if item.kind in kinds:
                return item
        return None

    def on_back(self, kind: bytes, message: bytes) -> None:
        """Record a server message that is being forwarded to the client."""
        t = message[0]
        if t == 68:  # 'D' DataRow
            self.rows_started = True
            return
        if t == 50:  # '2' BindComplete
            self.on_bind_complete()
            return
        if t == 90:  # 'Z' ReadyForQuery
            self.on_ready(message[5] if len(message) > 5 else 73)
            return
        k = kind
        if t == 67:  # 'C' CommandComplete
            self.on_command_complete(message[5:_names(message, 1)[0]])
            return
        if k in (b"T", b"n"):
            self.on_description()
            return
        if k in (b"I", b"s"):
            self.rows_started = False
            if k == b"I" and self.inflight and self.inflight[0].kind == "Q":
                return
            self._pop("E")
            return
        if k == b"1":
            item = self._pop("P")
            if item is not None:
                if item.name:
                    self.prepared_parse[item.name] = item.raw
                else:
                    self.unnamed_parse = item.raw
            return
        if k == b"3":
            item = self._pop("C")
            if item is not None and item.name.startswith("S"):
                self.prepared_parse.pop(item.name[1:], None)
                self.prepared_sql.pop(item.name[1:], None)
            return
        if k in (b"G", b"H", b"W"):
            self.copy_in_progress = True
            return
        if k == b"E":
            self.cycle_error = True
            self.rows_started = False
            self.copy_in_progress = False
            # extended protocol: the server skips everything up to Sync
            if self.inflight and self.inflight[0].kind != "Q":
                while self.inflight and self.inflight[0].kind not in "SQF":
                    self.inflight.popleft()
            return
        if k == b"S":
            name, value = pq.parse_parameter_status(message, self.codec)
            self.reported[name] = value
            if name == "client_encoding":
                self.codec = pq.python_codec(value)
            return

    def on_simple_answer(self, data: bytes, kinds: bytes, ends: list[int]) -> bool:
        """The answer to :meth:`on_simple_request`'s request in one call: [ParseComplete,]
        BindComplete, [RowDescription or NoData,] DataRows, CommandComplete and ReadyForQuery, whole
        in ``data``, while exactly that request is in flight. Records exactly what :meth:`on_back` of
        each message would; returns False, having recorded nothing, for anything else (other
        ``kinds``, other requests in flight, the proxy's own Parse in flight, a tag whose statement
        may change tracked state)."""
        inflight = self.inflight
        if kinds not in _SIMPLE_ANSWERS or not inflight or self.injected or inflight[-1] is not _SYNC \
                or ends[-1] - ends[-2] != 6:
            return False
        parsed = kinds[0] == 49  # '1' ParseComplete
        first = 1 if parsed else 0  # where the Bind's items start in ``inflight``
        described = kinds[first + 1] == 84 or kinds[first + 1] == 110  # 'T' / 'n'
        if len(inflight) != first + 3 + described or (described and inflight[first + 1] is not _DESCRIBE):
            return False
        item = inflight[-2]
        if inflight[first] is not _BIND or item.kind != "E" or (parsed and inflight[0].kind != "P"):
            return False
        complete_at = ends[-3]
        tag_end = data.find(b"\0", complete_at + 5, ends[-2])
        if tag_end < 0:
            return False
        tag = data[complete_at + 5:tag_end]
        if item.sql and (tag in _TAGS or (tag.startswith(b"SELECT ") and item.creates)):
            return False  # on_command_complete applies the statement
        if parsed:
            parse = inflight[0]
            if parse.name:
                self.prepared_parse[parse.name] = parse.raw
            else:
                self.unnamed_parse = parse.raw
        inflight.clear()
        self.rows_started = False
        self.copy_in_progress = False
        self.last_tag = tag
        status = data[ends[-1] - 1]
        self._end_cycle(_STATUS.get(status) or chr(status))
        return True

    def on_command_complete(self, tag: bytes) -> None:
        """A CommandComplete ('C') with ``tag`` (its bytes, the NUL cut off): the statement it ends
        may have changed tracked state (SET, PREPARE, CREATE TEMP ..., PER-2 / PER-5)."""
        self.rows_started = False
        self.copy_in_progress = False
        self.last_tag = tag
        inflight = self.inflight
        head = inflight[0] if inflight else None
        if head is None:
            return
        kind = head.kind
        if kind == "Q":
            item, index = head, head.index
            head.index += 1
        elif kind == "E":  # the common case, without _pop's loop
            item, index = inflight.popleft(), 0
        else:
            item, index = self._pop("E"), 0
        if item is None or not item.sql:
            return
        if tag in _TAGS or (tag.startswith(b"SELECT ") and _maybe_creates(item.sql)):
            stmt = item.statement(index)
            if stmt is not None:
                self._apply_statement(stmt)

    def on_description(self) -> None:
        """A RowDescription ('T') or NoData ('n'): the answer to a Describe, if one is first."""
        inflight = self.inflight
        if inflight and inflight[0].kind == "D":
            inflight.popleft()

    def on_injected_parse(self, raw: bytes, quiet: bool) -> None:
        """Record a Parse the proxy sends itself (lazy re-prepare of a statement the client prepared
        before a switchover, PER-2): its ParseComplete is the proxy's, not the client's. ``quiet``:
        an error answering it is the proxy's too (a Sync of its own follows, :meth:`on_injected_sync`)."""
        name, sql = pq.parse_parse(raw, self.codec)
        self.statement_exec[raw[5:_names(raw, 1)[0]]] = _execute_item(sql)
        self.inflight.append(Pending("q" if quiet else "p", name=name, raw=raw))
        self.injected = True

    def on_injected_sync(self) -> None:
        """Record a Sync the proxy sends itself after quiet Parses: its ReadyForQuery is the proxy's."""
        self.inflight.append(Pending("s"))

    def on_injected_answer(self, t: int) -> bool:
        """Whether the server message of type byte ``t`` answers the proxy's own Parse or Sync (then
        it is recorded here and not relayed): ParseComplete of an injected Parse, an error of a quiet
        one (the server then skips to the proxy's Sync) and that Sync's ReadyForQuery. An error of an
        injected Parse that is not quiet is the client's answer (its own messages are skipped)."""
        inflight = self.inflight
        if not inflight:
            return False
        head = inflight[0]
        kind = head.kind
        if t == 49 and kind in ("p", "q"):  # ParseComplete
            inflight.popleft()
            self.prepared_parse[head.name] = head.raw
            return True
        if t == 69 and kind == "q":  # ErrorResponse: the statement stays unprepared; its use will say so
            while inflight and inflight[0].kind != "s":
                inflight.popleft()
            return True
        if t == 90 and kind == "s":  # ReadyForQuery
            inflight.popleft()
            self.injected = any(i.kind in ("p", "q", "s") for i in inflight)
            return True
        return False

    def on_bind_complete(self) -> None:
        """A BindComplete ('2') from the server (the data path calls this without the message)."""
        inflight = self.inflight
        while inflight:
            if inflight.popleft().kind == "B":
                return

    def on_ready(self, status: int) -> None:
        """A ReadyForQuery ('Z') with transaction ``status`` (the byte: I, T or E)."""
        self.rows_started = False
        self.copy_in_progress = False
        inflight = self.inflight
        if inflight and inflight[0].kind == "S":  # the common case, without _pop's loop
            inflight.popleft()
        else:
            self._pop("SQF")
        if self.injected:
            self.injected = any(i.kind in ("p", "q", "s") for i in self.inflight)
        self._end_cycle(_STATUS.get(status) or chr(status))

    def _end_cycle(self, status: str) -> None:
        """A ReadyForQuery: at 'I' the transaction (explicit or implicit) ended; it committed unless
        the last command was a ROLLBACK or, for an implicit one, an error occurred in this cycle.
        In an explicit transaction ('T'/'E') the outcome is decided by its final COMMIT/ROLLBACK."""
        if status == "I":
            if self.pending_tx is not None:
                if not self.cycle_error and self.last_tag != b"ROLLBACK":
                    self.committed = self.pending_tx
                self.pending_tx = None
            self.committed.cursors.clear()
        self.cycle_error = False
        self.last_tag = b""
        self.txn_status = status

    # ----------------------------------------------------------------------- effects
    def _apply_statement(self, stmt: Any) -> None:
        for effect in classify(stmt):
            self.apply(effect)

    def apply(self, e: Effect) -> None:
        """Apply one confirmed effect (see :class:`.sqlstate.Effect`)."""
        if e.kind == "prepare" and e.key:
            self.prepared_sql[e.key.lower()] = e.text
            return
        if e.kind == "deallocate":
            if e.key is None:
                self.prepared_sql.clear()
                self.prepared_parse.clear()
            else:
                self.prepared_sql.pop(e.key.lower(), None)
                self.prepared_parse.pop(e.key, None)
            return
        tx = self._writable()
        if e.kind == "set" and e.key:
            tx.gucs.pop(e.key, None)
            tx.gucs[e.key] = e.text
            self.snapshot_gucs.pop(e.key, None)
        elif e.kind == "reset" and e.key:
            tx.gucs.pop(e.key, None)
            self.snapshot_gucs.pop(e.key, None)
        elif e.kind == "reset_all":
            for key in list(tx.gucs):
                if key not in ("role", "session_authorization"):
                    del tx.gucs[key]
            self.snapshot_gucs.clear()
        elif e.kind == "temp_create" and e.key:
            tx.temp_tables.add(e.key)
        elif e.kind == "temp_drop":
            for name in e.names:
                tx.temp_tables.discard(name)
        elif e.kind == "declare" and e.key:
            (tx.hold_cursors if e.hold else tx.cursors).add(e.key)
        elif e.kind == "close":
            if e.key is None:
                tx.cursors.clear()
                tx.hold_cursors.clear()
            else:
                tx.cursors.discard(e.key)
                tx.hold_cursors.discard(e.key)
        elif e.kind == "listen" and e.key:
            tx.listens.add(e.key)
        elif e.kind == "unlisten":
            if e.key is None:
                tx.listens.clear()
            else:
                tx.listens.discard(e.key)
        elif e.kind == "discard":
            if e.key in ("temp", "all"):
                tx.temp_tables.clear()
            if e.key == "all":
                tx.gucs.clear()
                tx.cursors.clear()
                tx.hold_cursors.clear()
                tx.listens.clear()
                self.prepared_sql.clear()
                self.prepared_parse.clear()
                self.snapshot_gucs.clear()

    # ----------------------------------------------------------------------- replay
    def replay_sql(self) -> list[str]:
        """The SQL statements that rebuild this session's settings on a new back connection (PER-2)."""
        gucs = self.committed.gucs
        ordered = [k for k in ("session_authorization", "role") if k in gucs]
        ordered += [k for k in gucs if k not in ("session_authorization", "role", "client_encoding")]
        # texts are sent as UTF-8; the client's encoding is restored afterwards from ParameterStatus
        out: list[str] = ["SET client_encoding TO 'UTF8'"]
        for key in ordered:
            if gucs[key] not in out:
                out.append(gucs[key])
        for name, value in self.snapshot_gucs.items():
            out.append(f"SELECT pg_catalog.set_config({quote_literal(name)}, {quote_literal(value)}, false)")
        out.extend(f"LISTEN {quote_ident(ch)}" for ch in sorted(self.committed.listens))
        out.extend(self.prepared_sql.values())
        return out

    def replay_parse(self) -> list[bytes]:
        """The Parse messages that rebuild protocol-level prepared statements (PER-2)."""
        # the unnamed statement is not replayed: clients re-Parse it in the same batch they use it
        return list(self.prepared_parse.values())


@functools.lru_cache(maxsize=4096)
def _maybe_creates(sql: str) -> bool:
    """SELECT INTO and CREATE TABLE AS answer with a ``SELECT n`` tag: parse only those."""
    low = sql.lower()
    return "into" in low or "create" in low


def quote_literal(value: str) -> str:
    """A SQL string literal (standard_conforming_strings on)."""
    return "'" + value.replace("'", "''") + "'"


def quote_ident(value: str) -> str:
    """A SQL identifier, always quoted."""
    return '"' + value.replace('"', '""') + '"'
