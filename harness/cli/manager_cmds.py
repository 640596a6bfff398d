"""The command plumbing every HA-manager topology shares (Patroni, pg_auto_failover; RULEBOOK HAM,
docs/ha-managers.md): ``up``'s checks and foreground loop, ``status``, ``fault``'s argument checks
and result line, and ``down``. A manager's own commands module (``patroni_cmds``, ``pgaf_cmds``)
says only its faults, its settings line and its one-line refusals."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from harness.errors import ConfigError, UnknownNodeError

#: Prints a cluster's ``describe()`` (JSON with ``--json``, else the manager's human lines).
Printer = Callable[[dict[str, Any], bool], None]


class Cluster(Protocol):
    """What the shared commands use of a manager cluster (:mod:`harness.topology.manager_cluster`)."""

    path: Any

    def up(self) -> Any: ...
    def down(self) -> None: ...
    def describe(self) -> dict[str, Any]: ...
    def refresh_roles(self) -> None: ...
    def node_state(self, name: str) -> Any: ...


def say(enabled: bool) -> Callable[[str], None]:
    """Progress lines on stderr (``up`` without ``--json --detach``)."""
    def say_(msg: str) -> None:
        if enabled:
            print(f"[failover-harness] {msg}", file=sys.stderr, flush=True)
    return say_


def check_up_args(args: argparse.Namespace, proxy_why: str) -> None:
    """``up`` of a manager topology runs PostgreSQL behind the fault proxy: a one-line ConfigError for
    ``--engine`` other than postgres or ``--no-proxy`` (``proxy_why`` says which links are proxies)."""
    if args.engine not in (None, "postgres"):
        raise ConfigError(f"topology {args.topology!r} runs PostgreSQL; drop --engine")
    if not args.proxy:
        raise ConfigError(f"topology {args.topology!r} needs the fault proxy ({proxy_why}); drop --no-proxy")


def run_up(cluster: Cluster, args: argparse.Namespace, show: Printer) -> int:
    """Start ``cluster``; with ``--detach`` print it and return (the run outlives the command), else
    print it and keep it up until Ctrl-C, then stop every process of it."""
    cluster.up()
    if args.detach:
        show(cluster.describe(), args.json)
        return 0
    try:
        show(cluster.describe(), args.json)
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.down()
    return 0


def print_json(desc: dict[str, Any]) -> None:
    """``--json``: the cluster's description as one JSON line."""
    print(json.dumps(desc), flush=True)


class NoHistory:
    """A history that records nothing (``status`` only reads the run)."""

    def record(self, *a: Any, **k: Any) -> None:
        return None


def run_status(attach: Callable[..., Cluster], args: argparse.Namespace, show: Printer) -> int:
    """``status --run ID``: roles as the servers say now, recording nothing."""
    cluster = attach(args.run, history=NoHistory())
    cluster.refresh_roles()
    show(cluster.describe(), args.json)
    return 0


#: The faults every manager run takes (:func:`role_ops`), and whether each needs a node name.
ROLE_ACTIONS = {"switchover": False, "failover": False, "kill": True, "start": True, "kill-manager": True}


def role_ops(cluster: Any, node: str | None) -> dict[str, Callable[[], dict[str, Any]]]:
    """The faults every manager run takes (HAM-3/HAM-6): switchover and failover asked of the manager,
    machine loss of ``node``, its manager started again, only its manager killed."""
    return {"switchover": lambda: cluster.switchover(node),
            "failover": lambda: cluster.failover(node),
            "kill": lambda: cluster.kill(node),
            "start": lambda: cluster.start(node),
            "kill-manager": lambda: cluster.kill_manager(node)}


def run_fault(attach: Callable[[str], Cluster], args: argparse.Namespace, manager: str, actions: dict[str, bool],
              ops: Callable[[Any, argparse.Namespace], dict[str, Callable[[], dict[str, Any]]]]) -> int:
    """``fault --run ID ACTION [NODE]`` on a manager run: ``actions`` says which exist and which need a
    node (one-line ConfigError otherwise), ``ops(cluster, args)`` what each does; prints the result
    (``ham.op`` events go to the run's history, named in the result)."""
    action = args.action
    if action not in actions:
        raise ConfigError(f"a {manager} run takes the faults {', '.join(actions)}, not {action!r}")
    cluster = attach(args.run)
    if actions[action] and not args.node:
        raise ConfigError(f"'fault {action}' needs a node name, e.g. 'fault --run {args.run} {action} n1'")
    if args.node:
        try:
            cluster.node_state(args.node)
        except UnknownNodeError as exc:  # bad input: one line, exit 2
            raise ConfigError(f"{exc}; see 'failover-harness status --run {args.run}'") from None
    out = ops(cluster, args)[action]()
    out["history"] = str(cluster.path / "history.jsonl")
    if args.json:
        print(json.dumps(out, default=str))
    else:
        print(f"{out['fault']} {out['node'] or ''} took {out['seconds']:.3f} s; principal is {out['principal']} "
              f"(was {out['previous_principal']})")
    return 0


def run_down(attach: Callable[[str], Cluster], run_id: str) -> int:
    """``down --run ID``: every process of the run stopped in the manager's order, the run deleted."""
    attach(run_id).down()
    print(f"down {run_id}: stopped")
    return 0
