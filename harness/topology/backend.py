"""The *backend* seam: where the nodes of a topology run. A :class:`Backend` builds topologies of an
:class:`~harness.topology.engine.Engine`; :func:`resolve` turns ``--backend`` / ``--engine`` into the
pair, or a one-line ConfigError (before any test runs) when the combination is not available -
never a silent fallback to another backend.

* ``local`` - real server processes on this machine (:mod:`harness.topology.local`);
* ``compose`` - PostgreSQL containers of a Docker Compose project behind the real Toxiproxy
  (:mod:`harness.topology.compose`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from harness.errors import ConfigError
from harness.topology import compose_backend
from harness.topology.api import Topology
from harness.topology.compose_backend import ComposeBackend
from harness.topology.engine import Engine
from harness.topology.links import Links
from harness.topology.local import LocalGroup, LocalPair, LocalTopology
from harness.topology.mariadb import MariaDBEngine
from harness.topology.postgres import PostgresEngine
from harness.topology.run import load_state, run_path

#: Engines named by ``--engine`` that are not built yet, and where they are planned.
PLANNED_ENGINES: dict[str, str] = {}
ENGINES: dict[str, Callable[[], Engine]] = {"postgres": PostgresEngine, "mariadb": MariaDBEngine}


class Backend(Protocol):
    """Builds topologies of an engine somewhere (local processes, containers)."""

    name: str

    def check(self, engine: Engine) -> None:
        """Raise a ConfigError / MissingDependencyError saying why this backend cannot run ``engine``
        here (called once, before any test)."""

    def build(self, engine: Engine, nodes: int, *, mode: str = "sync", mirror_readable: bool = False,
              history: Any = None, links: Links | str = "proxy", detached: bool = False,
              progress: Callable[[str], None] | None = None) -> Topology:
        """A not-yet-started topology of ``nodes`` nodes (a Pair for two, a Group for more)."""


class LocalBackend:
    """Real database server processes on this machine (the default)."""

    name = "local"

    def check(self, engine: Engine) -> None:
        """The engine's binaries must be installed (MissingDependencyError naming the package)."""
        engine.server_version()

    def build(self, engine: Engine, nodes: int, *, mode: str = "sync", mirror_readable: bool = False,
              history: Any = None, links: Links | str = "proxy", detached: bool = False,
              progress: Callable[[str], None] | None = None) -> Topology:
        """A :class:`LocalPair` (two nodes) or :class:`LocalGroup`."""
        kwargs: dict[str, Any] = {"mode": mode, "mirror_readable": mirror_readable, "history": history,
                                  "links": links, "detached": detached, "progress": progress, "engine": engine}
        if nodes == 2:
            return LocalPair(**kwargs)
        return LocalGroup(nodes=nodes, **kwargs)


BACKENDS: dict[str, Callable[[], Backend]] = {"local": LocalBackend, "compose": ComposeBackend}


def engine_names() -> list[str]:
    """Every ``--engine`` value, built or planned."""
    return [*ENGINES, *PLANNED_ENGINES]


def get_engine(name: str) -> Engine:
    """The engine called ``name``; a ConfigError that says what exists when it is planned or unknown."""
    if name in ENGINES:
        return ENGINES[name]()
    if name in PLANNED_ENGINES:
        raise ConfigError(f"engine {name!r} is not available: {PLANNED_ENGINES[name]}; use --engine postgres")
    raise ConfigError(f"unknown engine {name!r}; use one of {', '.join(engine_names())}")


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (ConfigError listing the backends otherwise)."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}")
    return BACKENDS[name]()


def resolve(backend: str, engine: str) -> tuple[Backend, Engine]:
    """The backend and engine a run asked for, checked: a ConfigError or MissingDependencyError
    naming what is missing and the fix when they cannot run here."""
    be, en = get_backend(backend), get_engine(engine)
    be.check(en)
    return be, en


def attach(run_id: str, history: Any = None) -> Topology:
    """Drive an existing run from this process, on the backend that started it (``fault``,
    ``status``)."""
    state = load_state(run_path(run_id))
    if state.backend == "compose":
        return compose_backend.attach(run_id, history=history)
    return LocalTopology.attach(run_id, history=history)
