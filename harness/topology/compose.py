"""Docker Compose backend (thin). No Docker engine runs on the project's own machines, so this
module only builds what can be validated without one - the compose project name, the file and the
commands - and checks for an engine with a clear error. Nothing here is reported as tested against
a running engine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.errors import MissingDependencyError
from harness.paths import repo_root

COMPOSE_FILES = {"pg-pair": "pg-pair.yml"}


def compose_file(topology: str) -> Path:
    """The compose file of a topology (``compose/<name>.yml``)."""
    if topology not in COMPOSE_FILES:
        raise MissingDependencyError(f"no compose file for topology {topology!r}; have {', '.join(COMPOSE_FILES)}")
    return repo_root() / "compose" / COMPOSE_FILES[topology]


def compose_command(topology: str, project: str, action: str = "up") -> list[str]:
    """The ``docker compose`` command line for ``up`` (detached, waiting for health) or ``down``."""
    base = ["docker", "compose", "-p", project, "-f", str(compose_file(topology))]
    if action == "up":
        return [*base, "up", "-d", "--wait"]
    if action == "down":
        return [*base, "down", "-v", "--remove-orphans"]
    raise ValueError(f"unknown compose action {action!r}")


def require_docker_engine() -> None:
    """Raise MissingDependencyError unless a Docker engine answers (the client alone is not enough)."""
    if shutil.which("docker") is None:
        raise MissingDependencyError("--backend compose needs Docker with the compose plugin; none is installed. "
                                     "Use --backend local (real PostgreSQL processes on this machine)")
    res = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                         timeout=20)
    if res.returncode != 0 or not res.stdout.strip():
        raise MissingDependencyError("--backend compose needs a running Docker engine; the docker client is "
                                     "here but no engine answers ('docker info' failed). Use --backend local")
