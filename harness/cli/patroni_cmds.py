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
import json
from typing import Any

from harness.errors import ConfigError, UnknownNodeError
from harness.topology.patroni import PATRONI_TOPOLOGIES, PatroniCluster, check_backend, is_patroni_run

__all__ = ["PATRONI_ACTIONS", "PATRONI_TOPOLOGIES", "down", "fault", "is_patroni_run", "status", "up"]

#: The fault actions a Patroni run accepts, and whether each needs a node name.
PATRONI_ACTIONS = {"switchover": False, "failover": False, "kill": True, "start": True, "kill-manager": True,
                   "partition-dcs": True, "heal-dcs": True, "pause": False, "resume": False}


def _say(enabled: bool):
    import sys

    def say(msg: str) -> None:
        if enabled:
            print(f"[failover-harness] {msg}", file=sys.stderr, flush=True)
    return say


def up(args: argparse.Namespace) -> int:
    """``up --topology patroni-*``: only ``--detach`` (the run outlives the command) or a foreground
    run until Ctrl-C, on the local backend, PostgreSQL, behind the fault proxy."""
    check_backend(args.backend)  # the capability table's one-line reason on compose
    if args.engine not in (None, "postgres"):
        raise ConfigError(f"topology {args.topology!r} runs PostgreSQL; drop --engine")
    if not args.proxy:
        raise ConfigError(f"topology {args.topology!r} needs the fault proxy (every link is a proxy); drop --no-proxy")
    cluster = PatroniCluster(nodes=PATRONI_TOPOLOGIES[args.topology], detached=args.detach,
                             progress=_say(not args.json or not args.detach))
    if args.mode == "async":
        from dataclasses import replace

        cluster.timing = replace(cluster.timing, synchronous_mode=False)
    cluster.up()
    if args.detach:
        _print(cluster.describe(), args.json)
        return 0
    import time

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
    t = desc["timing"]
    print(f"run {desc['run']}: {desc['topology']} (patroni, ttl {t['ttl']} s, loop_wait {t['loop_wait']} s, "
          f"retry_timeout {t['retry_timeout']} s, synchronous_mode {t['synchronous_mode']})")
    for n in desc["nodes"]:
        print(f"  {n['name']:4} {n['role']:9} {n['state']:8} client {n['client_address']:22} "
              f"api {n['api']:22} {n['dsn']}")
    print(f"  etcd {desc['etcd']}", flush=True)


def status(args: argparse.Namespace) -> int:
    """``status --run ID`` of a Patroni run (roles as the servers say now)."""
    cluster = PatroniCluster.attach(args.run, history=_NoHistory())
    cluster.refresh_roles()
    _print(cluster.describe(), args.json)
    return 0


class _NoHistory:
    def record(self, *a: Any, **k: Any) -> None:
        return None


def fault(args: argparse.Namespace) -> int:
    """``fault --run ID ACTION [NODE]`` on a Patroni run (see the module docstring)."""
    action = args.action
    if action not in PATRONI_ACTIONS:
        raise ConfigError(f"a Patroni run takes the faults {', '.join(PATRONI_ACTIONS)}, not {action!r}")
    cluster = PatroniCluster.attach(args.run)
    if PATRONI_ACTIONS[action] and not args.node:
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
           "partition-dcs": lambda: cluster.partition_dcs(args.node, hold=hold),
           "heal-dcs": lambda: cluster.heal_dcs(args.node),
           "pause": lambda: cluster.set_pause(True),
           "resume": lambda: cluster.set_pause(False)}
    out = ops[action]()
    out["history"] = str(cluster.path / "history.jsonl")
    if args.json:
        print(json.dumps(out, default=str))
    else:
        print(f"{out['fault']} {out['node'] or ''} took {out['seconds']:.3f} s; principal is {out['principal']} "
              f"(was {out['previous_principal']})")
    return 0


def down(run_id: str) -> int:
    """``down --run ID`` of a Patroni run: Patroni first, then the servers (no restarts meanwhile)."""
    cluster = PatroniCluster.attach(run_id)
    cluster.down()
    print(f"down {run_id}: stopped")
    return 0
