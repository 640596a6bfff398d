"""``--backend compose`` as a :class:`~harness.topology.backend.Backend`: checks that the engine, Compose
v2 and the images are there, builds the engine's pair or group of containers (PostgreSQL:
:mod:`harness.topology.compose`; MariaDB: :mod:`harness.topology.compose_mariadb`), and attaches to a
running compose run. Every refusal is the capability table's line (:mod:`harness.topology.capabilities`,
docs/compose.md "Capabilities: what runs where")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.errors import ConfigError
from harness.topology.capabilities import engine_refusal, refusal
from harness.topology.compose import ComposeGroup, ComposePair, ComposeTopology
from harness.topology.compose_mariadb import ComposeMariaDBGroup, ComposeMariaDBPair
from harness.topology.compose_setup import compose_version
from harness.topology.dockerd import docker_client, engine_answers
from harness.topology.engine import Engine
from harness.topology.images import ENGINE_IMAGES, image_for
from harness.topology.links import Links
from harness.topology.run import load_state, run_path

#: The pair and group classes of each database engine on compose.
TOPOLOGY_CLASSES: dict[str, tuple[type[ComposeTopology], type[ComposeTopology]]] = {
    "postgres": (ComposePair, ComposeGroup),
    "mariadb": (ComposeMariaDBPair, ComposeMariaDBGroup),
}


def topology_classes(engine: str) -> tuple[type[ComposeTopology], type[ComposeTopology]]:
    """The pair and group classes of the compose backend for database engine ``engine``."""
    if engine not in TOPOLOGY_CLASSES:
        raise ConfigError(f"backend 'compose': no topology for engine {engine!r}; have {', '.join(TOPOLOGY_CLASSES)}")
    return TOPOLOGY_CLASSES[engine]


def attach(run_id: str, history: Any = None) -> ComposeTopology:
    """Drive an existing compose run (``up --detach``, another process) from this one, as its engine's
    pair or group class."""
    state = load_state(run_path(run_id))
    pair, group = topology_classes(state.engine or "postgres")
    return (pair if len(state.nodes) == 2 else group).attach(run_id, history=history)


class ComposeBackend:
    """``--backend compose``: PostgreSQL or MariaDB containers behind the real Toxiproxy (module docstring)."""

    name = "compose"

    def check(self, engine: Engine) -> None:
        """A one-line ConfigError naming the fix when the capability table refuses the engine, or no
        Docker engine answers (none was started: ``failover-harness compose-setup`` starts one), or
        Compose v2 is missing; a MissingDependencyError when an image is missing."""
        why = engine_refusal(self.name, engine.name)
        if why is not None:
            raise ConfigError(f"backend 'compose', engine {engine.name!r}: {why}")
        if not engine_answers():
            raise ConfigError("backend 'compose': no Docker engine answers here; run "
                              "'failover-harness compose-setup' (starts one), or use --backend local")
        if compose_version() is None:
            raise ConfigError("backend 'compose': Compose v2 ('docker compose') is missing; run "
                              "'failover-harness compose-setup', or use --backend local")
        client = docker_client()
        try:
            for spec in ENGINE_IMAGES[engine.name]:
                image_for(spec, client)
        finally:
            client.close()

    def build(self, engine: Engine, nodes: int, *, mode: str = "sync", mirror_readable: bool = False,
              history: Any = None, links: Links | str = "proxy", detached: bool = False,
              progress: Callable[[str], None] | None = None) -> ComposeTopology:
        """The engine's pair (two nodes) or group (three) of containers; ConfigError (the capability
        table's line) for an engine or node count it cannot run."""
        why = engine_refusal(self.name, engine.name)
        if why is not None:
            raise ConfigError(f"backend 'compose', engine {engine.name!r}: {why}")
        if isinstance(nodes, int) and nodes > 3:
            raise ConfigError(f"backend 'compose', {nodes} nodes: {refusal(self.name, 'group of N > 3')}, "
                              "or use --backend local")
        kwargs: dict[str, Any] = {"mode": mode, "mirror_readable": mirror_readable, "history": history,
                                  "links": links, "detached": detached, "progress": progress, "engine": engine}
        pair, group = topology_classes(engine.name)
        return pair(**kwargs) if nodes == 2 else group(nodes=nodes, **kwargs)
