"""``up``, ``status``, ``fault`` and ``down`` for the pg_auto_failover topologies (``pgaf-pair``,
``pgaf-group3``; docs/ha-managers.md). ``topology_cmds`` hands a pg_auto_failover topology or run over
to these functions; the JSON printed with ``--json`` has the keys of the other topologies plus
``manager``, ``settings``, ``monitor`` and each node's ``monitor_state`` and ``proxies``.

Faults on a pg_auto_failover run (each returns once exactly one node accepts writes):

* ``switchover [NODE]`` / ``failover [NODE]`` - asked of the monitor (``pg_autoctl perform
  switchover`` / ``failover``; with NODE ``perform promotion --name NODE``);
* ``kill NODE`` - machine loss: the node's pg_autoctl and PostgreSQL die (SIGKILL);
* ``start NODE`` - the node's pg_autoctl starts again (``pg_autoctl run``; it rejoins);
* ``kill-manager NODE`` - only pg_autoctl dies, PostgreSQL keeps running;
* ``partition-monitor NODE [--hold S]`` - the node's link to the monitor is cut (healed after S
  seconds); ``heal-monitor NODE`` restores it;
* ``maintenance NODE`` / ``resume NODE`` - ``pg_autoctl enable`` / ``disable maintenance`` on NODE."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from harness.errors import ConfigError, UnknownNodeError
from harness.topology.pgaf import PGAF_TOPOLOGIES, PgafCluster, check_backend, is_pgaf_run

__all__ = ["PGAF_ACTIONS", "PGAF_TOPOLOGIES", "down", "fault", "is_pgaf_run", "status", "up"]

#: The fault actions a pg_auto_failover run accepts, and whether each needs a node name.
PGAF_ACTIONS = {"switchover": False, "failover": False, "kill": True, "start": True, "kill-manager": True,
                "partition-monitor": True, "heal-monitor": True, "maintenance": True, "resume": True}


def _say(enabled: bool):
    def say(msg: str) -> None:
        if enabled:
            print(f"[failover-harness] {msg}", file=sys.stderr, flush=True)
    return say


def up(args: argparse.Namespace) -> int:
    """``up --topology pgaf-*``: ``--detach`` (the run outlives the command) or a foreground run until
    Ctrl-C, on the local backend, PostgreSQL, behind the fault proxy."""
    check_backend(args.backend)  # the capability table's one-line reason on compose
    if args.engine not in (None, "postgres"):
        raise ConfigError(f"topology {args.topology!r} runs PostgreSQL; drop --engine")
    if not args.proxy:
        raise ConfigError(f"topology {args.topology!r} needs the fault proxy (clients and the monitor links "
                          "are proxies); drop --no-proxy")
    if args.mode == "async":
        raise ConfigError(f"topology {args.topology!r} uses pg_auto_failover's synchronous replication "
                          "(replication-quorum); drop --mode async")
    cluster = PgafCluster(nodes=PGAF_TOPOLOGIES[args.topology], detached=args.detach,
                          progress=_say(not args.json or not args.detach))
    cluster.up()
    if args.detach:
        _print(cluster.describe(), args.json)
        return 0
    try:
        _print(cluster.describe(), args.json)
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.down()
    return 0


def _print(desc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(desc), flush=True)
        return
    s = desc["settings"]
    print(f"run {desc['run']}: {desc['topology']} (pg_auto_failover, health_check_period "
          f"{s['health_check_period_ms']} ms, node_considered_unhealthy_timeout "
          f"{s['node_considered_unhealthy_timeout_ms']} ms, primary_demote_timeout "
          f"{s['primary_demote_timeout_ms']} ms)")
    for n in desc["nodes"]:
        print(f"  {n['name']:4} {n['role']:9} {n['state']:8} monitor {n['monitor_state'] or '?':13} "
              f"client {n['client_address']:22} {n['dsn']}")
    print(f"  monitor {desc['monitor']}", flush=True)


class _NoHistory:
    def record(self, *a: Any, **k: Any) -> None:
        return None


def status(args: argparse.Namespace) -> int:
    """``status --run ID`` of a pg_auto_failover run (roles as the servers say now)."""
    cluster = PgafCluster.attach(args.run, history=_NoHistory())
    cluster.refresh_roles()
    _print(cluster.describe(), args.json)
    return 0


def fault(args: argparse.Namespace) -> int:
    """``fault --run ID ACTION [NODE]`` on a pg_auto_failover run (see the module docstring)."""
    action = args.action
    if action not in PGAF_ACTIONS:
        raise ConfigError(f"a pg_auto_failover run takes the faults {', '.join(PGAF_ACTIONS)}, not {action!r}")
    cluster = PgafCluster.attach(args.run)
    if PGAF_ACTIONS[action] and not args.node:
        raise ConfigError(f"'fault {action}' needs a node name, e.g. 'fault --run {args.run} {action} n1'")
    if args.node:
        try:
            cluster.node_state(args.node)
        except UnknownNodeError as exc:  # bad input: one line, exit 2
            raise ConfigError(f"{exc}; see 'failover-harness status --run {args.run}'") from None
    hold = getattr(args, "hold", None)
    ops = {"switchover": lambda: cluster.switchover(args.node),
           "failover": lambda: cluster.failover(args.node),
           "kill": lambda: cluster.kill(args.node),
           "start": lambda: cluster.start(args.node),
           "kill-manager": lambda: cluster.kill_manager(args.node),
           "partition-monitor": lambda: cluster.partition_monitor(args.node, hold=hold),
           "heal-monitor": lambda: cluster.heal_monitor(args.node),
           "maintenance": lambda: cluster.set_maintenance(args.node, True),
           "resume": lambda: cluster.set_maintenance(args.node, False)}
    out = ops[action]()
    out["history"] = str(cluster.path / "history.jsonl")
    if args.json:
        print(json.dumps(out, default=str))
    else:
        print(f"{out['fault']} {out['node'] or ''} took {out['seconds']:.3f} s; principal is {out['principal']} "
              f"(was {out['previous_principal']})")
    return 0


def down(run_id: str) -> int:
    """``down --run ID`` of a pg_auto_failover run: every pg_autoctl stopped (each fast-stops its server)."""
    cluster = PgafCluster.attach(run_id)
    cluster.down()
    print(f"down {run_id}: stopped")
    return 0
