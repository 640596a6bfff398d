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
from typing import Any

from harness.cli import manager_cmds as shared
from harness.errors import ConfigError
from harness.topology.pgaf import PGAF_TOPOLOGIES, PgafCluster, check_backend, is_pgaf_run

__all__ = ["PGAF_ACTIONS", "PGAF_TOPOLOGIES", "down", "fault", "is_pgaf_run", "status", "up"]

#: The fault actions a pg_auto_failover run accepts, and whether each needs a node name.
PGAF_ACTIONS = {**shared.ROLE_ACTIONS, "partition-monitor": True, "heal-monitor": True, "maintenance": True,
                "resume": True}


def up(args: argparse.Namespace) -> int:
    """``up --topology pgaf-*``: ``--detach`` (the run outlives the command) or a foreground run until
    Ctrl-C, on the local backend, PostgreSQL, behind the fault proxy."""
    check_backend(args.backend)  # the capability table's one-line reason on compose
    shared.check_up_args(args, "clients and the monitor links are proxies")
    if args.mode == "async":
        raise ConfigError(f"topology {args.topology!r} uses pg_auto_failover's synchronous replication "
                          "(replication-quorum); drop --mode async")
    cluster = PgafCluster(nodes=PGAF_TOPOLOGIES[args.topology], detached=args.detach,
                          progress=shared.say(not args.json or not args.detach))
    return shared.run_up(cluster, args, _print)


def _print(desc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        shared.print_json(desc)
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


def status(args: argparse.Namespace) -> int:
    """``status --run ID`` of a pg_auto_failover run (roles as the servers say now)."""
    return shared.run_status(PgafCluster.attach, args, _print)


def _ops(cluster: PgafCluster, args: argparse.Namespace) -> dict[str, Any]:
    hold = getattr(args, "hold", None)
    return {**shared.role_ops(cluster, args.node),
            "partition-monitor": lambda: cluster.partition_monitor(args.node, hold=hold),
            "heal-monitor": lambda: cluster.heal_monitor(args.node),
            "maintenance": lambda: cluster.set_maintenance(args.node, True),
            "resume": lambda: cluster.set_maintenance(args.node, False)}


def fault(args: argparse.Namespace) -> int:
    """``fault --run ID ACTION [NODE]`` on a pg_auto_failover run (see the module docstring)."""
    return shared.run_fault(PgafCluster.attach, args, "pg_auto_failover", PGAF_ACTIONS, _ops)


def down(run_id: str) -> int:
    """``down --run ID`` of a pg_auto_failover run: every pg_autoctl stopped (each fast-stops its server)."""
    return shared.run_down(PgafCluster.attach, run_id)
