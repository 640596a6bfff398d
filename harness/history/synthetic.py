"""Synthetic histories shaped like real runs, for checker tests, timeline checks and the docs.

They follow docs/events.md exactly; times are relative to ``t0`` (default 1000.0 s on the monotonic
clock). Nothing here touches a database or a network.
"""

from __future__ import annotations

import random

from harness.history.core import History


def mirroring_retry_history(login_timeout: float = 15.0, t0: float = 1000.0) -> History:
    """One client session opening a connection for a whole login timeout (MIR-4/5/7 shape).

    The initial partner ``A`` is first disabled at its proxy (fast refusals, no ``conn.*``), then
    black-holed (attempts time out at their retry time); the failover partner ``B`` is an inactive
    mirror (the proxy sees a short connection closed by the server) until it is promoted, after which
    the next attempt to ``B`` opens. About 20 attempts in 15 s, with retry delays after fast rounds."""
    h = History(meta={"test": "synthetic::mirroring_retry", "client": "reference-mirroring",
                      "rule_params": {"MIR-5": {"login_timeout": login_timeout}},
                      "monotonic_origin": t0, "wall_origin": 1_790_000_000.0})
    addr = {"A": "127.0.0.1:6001", "B": "127.0.0.1:6002"}
    h.record("node.start", t0, node="A", role="principal", seconds=0.2)
    h.record("node.start", t0 + 0.004, node="B", role="mirror", seconds=0.3)
    disable_end, slow_end, reset_end, promote_at = t0 + 2.5, t0 + 6.0, t0 + 9.0, t0 + 11.2
    h.record("fault.start", t0 + 0.05, fault="disable", id="f1", node="A", params={"proxy": "A"})
    h.record("fault.end", disable_end, fault="disable", id="f1", node="A", seconds=2.45, error=None)
    h.record("fault.start", disable_end + 0.001, fault="timeout", id="f2", node="A",
             params={"proxy": "A", "toxic": "timeout", "timeout": 2000})
    h.record("fault.end", slow_end, fault="timeout", id="f2", node="A", seconds=3.5, error=None)
    h.record("fault.start", slow_end + 0.001, fault="reset", id="f3", node="A",
             params={"proxy": "A", "toxic": "reset_peer", "timeout": 5})
    h.record("fault.end", reset_end, fault="reset", id="f3", node="A", seconds=3.0, error=None)
    h.record("fault.start", reset_end + 0.5, fault="mark-state", id="f4", node="A",
             params={"state": "failover in progress"})
    h.record("node.stop", promote_at - 0.3, node="A", mode="fast", seconds=0.1)
    h.record("role.change", promote_at, node="B", old_role="mirror", new_role="principal")
    h.record("role.change", promote_at + 0.05, node="A", old_role="principal", new_role="mirror")
    h.record("node.start", promote_at + 0.3, node="A", role="mirror", seconds=0.3)
    h.record("fault.end", promote_at + 0.35, fault="mark-state", id="f4", node="A", seconds=2.05, error=None)
    t = t0 + 0.1
    deadline = t + login_timeout
    conn_id = 0
    attempt = 0
    h.record("op.invoke", t, process="c1", op_id=1, f="open", value=None)
    delays = [0.1, 0.2, 0.4, 0.8]
    rnd = 0
    opened = False

    def accepted(name: str, at: float, port: int) -> int:
        nonlocal conn_id
        conn_id += 1
        h.record("conn.accepted", at + 0.0003, proxy=name, conn_id=conn_id, client=f"127.0.0.1:{port}",
                 listen=addr[name], upstream=f"127.0.0.1:{7000 + int(addr[name][-1])}", node=name)
        return conn_id

    while t < deadline and not opened:
        rnd += 1
        fast_round = True
        for target, name in (("initial", "A"), ("failover", "B")):
            attempt += 1
            retry = min(rnd * 0.08 * login_timeout, deadline - t)
            h.record("attempt.start", t, process="c1", attempt=attempt, target=target, address=addr[name],
                     retry_time=round(retry, 3))
            port = 50000 + attempt
            if name == "A" and t < disable_end:
                end, outcome, err = t + 0.0012, "refused", "connection refused"
            elif name == "A" and t < slow_end:
                cid = accepted("A", t, port)
                end, outcome, err = t + min(2.0, retry), "timeout", "timeout toxic closed the connection"
                h.record("conn.closed", end, proxy="A", conn_id=cid, by="toxic", reason="timeout toxic",
                         bytes_up=180, bytes_down=0)
                fast_round = False
            elif name == "A" and t < reset_end:
                cid = accepted("A", t, port)
                end, outcome, err = t + 0.0055, "reset", "connection reset by peer"
                h.record("conn.closed", end, proxy="A", conn_id=cid, by="toxic", reason="reset_peer",
                         bytes_up=180, bytes_down=0)
            elif name == "A":
                cid = accepted("A", t, port)
                end, outcome, err = t + 0.006, "inactive", "failover in progress"
                h.record("conn.closed", end, proxy="A", conn_id=cid, by="upstream", reason="EOF",
                         bytes_up=180, bytes_down=96)
            else:
                cid = accepted("B", t, port)
                if t < promote_at:
                    end, outcome = t + 0.007, "inactive"
                    err = "the database system is not accepting connections"
                    h.record("conn.closed", end, proxy="B", conn_id=cid, by="upstream", reason="EOF",
                             bytes_up=180, bytes_down=120)
                else:
                    end, outcome, err = t + 0.012, "opened", None
                    h.record("conn.upstream_connected", t + 0.0008, proxy="B", conn_id=cid,
                             upstream="127.0.0.1:7002")
                    opened = True
            h.record("attempt.end", end, process="c1", attempt=attempt, target=target, address=addr[name],
                     outcome=outcome, error=err)
            t = end + 0.0005
            if opened or t >= deadline:
                break
        if not opened and fast_round and t < deadline:
            delay = delays[rnd - 1] if rnd <= len(delays) else 1.0
            h.record("attempt.delay", t, process="c1", seconds=delay)
            t += delay
    if opened:
        h.record("op.ok", t, process="c1", op_id=1, f="open", value="B")
        for i in range(2, 30):
            h.record("op.invoke", t, process="c1", op_id=i, f="query", value="select 1")
            t += 0.05
            h.record("op.ok", t, process="c1", op_id=i, f="query", value=1)
        h.record("conn.closed", t + 0.01, proxy="B", conn_id=conn_id, by="client", reason="client closed",
                 bytes_up=2400, bytes_down=3100)
        h.record("op.ok", t + 0.01, process="c1", op_id=99, f="close", value=None)
    else:
        h.record("op.fail", t, process="c1", op_id=1, f="open", error="login timeout expired")
    return h


def switchover_sessions_history(sessions: int = 20, duration: float = 10.0, switch_at: float = 4.0,
                                t0: float = 2000.0, seed: int = 7) -> History:
    """``sessions`` concurrent client sessions doing point selects through per-node proxies while a
    planned switchover moves the primary from ``pg1`` to ``pg2`` (PER-1 / MIR-11 shape).

    Each session's connection to ``pg1`` is closed by the server when ``pg1`` stops; its in-flight
    query ends ``info`` (indeterminate), the next ones ``fail`` until it reconnects: first attempts to
    ``pg1`` are refused, then one to ``pg2`` opens and queries resume."""
    rng = random.Random(seed)
    h = History(meta={"test": "synthetic::switchover_sessions", "client": "psycopg", "backend": "local",
                      "engine": "postgres 15", "monotonic_origin": t0, "wall_origin": 1_790_000_000.0})
    addr = {"pg1": "127.0.0.1:6101", "pg2": "127.0.0.1:6102"}
    stop_at = t0 + switch_at + 0.05
    promote_at = stop_at + 0.21
    rejoin_at = promote_at + 0.4
    events: list[tuple[str, float, dict]] = [
        ("node.start", t0, {"node": "pg1", "role": "primary", "seconds": 0.2}),
        ("node.start", t0 + 0.01, {"node": "pg2", "role": "standby", "seconds": 0.35}),
        ("fault.start", t0 + switch_at, {"fault": "switchover", "id": "sw1", "node": "pg1",
                                          "params": {"to": "pg2"}}),
        ("node.stop", stop_at, {"node": "pg1", "mode": "fast", "seconds": 0.05}),
        ("role.change", promote_at, {"node": "pg2", "old_role": "standby", "new_role": "primary"}),
        ("node.start", rejoin_at, {"node": "pg1", "role": "standby", "seconds": 0.2}),
        ("role.change", rejoin_at + 0.001, {"node": "pg1", "old_role": "primary", "new_role": "standby"}),
        ("fault.end", rejoin_at + 0.05, {"fault": "switchover", "id": "sw1", "node": "pg1",
                                         "seconds": rejoin_at + 0.05 - t0 - switch_at, "error": None}),
    ]
    conn_ids = {"pg1": 0, "pg2": 0}

    def conn(node: str, start: float, port: int) -> int:
        conn_ids[node] += 1
        events.append(("conn.accepted", start, {"proxy": node, "conn_id": conn_ids[node],
                                                "client": f"127.0.0.1:{port}", "listen": addr[node],
                                                "upstream": f"127.0.0.1:{int(addr[node][-4:]) + 1000}",
                                                "node": node}))
        return conn_ids[node]

    for s in range(1, sessions + 1):
        proc = f"s{s:02d}"
        op = 0
        t = t0 + 0.3 + s * 0.01

        def attempt(n: int, node: str, start: float, outcome: str, end: float, proc: str = proc) -> None:
            target = "initial" if node == "pg1" else "failover"
            events.append(("attempt.start", start, {"process": proc, "attempt": n, "target": target,
                                                    "address": addr[node], "retry_time": None}))
            events.append(("attempt.end", end, {"process": proc, "attempt": n, "target": target,
                                                "address": addr[node], "outcome": outcome,
                                                "error": None if outcome == "opened" else "refused"}))

        op += 1
        events.append(("op.invoke", t, {"process": proc, "op_id": op, "f": "open", "value": None}))
        cid = conn("pg1", t + 0.0002, 40000 + s)
        attempt(1, "pg1", t, "opened", t + 0.004)
        events.append(("conn.upstream_connected", t + 0.0006, {"proxy": "pg1", "conn_id": cid,
                                                                "upstream": "127.0.0.1:7101"}))
        t += 0.004
        events.append(("op.ok", t, {"process": proc, "op_id": op, "f": "open", "value": "pg1"}))
        broken = False
        while t < t0 + duration:
            op += 1
            t += rng.uniform(0.02, 0.08)
            latency = rng.uniform(0.001, 0.004)
            events.append(("op.invoke", t, {"process": proc, "op_id": op, "f": "query", "value": "select"}))
            if not broken and t + latency >= stop_at:
                broken = True
                events.append(("conn.closed", stop_at + 0.002, {
                    "proxy": "pg1", "conn_id": cid, "by": "upstream",
                    "reason": "terminating connection due to administrator command",
                    "bytes_up": 9000, "bytes_down": 21000}))
                kind = "op.info" if t < stop_at else "op.fail"
                t = max(t, stop_at) + 0.003
                events.append((kind, t, {"process": proc, "op_id": op, "f": "query",
                                         "error": "server closed the connection unexpectedly"}))
                # reconnect: pg1 refuses until pg2 is primary, then pg2 opens
                n = 1
                while t < promote_at:
                    n += 1
                    start = t + 0.02
                    c = conn("pg1", start + 0.0002, 41000 + s * 10 + n)
                    events.append(("conn.upstream_failed", start + 0.0005, {
                        "proxy": "pg1", "conn_id": c, "upstream": "127.0.0.1:7101", "error": "refused"}))
                    events.append(("conn.closed", start + 0.0008, {
                        "proxy": "pg1", "conn_id": c, "by": "proxy", "reason": "upstream refused",
                        "bytes_up": 0, "bytes_down": 0}))
                    attempt(n, "pg1", start, "refused", start + 0.001)
                    start2 = start + 0.0015
                    c2 = conn("pg2", start2 + 0.0002, 42000 + s * 10 + n)
                    end2 = start2 + 0.006
                    ok = start2 >= promote_at
                    attempt(n + 100, "pg2", start2, "opened" if ok else "inactive", end2)
                    if not ok:
                        events.append(("conn.closed", end2, {"proxy": "pg2", "conn_id": c2, "by": "upstream",
                                                             "reason": "EOF", "bytes_up": 90,
                                                             "bytes_down": 80}))
                    t = end2 + rng.uniform(0.03, 0.06)
                    if ok:
                        break
                else:
                    start2 = t
                    conn("pg2", start2 + 0.0002, 43000 + s)
                    attempt(n + 200, "pg2", start2, "opened", start2 + 0.005)
                    t = start2 + 0.005
                continue
            t += latency
            events.append(("op.ok", t, {"process": proc, "op_id": op, "f": "query", "value": 1}))
    events.sort(key=lambda e: e[1])
    h.extend((kind, t, fields) for kind, t, fields in events)
    return h
