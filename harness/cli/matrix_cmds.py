"""``failover-harness matrix --profile NAME``: run a profile's suites once per registered client (each
in its own pytest process) and write ``reports/matrix/<profile>.{json,md,html}``."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

from harness.clients.registry import PROFILES, known_clients, resolve_client
from harness.errors import ConfigError
from harness.paths import repo_root, reports_dir
from harness.report.matrix import all_rules, build_matrix, collect_cells, write_matrix

PROFILE_FAMILY = {"mirroring": "MIR", "persistent": "PER", "acr": "ACR", "icm": "ICM"}


def cmd_matrix(args: argparse.Namespace) -> int:
    """Run the suites for every client of the profile and write the matrix."""
    if args.profile not in PROFILES:
        raise ConfigError(f"unknown profile {args.profile!r}; use one of {', '.join(PROFILES)}")
    suites = repo_root() / "suites" / args.profile
    if not suites.exists():
        raise ConfigError(f"profile {args.profile} has no suites yet ({suites} does not exist)")
    clients = [c.strip() for c in args.clients.split(",") if c.strip()] if args.clients \
        else known_clients(args.profile)
    if not clients:
        raise ConfigError(f"no client is registered for profile {args.profile}")
    for client in clients:  # every column is checked before any suite runs
        resolve_client(client, args.profile)
    work = reports_dir() / "matrix" / args.profile
    columns = {}
    for client in clients:
        histories = work / client.replace("/", "_") / "histories"
        shutil.rmtree(histories, ignore_errors=True)
        histories.mkdir(parents=True)
        cmd = [sys.executable, "-m", "harness.cli", "run", str(suites), "--client", client,
               "--results", str(histories.parent / "allure-results"), f"--pytest-arg=--history-dir={histories}",
               "--pytest-arg=-q"]
        if args.markers:
            cmd += ["-m", args.markers]
        print(f"[failover-harness] matrix: {args.profile} suites against client {client}", file=sys.stderr, flush=True)
        subprocess.run(cmd, check=False)
        columns[client] = collect_cells(histories, PROFILE_FAMILY[args.profile])
    matrix = build_matrix(args.profile, columns, all_rules(columns))
    paths = write_matrix(matrix, reports_dir() / "matrix")
    print(paths["md"].read_text())
    for ext, path in paths.items():
        print(f"{ext}: {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``matrix``."""
    p = sub.add_parser("matrix", help="conformance matrix: a profile's suites against every registered client")
    p.add_argument("--profile", required=True, help=f"one of {', '.join(PROFILES)}")
    p.add_argument("--clients", help="comma-separated client names (default: every registered one)")
    p.add_argument("-m", dest="markers", help="pytest -m expression (e.g. 'not slow')")
    p.set_defaults(func=cmd_matrix)
