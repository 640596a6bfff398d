"""The LPQ profile's workload (RULEBOOK LPQ-1…6): host lists over a topology's client-facing
(fault-proxy) addresses, opens bounded in time, and the servers' view recorded beside the
network's.

* :func:`host_list` builds the :class:`~harness.rules.lpq.spec.HostListSpec` for nodes in a
  given order, with the engine's test login.
* :func:`record_servers` writes ``lpq.servers``: each listed host's node, ``in_recovery``,
  ``read_only`` (read directly from the server, bypassing the proxies) and whether the suite left it
  reachable - what LPQ-4 judges the choice against.
* :func:`bounded_open` opens on a thread; after ``wait`` s it undoes the scenario's faults (a driver
  stuck on a black hole is then released) and waits ``after`` s more; a driver that still has not
  returned is recorded as pending (``client.outcome``) - judged by the rules, never a harness error.
* :func:`probe_landing` asks the server, through the client's own connection, where the session
  is (``pg_is_in_recovery()``, ``inet_server_port()``, ``default_transaction_read_only``) and records
  ``lpq.landed``; with ``write=True`` it also tries one write (``CREATE TEMP TABLE``) and records
  ``lpq.write`` (ok, or the error and SQLSTATE, e.g. 25006 on a standby).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import MirroringClientError
from harness.history.core import History
from harness.rules.lpq.spec import HostListSpec

LANDING_SQL = ("SELECT pg_is_in_recovery()::text, inet_server_port()::text, "
               "current_setting('default_transaction_read_only')")


def host_list(topology: Any, nodes: Sequence[str], *, connect_timeout: float | None = 2,
              target_session_attrs: str = "any", load_balance_hosts: str = "disable",
              password: str | None = None) -> HostListSpec:
    """The host list ``nodes`` (in that order) over their fault-proxy addresses."""
    creds = topology.engine.credentials
    hosts = tuple((str(topology.node(n).client_address[0]), int(topology.node(n).client_address[1])) for n in nodes)
    return HostListSpec(hosts=hosts, dbname=creds.database, user=creds.user,
                        password=creds.password if password is None else password,
                        connect_timeout=connect_timeout, target_session_attrs=target_session_attrs,
                        load_balance_hosts=load_balance_hosts)


def _truth(value: Any) -> bool:
    return str(value).lower() in ("t", "true", "on", "1")


def record_servers(history: History, topology: Any, nodes: Sequence[str],
                   unreachable: Sequence[str] = ()) -> None:
    """Record ``lpq.servers`` for the listed ``nodes`` (the servers' own answers)."""
    hosts = []
    for n in nodes:
        node = topology.node(n)
        with node.admin() as conn:
            rec, ro = conn.execute("SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only')"
                                   ).fetchone()
        host, port = node.client_address
        hosts.append({"listen": f"{host}:{port}", "node": n, "in_recovery": bool(rec), "read_only": _truth(ro),
                      "reachable": n not in unreachable, "server_port": int(node.server_address[1])})
    history.record("lpq.servers", hosts=hosts)


@dataclass
class Outcome:
    """What one open gave the application."""

    conn: Any = None
    error: BaseException | None = None
    seconds: float = 0.0
    pending: bool = False
    not_offered: str | None = None

    @property
    def ok(self) -> bool:
        return self.conn is not None


def bounded_open(client: Any, spec: HostListSpec, history: History, *, faults: Sequence[Any] = (),
                 wait: float = 10.0, after: float = 5.0, label: str = "") -> Outcome:
    """Open ``spec`` with ``client`` while the scoped ``faults`` hold (see the module docstring)."""
    result: list[Outcome] = []
    harness_error: list[BaseException] = []

    def run() -> None:
        t0 = time.monotonic()
        try:
            result.append(Outcome(conn=client.open(spec), seconds=time.monotonic() - t0))
        except MirroringClientError as exc:  # the client's own failure: an outcome, judged by the rules
            result.append(Outcome(error=exc, seconds=time.monotonic() - t0))
        except BaseException as exc:  # noqa: BLE001 - a harness error, re-raised in the test's thread
            harness_error.append(exc)

    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        for fault in faults:
            stack.enter_context(fault)
        th = threading.Thread(target=run, name=f"lpq-open-{label}", daemon=True)
        th.start()
        th.join(wait)
    th.join(after)
    if harness_error:
        raise harness_error[0]
    out = result[0] if result else Outcome(pending=True, seconds=time.monotonic() - t0)
    error = None if out.error is None else f"{type(out.error).__name__}: {str(out.error)[:300]}"
    history.record("client.outcome", process=getattr(client, "process", None), f="open", label=label, ok=out.ok,
                   error=error, pending=out.pending, seconds=round(out.seconds, 6))
    return out


def not_offered(client: Any, spec: HostListSpec) -> str | None:
    """Why the client cannot express ``spec`` (None when it can); adapters without the method offer all."""
    method = getattr(client, "not_offered", None)
    return method(spec) if callable(method) else None


def probe_landing(conn: Any, topology: Any, history: History, client: Any, *, write: bool = False) -> dict[str, Any]:
    """Record where ``conn``'s session is (``lpq.landed``; optionally ``lpq.write``)."""
    process = getattr(client, "process", None)
    op_id = _last_open_id(history, process)
    try:
        rows = conn.execute(LANDING_SQL)
    except MirroringClientError as exc:  # the client's own error (HostListClientError)
        history.record("lpq.landed", process=process, op_id=op_id, error=str(exc)[:300])
        return {}
    in_rec, port, ro = rows[0]
    node = next((n for n in topology.nodes if int(n.server_address[1]) == int(port)), None)
    listen = None if node is None else f"{node.client_address[0]}:{node.client_address[1]}"
    landed = {"process": process, "op_id": op_id, "server_port": int(port), "node": None if node is None else node.name,
              "listen": listen, "in_recovery": _truth(in_rec), "read_only": _truth(ro)}
    history.record("lpq.landed", **landed)
    if write:
        try:
            conn.execute("CREATE TEMP TABLE lpq_probe (x int)")
            history.record("lpq.write", process=process, op_id=op_id, ok=True)
        except MirroringClientError as exc:
            history.record("lpq.write", process=process, op_id=op_id, ok=False,
                           error=f"{getattr(exc, 'sqlstate', None) or '-'} {str(exc)[:200]}",
                           sqlstate=getattr(exc, 'sqlstate', None))
    return landed


def _last_open_id(history: History, process: Any) -> Any:
    for e in reversed(history.events("op.ok")):
        if e.get("process") == process and e.get("f") == "open":
            return e.get("op_id")
    return None


__all__ = ["LANDING_SQL", "Outcome", "bounded_open", "host_list", "not_offered",
           "probe_landing", "record_servers"]
