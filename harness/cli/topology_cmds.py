"""``up``, ``status``, ``fault`` and ``down``: bring topologies up, drive them, tear them down.

The JSON printed by ``--json`` is a contract (scripts rely on it): keep the keys stable."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from harness.cli import patroni_cmds, pgaf_cmds
from harness.cli.attach_cmds import coordinate_run, endpoints_of, repoint_run
from harness.cli.fault_network import jitter_ms, latency_ms
from harness.cli.membership_cmds import MEMBERSHIP_ACTIONS, apply_membership
from harness.errors import ConfigError, UnknownNodeError
from harness.faults import Faults
from harness.topology import preflight, resolve
from harness.topology.backend import BACKENDS, attach, engine_names
from harness.topology.local import TOPOLOGIES, TOPOLOGY_ENGINES
from harness.topology.run import down_all, down_run, run_path


def _progress(enabled: bool):
    def say(msg: str) -> None:
        if enabled:
            print(f"[failover-harness] {msg}", file=sys.stderr, flush=True)
    return say


def cmd_up(args: argparse.Namespace) -> int:
    """Start a topology; with --detach print its description and leave it running."""
    if args.topology in patroni_cmds.PATRONI_TOPOLOGIES:  # Patroni manages the roles (docs/ha-managers.md)
        return patroni_cmds.up(args)
    if args.topology in pgaf_cmds.PGAF_TOPOLOGIES:  # pg_auto_failover manages the roles (docs/ha-managers.md)
        return pgaf_cmds.up(args)
    if args.topology not in TOPOLOGIES:
        raise ConfigError(f"unknown topology {args.topology!r}; choose one of "
                          f"{', '.join([*TOPOLOGIES, *patroni_cmds.PATRONI_TOPOLOGIES, *pgaf_cmds.PGAF_TOPOLOGIES])}")
    implied = TOPOLOGY_ENGINES.get(args.topology)
    if args.engine is not None and implied is not None and args.engine != implied:
        raise ConfigError(f"topology {args.topology!r} runs on engine {implied!r}, not {args.engine!r}; "
                          f"drop --engine or pick a {args.engine} topology")
    backend, engine = resolve(args.backend, args.engine or implied or "postgres")
    preflight.check_up(engine.name, TOPOLOGIES[args.topology])  # before anything starts (a bad home: one line)
    topo = backend.build(engine, TOPOLOGIES[args.topology], mode=args.mode, mirror_readable=args.mirror_readable,
                         detached=args.detach, links="proxy" if args.proxy else "direct",
                         progress=_progress(not args.json or not args.detach))
    topo.up()
    if args.detach:
        _print_desc(topo.describe(), args.json)
        return 0
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    try:  # from here on, every way out (Ctrl-C at any moment, SIGTERM, an error) tears down
        signal.signal(signal.SIGTERM, on_signal)
        _print_desc(topo.describe(), args.json)
        print("[failover-harness] running; press Ctrl-C to tear down", file=sys.stderr, flush=True)
        while not stop["now"]:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        topo.down()
        print("[failover-harness] torn down", file=sys.stderr, flush=True)
    return 0


def _print_desc(desc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(desc), flush=True)
    else:
        _print_human(desc)
        sys.stdout.flush()


def _print_human(desc: dict[str, Any]) -> None:
    print(f"run {desc['run']}: {desc['topology']} ({desc['mode']}, mirror readable: {desc['mirror_readable']})")
    for n in desc["nodes"]:
        print(f"  {n['name']:4} {n['role']:9} {n['state']:8} client {n['client_address']:22} "
              f"server {n['server_address']:22} {n['dsn']}")


def cmd_status(args: argparse.Namespace) -> int:
    """Print a run's current roles and addresses."""
    if patroni_cmds.is_patroni_run(args.run):
        return patroni_cmds.status(args)
    if pgaf_cmds.is_pgaf_run(args.run):
        return pgaf_cmds.status(args)
    topo = attach(args.run)
    desc = topo.describe()
    topo.check_processes(desc)  # each process checked: 'dead' for one that is gone, never a stale 'running'
    desc["persistent_proxies"] = [e.public() for e in endpoints_of(topo)]  # no token, no password
    if args.json:
        print(json.dumps(desc))
        return 0
    _print_human(desc)
    for e in desc["persistent_proxies"]:
        workers = f" ({e['workers']} workers)" if e.get("workers", 1) > 1 else ""
        print(f"  {e['name']:16} {e['kind']:22} listen {e['listen']:22} admin {e['admin'] or '-':22} "
              f"{e['dsn']}{workers}")
    print("  processes:")
    for p in desc["processes"]:
        pid = f"pid {p['pid']}" if p["pid"] else "-"
        print(f"    {p['name']:16} {p['kind']:11} {pid:11} {p['state']:8} {p['detail']}".rstrip())
    if desc["fault_proxy"].get("state") == "dead":
        print(f"  clients cannot reach any node: the fault proxy is dead (tear down with "
              f"'failover-harness down --run {desc['run']}' and start again with 'up')")
    return 0


NODE_ACTIONS = ("stop", "start", "kill", "pause", "resume")
ROLE_ACTIONS = ("switchover", "failover", "rejoin")


def _check_node_name(topo: Any, args: argparse.Namespace) -> None:
    """A node name the run does not have is bad input for every fault (exit 2, one line naming the
    run's nodes), before anything is touched - ``partition n9`` as ``remove-node n9``."""
    if getattr(args, "node", None) and args.action != "add-node":
        try:
            topo.node(args.node)
        except UnknownNodeError as exc:
            raise ConfigError(f"{exc}; see 'failover-harness status --run {args.run}'") from None


def cmd_fault(args: argparse.Namespace) -> int:
    """Apply one fault or role operation to a running topology and report how long it took."""
    if args.action == "mark-state":
        return _mark_state(args)
    if patroni_cmds.is_patroni_run(args.run):  # Patroni's own role operations (docs/ha-managers.md)
        return patroni_cmds.fault(args)
    if pgaf_cmds.is_pgaf_run(args.run):  # pg_auto_failover's own role operations (docs/ha-managers.md)
        return pgaf_cmds.fault(args)
    topo = attach(args.run)
    action = args.action
    _check_node_name(topo, args)
    coordinated: list[dict[str, Any]] = []
    if action in MEMBERSHIP_ACTIONS:  # node add / remove (PER-1, PER-9): attached proxies move first
        result, coordinated = apply_membership(topo, args)
    elif action in ROLE_ACTIONS:
        faults = Faults(topo)
        if action == "switchover":  # PER-1/PER-4: drain and resume every attached client
            coordinate_run(faults, topo)
        result = getattr(faults, action)(args.node).result
        if action == "failover":  # unplanned: nothing to drain; re-point every attached client
            repoint_run(topo)
    elif action in NODE_ACTIONS:
        if not args.node:
            raise ConfigError(f"'fault {action}' needs a node name, e.g. 'fault --run {args.run} {action} n1'")
        if action == "stop":
            result = topo.stop(args.node, mode=args.mode)
        elif action == "pause":
            result = topo.pause(args.node, scope=args.scope)
        else:
            result = getattr(topo, action)(args.node)
    else:
        from harness.cli.fault_network import apply_network_fault  # partition / latency / heal

        result = apply_network_fault(topo, args)
    out = result.to_dict()
    if coordinated:
        out["coordinated"] = coordinated
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['fault']} {out['node'] or ''} took {out['seconds']:.3f} s; principal is {out['principal']}")
        for c in coordinated:
            print(f"  {c['name']}: {c['moved']} session(s) moved, {c['closed']} closed")
    return 0


def _mark_state(args: argparse.Namespace) -> int:
    """``fault --run RUN mark-state SERVER --database DB --mark out-of-service|pending-delete|none`` (ICM-1)."""
    from harness.topology.icm_directory import mark_in_run

    if not args.node or not args.database:
        raise ConfigError(f"'fault mark-state' needs a server and a database, e.g. 'fault --run {args.run} "
                          "mark-state s1 --database mail.nsf --mark out-of-service'")
    out = mark_in_run(run_path(args.run), args.node, args.database, None if args.mark == "none" else args.mark)
    print(json.dumps(out) if args.json else f"mark-state {args.node} {args.database}: {args.mark}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Tear down one run, or every run on this machine (also those of crashed processes)."""
    if args.all:
        result = down_all()
        for run_id, pids in result.items():
            print(f"down {run_id}: killed {len(pids)} process(es)")
        if not result:
            print("no runs")
        return 0
    if not args.run:
        raise ConfigError("say which run to tear down: 'down --run ID' or 'down --all'")
    if patroni_cmds.is_patroni_run(args.run):
        return patroni_cmds.down(args.run)
    if pgaf_cmds.is_pgaf_run(args.run):
        return pgaf_cmds.down(args.run)
    pids = down_run(run_path(args.run))
    print(f"down {args.run}: killed {len(pids)} process(es)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add up / status / fault / down."""
    p = sub.add_parser("up", help="start a topology (pair or group of PostgreSQL servers, local or in containers)")
    managed = [*patroni_cmds.PATRONI_TOPOLOGIES, *pgaf_cmds.PGAF_TOPOLOGIES]
    p.add_argument("--topology", default="pg-pair", help=f"one of {', '.join([*TOPOLOGIES, *managed])}")
    p.add_argument("--backend", default="local", choices=list(BACKENDS),
                   help="where the nodes run: local processes or compose containers "
                        "(run failover-harness compose-setup first)")
    p.add_argument("--engine", default=None, choices=engine_names(),
                   help="database engine (default: the topology's, postgres for pg-*, mariadb for mariadb-*)")
    p.add_argument("--mode", default="sync", choices=["sync", "async"], help="replication mode")
    p.add_argument("--mirror-readable", action="store_true", help="hot standby (default: rejects logins)")
    p.add_argument("--no-proxy", dest="proxy", action="store_false",
                   help="clients reach servers directly (no fault proxy in front)")
    p.add_argument("--detach", action="store_true", help="leave it running in the background and exit")
    p.add_argument("--json", action="store_true", help="print one JSON object describing the run")
    p.set_defaults(func=cmd_up, proxy=True)

    p = sub.add_parser("status", help="show a run's nodes and roles")
    p.add_argument("--run", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("fault", help="apply a fault or role operation to a run",
                       description="actions: switchover, failover, rejoin [NODE]; stop|start|kill|pause|resume NODE; "
                                   "add-node; remove-node NODE (attached persistent proxies move its sessions first); "
                                   "partition NODE [--how blackhole|refuse|reset]; latency NODE MS; heal; "
                                   "mark-state SERVER --database DB --mark M (an ICM cluster's replica); "
                                   f"on a Patroni run: {', '.join(patroni_cmds.PATRONI_ACTIONS)}; "
                                   f"on a pg_auto_failover run: {', '.join(pgaf_cmds.PGAF_ACTIONS)}")
    p.add_argument("--run", required=True)
    p.add_argument("action", help="switchover, failover, rejoin, stop, start, kill, pause, resume, "
                                  "add-node, remove-node, partition, latency, heal, mark-state")
    p.add_argument("node", nargs="?", help="node name (n1, n2, ...)")
    p.add_argument("value", nargs="?", type=latency_ms, help="latency in ms (0 to one day)")
    p.add_argument("--mode", default="fast", choices=["fast", "immediate", "smart"], help="stop mode")
    p.add_argument("--scope", default="postmaster", choices=["postmaster", "all"], help="pause scope")
    p.add_argument("--how", default="blackhole", choices=["blackhole", "refuse", "reset"], help="partition kind")
    p.add_argument("--jitter", type=jitter_ms, default=0, help="latency jitter in ms (0 to one day)")
    p.add_argument("--database", help="mark-state: the replica's database (e.g. mail.nsf)")
    p.add_argument("--mark", default="out-of-service", choices=["out-of-service", "pending-delete", "none"],
                   help="mark-state: the replica mark (none clears it)")
    p.add_argument("--hold", type=float, default=None,
                   help="partition-dcs (Patroni runs), partition-monitor (pg_auto_failover runs): heal the cut "
                        "after this many seconds")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fault)

    p = sub.add_parser("down", help="tear down a run (or --all runs on this machine)")
    p.add_argument("--run")
    p.add_argument("--all", action="store_true")
    p.set_defaults(func=cmd_down)
