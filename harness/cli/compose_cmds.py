"""``compose-setup``: prepare the Compose backend (engine, Compose v2, images), or with
``--stop-engine`` stop the ``dockerd`` that an earlier set-up started (and nothing else)."""

from __future__ import annotations

import argparse
import json
import sys


def _say(msg: str) -> None:
    print(f"[compose-setup] {msg}", file=sys.stderr, flush=True)


def cmd_compose_setup(args: argparse.Namespace) -> int:
    """Run the set-up (idempotent) or stop the engine it started."""
    from harness.topology import compose_setup, dockerd

    if args.stop_engine:
        if dockerd.started_engine_pid() is None:
            _say("no dockerd started by this harness is running; nothing to stop")
            return 0
        from harness.topology.containers import harness_containers

        if harness_containers(all_homes=True):
            _say("harness containers are still there; leaving the engine running (failover-harness down --all)")
            return 0
        dockerd.stop_engine(_say)
        return 0
    result = compose_setup.setup(_say, pull=not args.no_pull)
    if args.json:
        print(json.dumps(result))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``compose-setup``."""
    p = sub.add_parser("compose-setup", help="prepare the Compose backend: engine, Compose v2, images (idempotent)")
    p.add_argument("--no-pull", action="store_true", help="never try a registry; build local stand-ins")
    p.add_argument("--stop-engine", action="store_true",
                   help="stop the dockerd an earlier compose-setup started (only that one, only when no harness "
                        "container is left)")
    p.add_argument("--json", action="store_true", help="print what was found or done as JSON")
    p.set_defaults(func=cmd_compose_setup)
