"""``up``, ``status``, ``fault`` and ``down`` for the Patroni topologies (``patroni-pair``,
``patroni-group3``; docs/ha-managers.md). ``topology_cmds`` hands a Patroni topology or run over
to these functions; the JSON printed with ``--json`` has the keys of the other topologies plus
``manager``, ``timing`` and each node's ``api`` and ``proxies``.

Faults on a Patroni run (each returns once exactly one node accepts writes, unless said otherwise):

* ``switchover [NODE]`` / ``failover [NODE]`` - asked of Patroni (``POST /switchover`` / ``/failover``);
* ``kill NODE`` - machine loss: the node's Patroni and PostgreSQL die (SIGKILL);
* ``start NODE`` - the node's Patroni starts again (and rejoins the cluster as a replica);
* ``kill-manager NODE`` - only Patroni dies, PostgreSQL keeps running (returns at once);
* ``partition-dcs NODE [--hold S]`` - the node's link to etcd is cut (healed after S seconds);
  ``heal-dcs NODE`` restores it;
* ``pause`` / ``resume`` - Patroni's maintenance mode on / off."""

from __future__ import annotations

import argparse
from typing import Any

from harness.cli import manager_cmds as shared
from harness.topology.patroni import PATRONI_TOPOLOGIES, PatroniCluster, check_backend, is_patroni_run

__all__ = ["PATRONI_ACTIONS", "PATRONI_TOPOLOGIES", "down", "fault", "is_patroni_run", "status", "up"]

#: The fault actions a Patroni run accepts, and whether each needs a node name.
PATRONI_ACTIONS = {**shared.ROLE_ACTIONS, "partition-dcs": True, "heal-dcs": True, "pause": False, "resume": False}


def up(args: argparse.Namespace) -> int:
    """``up --topology patroni-*``: only ``--detach`` (the run outlives the command) or a foreground
    run until Ctrl-C, on the local backend, PostgreSQL, behind the fault proxy."""
    check_backend(args.backend)  # the capability table's one-line reason on compose
    shared.check_up_args(args, "every link is a proxy")
    cluster = PatroniCluster(nodes=PATRONI_TOPOLOGIES[args.topology], detached=args.detach,
                             progress=shared.say(not args.json or not args.detach))
    if args.mode == "async":
        from dataclasses import replace

        cluster.timing = replace(cluster.timing, synchronous_mode=False)
    return shared.run_up(cluster, args, _print)


def _print(desc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        shared.print_json(desc)
        return
    t = desc["timing"]
    print(f"run {desc['run']}: {desc['topology']} (patroni, ttl {t['ttl']} s, loop_wait {t['loop_wait']} s, "
          f"retry_timeout {t['retry_timeout']} s, synchronous_mode {t['synchronous_mode']})")
    for n in desc["nodes"]:
        print(f"  {n['name']:4} {n['role']:9} {n['state']:8} client {n['client_address']:22} "
              f"api {n['api']:22} {n['dsn']}")
    print(f"  etcd {desc['etcd']}", flush=True)


def status(args: argparse.Namespace) -> int:
    """``status --run ID`` of a Patroni run (roles as the servers say now)."""
    return shared.run_status(PatroniCluster.attach, args, _print)


def _ops(cluster: PatroniCluster, args: argparse.Namespace) -> dict[str, Any]:
    hold = getattr(args, "hold", None)
    return {**shared.role_ops(cluster, args.node),
            "partition-dcs": lambda: cluster.partition_dcs(args.node, hold=hold),
            "heal-dcs": lambda: cluster.heal_dcs(args.node),
            "pause": lambda: cluster.set_pause(True),
            "resume": lambda: cluster.set_pause(False)}


def fault(args: argparse.Namespace) -> int:
    """``fault --run ID ACTION [NODE]`` on a Patroni run (see the module docstring)."""
    return shared.run_fault(PatroniCluster.attach, args, "Patroni", PATRONI_ACTIONS, _ops)


def down(run_id: str) -> int:
    """``down --run ID`` of a Patroni run: Patroni first, then the servers (no restarts meanwhile)."""
    return shared.run_down(PatroniCluster.attach, run_id)
