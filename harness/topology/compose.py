"""Docker Compose backend - **planned, not built**. The compose files under ``compose/`` are drafts
that have never started (see the Compose backend issue); :class:`ComposeBackend` therefore refuses
every run with a one-line reason, so ``--backend compose`` never runs local processes under that
name. The helpers below build what can be validated without an engine: the file and commands, and
whether an engine answers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, NoReturn

from harness.errors import ConfigError, MissingDependencyError
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
    raise ConfigError(f"unknown compose action {action!r}; use up or down")


def docker_engine_answers() -> bool:
    """True when a Docker engine answers ``docker info`` (the client alone is not enough)."""
    if shutil.which("docker") is None:
        return False
    try:
        res = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0 and bool(res.stdout.strip())


class ComposeBackend:
    """``--backend compose``: refuses with the reason until the Compose backend is built."""

    name = "compose"

    def check(self, engine: Any) -> NoReturn:
        """Always a ConfigError: the backend is not built; says whether a Docker engine is here."""
        engine_note = ("a Docker engine answers here" if docker_engine_answers()
                       else "and no Docker engine answers here either")
        raise ConfigError(f"backend 'compose' is not available: the Docker Compose backend is not built yet "
                          f"(planned; {engine_note}); use --backend local")

    def build(self, engine: Any, nodes: int, **kwargs: Any) -> NoReturn:
        """Never builds (see :meth:`check`)."""
        self.check(engine)
