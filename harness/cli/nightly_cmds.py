"""``failover-harness nightly``: the logic of the nightly chaos workflow
(``.github/workflows/nightly-chaos.yml``), kept here so that the workflow stays thin and is tested:

* ``nightly --plan`` prints the job matrix (backend x profile x client, from the registered clients)
  as the JSON ``strategy.matrix`` takes (``{"include": [...]}``);
* ``nightly --job --backend B --profile P [--client C] --out DIR`` runs that job's suites
  (``failover-harness run``) into ``DIR/allure-results`` and ``DIR/histories``;
* ``nightly --merge DIR --results R --matrices M`` merges every job folder under DIR into one
  Allure results folder and writes the conformance matrices per backend and profile.

The report then comes from ``failover-harness report --results R --history-from PREVIOUS`` (the
previous nightly's report carries the trend)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.cli.matrix_cmds import PROFILE_FAMILY
from harness.cli.suites import import_from_cwd, profile_suites
from harness.clients.registry import known_clients
from harness.errors import ConfigError
from harness.paths import reports_dir
from harness.profiles import PROFILES, get_profile
from harness.topology.backend import BACKENDS

DEFAULT_BACKENDS = ("local", "compose")


def plan(backends: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The nightly job matrix: one job per backend, built profile with suites, and registered client
    of that profile (a profile without clients under test, e.g. cross-cutting, has one job)."""
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise ConfigError(f"unknown backend(s) {', '.join(unknown)}; use {', '.join(BACKENDS)}")
    include = []
    for backend in backends:
        for profile in PROFILES:
            if not profile.built or not profile.suites:
                continue
            clients: list[str | None] = list(known_clients(profile.name)) if profile.default_client else [None]
            for client in clients:
                name = f"{backend}-{profile.name}" + (f"-{client}" if client else "")
                include.append({"name": name, "backend": backend, "profile": profile.name, "client": client or "",
                                "suites": profile.suites, "needs_compose": backend == "compose"})
    return {"include": include}


def run_job(backend: str, profile: str, client: str | None, out: Path) -> int:
    """Run one nightly job's suites; returns pytest's exit code (the results are written either way)."""
    from harness.report.nightly import write_job

    prof = get_profile(profile)
    if not prof.suites:
        raise ConfigError(f"profile {profile} has no suites")
    write_job(out, backend, profile, client)
    import_from_cwd()
    cmd = [sys.executable, "-m", "harness.cli", "run", str(profile_suites(profile)), "--backend", backend,
           "--results", str(out / "allure-results"), f"--history-dir={out / 'histories'}"]
    if client:
        cmd += ["--client", f"{profile}/{client}"]
    print(f"[failover-harness] nightly job {backend} {profile} {client or '-'}", file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=False).returncode


def cmd_nightly(args: argparse.Namespace) -> int:
    """``nightly --plan | --job | --merge``."""
    if args.plan:
        print(json.dumps(plan(args.backends.split(","))))
        return 0
    if args.job:
        if not args.profile or not args.out:
            raise ConfigError("'nightly --job' needs --profile and --out (and --backend, --client)")
        return run_job(args.backend, args.profile, args.client or None, Path(args.out))
    if args.merge:
        from harness.report.nightly import merge

        results = Path(args.results) if args.results else reports_dir() / "allure-results"
        matrices = Path(args.matrices) if args.matrices else reports_dir() / "matrix"
        summary = merge(Path(args.merge), results, matrices, PROFILE_FAMILY)
        print(json.dumps(summary))
        return 0
    raise ConfigError("say what to do: 'nightly --plan', 'nightly --job ...' or 'nightly --merge DIR'")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``nightly``."""
    p = sub.add_parser("nightly", help="the nightly chaos workflow's steps: --plan, --job, --merge")
    p.add_argument("--plan", action="store_true", help="print the job matrix as JSON ({'include': [...]})")
    p.add_argument("--backends", default=",".join(DEFAULT_BACKENDS), help="backends of the plan (comma-separated)")
    p.add_argument("--job", action="store_true", help="run one job (--backend, --profile, --client, --out)")
    p.add_argument("--backend", default="local", choices=list(BACKENDS))
    p.add_argument("--profile", help="profile of the job")
    p.add_argument("--client", default="", help="registered client of the job's profile (empty: none)")
    p.add_argument("--out", help="the job's output folder")
    p.add_argument("--merge", metavar="DIR", help="merge every job folder under DIR")
    p.add_argument("--results", help="merged Allure results folder (default reports/allure-results)")
    p.add_argument("--matrices", help="conformance matrices folder (default reports/matrix)")
    p.set_defaults(func=cmd_nightly)
