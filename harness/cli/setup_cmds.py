"""``failover-harness setup`` and ``failover-harness doctor``: the set-up of an installed harness.

``setup`` installs what the harness runs besides Python, idempotently, one progress line per step:
the system packages (with apt when root, else it prints the exact command and goes on), then the
Allure command line and the pinned Node drivers with ``npm ci`` into the tools folder
(:func:`harness.paths.tools_home`, never into the installed package). ``doctor`` lists every
dependency as present or missing with the one command that installs it, and exits 0 only when the
chosen backend can run here. The Compose backend's own set-up (engine, Compose v2, images) is
``failover-harness compose-setup``."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from harness.cli import deps
from harness.errors import HarnessError, MissingDependencyError
from harness.paths import tools_home
from harness.resources import resource

#: npm folders the set-up installs: (resource with the manifests, folder under the tools home, what)
NPM_TOOLS = (("tools", ".", "the Allure command line"), ("node", "drivers/node", "the Node drivers (pg, postgres)"))


def _lock_digest(folder: Path) -> str:
    return hashlib.sha256((folder / "package-lock.json").read_bytes()).hexdigest()


def install_npm_tool(name: str, sub: str, what: str) -> bool:
    """``npm ci`` of the shipped manifests of ``name`` into ``<tools home>/<sub>`` unless the same lock
    file is installed there already (a stamp holds its digest). False when npm is missing."""
    source, target = resource(name), (tools_home() / sub).resolve()
    stamp = target / "node_modules" / ".failover-harness-installed"
    digest = _lock_digest(source)
    if stamp.is_file() and stamp.read_text().strip() == digest:
        deps.say(f"{what}: present in {target}")
        return True
    npm = shutil.which("npm")
    if npm is None:
        deps.say(f"{what}: npm is missing ({deps.apt_command(['npm'])}), not installed")
        return False
    deps.say(f"{what}: npm ci in {target}")
    target.mkdir(parents=True, exist_ok=True)
    for manifest in ("package.json", "package-lock.json"):
        if (target / manifest).resolve() != (source / manifest).resolve():  # a checkout's tools/ is both
            shutil.copyfile(source / manifest, target / manifest)
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=target, check=True,
                   stdout=subprocess.DEVNULL)
    stamp.write_text(digest + "\n")
    return True


def cmd_setup(args: argparse.Namespace) -> int:
    """Install what is missing; exit 1 when something could not be installed here (what to run is
    printed), else 0."""
    ok = True
    if not args.skip_system:
        ok = deps.install_system(deps.missing_packages()) and ok
    if not args.skip_npm:
        for name, sub, what in NPM_TOOLS:
            ok = install_npm_tool(name, sub, what) and ok
    deps.say("done: see what is present with `failover-harness doctor`" if ok else
             "not complete: run the commands above, then `failover-harness setup` again")
    return 0 if ok else 1


def _row(present: bool, name: str, detail: str) -> str:
    return f"  {'present' if present else 'MISSING':8} {name:26} {detail}"


def _system_rows() -> list[str]:
    rows = []
    for dep in (*deps.SYSTEM, deps.python_headers()):
        where = dep.found()
        if where:
            rows.append(_row(True, dep.name, dep.version() or where))
        else:
            rows.append(_row(False, dep.name, f"for {dep.needed_by}; install: {deps.apt_command([dep.package or ''])}"))
    return rows


def _tool_rows() -> list[str]:
    from harness.clients.lpq.node import node_modules_candidates
    from harness.report.builder import allure_candidates

    rows = []
    allure = next((p for p in allure_candidates() if p.exists() and os.access(p, os.X_OK)), None)
    rows.append(_row(allure is not None, "Allure command line", str(allure) if allure else
                     f"for `failover-harness report`; install: failover-harness setup (into {tools_home()})"))
    drivers = next((p for p in node_modules_candidates() if (p / "pg").is_dir() and (p / "postgres").is_dir()), None)
    rows.append(_row(drivers is not None, "Node drivers", str(drivers) if drivers else
                     "for node-pg / postgres-js clients; install: failover-harness setup"))
    return rows


def _compose_rows() -> list[str]:
    from harness.topology.compose_setup import compose_version
    from harness.topology.dockerd import engine_answers
    from harness.topology.images import toxiproxy_dir

    fix = "install: failover-harness compose-setup (as root)"
    docker = shutil.which("docker")
    answers = docker is not None and engine_answers(timeout=5)
    rows = [_row(docker is not None, "Docker CLI", docker or f"for --backend compose; {fix}"),
            _row(answers, "Docker engine", "answers" if answers else f"for --backend compose; {fix}")]
    version = compose_version() if docker else None
    rows.append(_row(version is not None, "Compose v2", version or f"for --backend compose; {fix}"))
    binary = os.environ.get("TOXIPROXY_SERVER_BIN") or shutil.which("toxiproxy-server")
    folder = toxiproxy_dir() / "toxiproxy-server"
    real = binary or (str(folder) if folder.is_file() else None)
    rows.append(_row(real is not None, "real Toxiproxy 2.12", real or
                     "for --backend compose and the comparison with the embedded server; put toxiproxy-server and "
                     "toxiproxy-cli in a folder named by FAILOVER_HARNESS_TOXIPROXY_DIR (or TOXIPROXY_SERVER_BIN)"))
    return rows


def cmd_doctor(args: argparse.Namespace) -> int:
    """List every dependency; exit 0 only when ``--backend`` with ``--engine`` can run here."""
    from harness.topology import get_backend, get_engine

    print("system packages:")
    print("\n".join(_system_rows()))
    print(f"tools (installed by failover-harness setup into {tools_home()}):")
    print("\n".join(_tool_rows()))
    print("compose backend:")
    print("\n".join(_compose_rows()))
    try:
        get_backend(args.backend).check(get_engine(args.engine))
    except (HarnessError, MissingDependencyError) as exc:
        print(f"backend {args.backend} (engine {args.engine}): CANNOT run here: {exc}")
        return 1
    print(f"backend {args.backend} (engine {args.engine}): can run here")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``setup`` and ``doctor``."""
    p = sub.add_parser("setup", help="install what the harness needs besides Python: system packages (apt, as "
                                     "root; else the command to run), the Allure command line and the Node drivers")
    p.add_argument("--skip-system", action="store_true", help="leave the system packages alone")
    p.add_argument("--skip-npm", action="store_true", help="leave the npm tools alone")
    p.set_defaults(func=cmd_setup)
    d = sub.add_parser("doctor", help="list every dependency (present / missing, with the command that installs "
                                      "it); exit 0 only when the chosen backend can run here")
    d.add_argument("--backend", default="local", choices=["local", "compose"])
    d.add_argument("--engine", default="postgres", choices=["postgres", "mariadb"])
    d.set_defaults(func=cmd_doctor)
