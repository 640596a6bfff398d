"""A small builder of synthetic MIR histories (opens, fault-proxy connections, the client's own
attempts) for the mutation-kill tests of the MIR checkers (tests/test_mutation_kills_*.py)."""

from __future__ import annotations

import itertools
from typing import Any

from harness.history.core import Event, History
from harness.rules.mirroring.model import Open, build_opens

A, B = "pg-a", "pg-b"
ADDR = {A: "127.0.0.1:21001", B: "127.0.0.1:21002"}
INITIAL, FAILOVER = (A,), (B,)


class H:
    """A synthetic MIR history: opens, proxy connections (``conn.*``) and client attempts."""

    def __init__(self) -> None:
        self.h = History(meta={"monotonic_origin": 0.0, "wall_origin": 0.0})
        self.op_ids = itertools.count(1)
        self.conn_ids = itertools.count(1)

    def add(self, type_: str, t: float, **fields: Any) -> Event:
        return self.h.record(type_, t, **fields)

    def open(self, t: float, process: str = "c1") -> int:
        op_id = next(self.op_ids)
        self.add("op.invoke", t, process=process, op_id=op_id, f="open", value={"database": "d"})
        return op_id

    def end(self, t: float, op_id: int, kind: str = "ok", process: str = "c1", **fields: Any) -> Event:
        return self.add(f"op.{kind}", t, process=process, op_id=op_id, f="open", **fields)

    def conn(self, proxy: str, t0: float, t1: float | None = None, *, by: str = "client", down: int = 0,
             peer: str = "127.0.0.1:40000", upfail: bool = False, conn_id: int | None = None) -> int:
        cid = next(self.conn_ids) if conn_id is None else conn_id
        self.add("conn.accepted", t0, proxy=proxy, conn_id=cid, client=peer, listen=ADDR[proxy], node=proxy[-1])
        if upfail:
            self.add("conn.upstream_failed", t0 + 0.0001, proxy=proxy, conn_id=cid, error="refused")
        if t1 is not None:
            self.add("conn.closed", t1, proxy=proxy, conn_id=cid, by=by, bytes_up=10, bytes_down=down)
        return cid

    def attempt(self, n: int, t0: float, t1: float | None, outcome: str | None = None, *, process: str = "c1",
                target: str | None = "initial", address: str | None = "auto", local: str | None = None) -> None:
        start: dict[str, Any] = {"process": process, "attempt": n}
        if target is not None:
            start["target"] = target
        if address == "auto":
            address = ADDR[A] if target == "initial" else ADDR[B]
        if address is not None:
            start["address"] = address
        self.add("attempt.start", t0, **start)
        if t1 is not None:
            end = {**start, "outcome": outcome}
            if local is not None:
                end["local"] = local
            self.add("attempt.end", t1, **end)

    @property
    def events(self) -> list[Event]:
        return self.h.events()

    def opens(self, **kw: Any) -> list[Open]:
        return build_opens(self.events, INITIAL, FAILOVER, **kw)
