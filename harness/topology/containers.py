"""Cleanup of the Compose backend's containers, volumes and networks by label - the harness's own
reaper (no Ryuk image here): every resource of a run carries ``io.failover-harness.run=<run>`` and
``io.failover-harness.home=<harness home>``, so ``down --run``, ``down --all`` and the reaper remove
those of crashed runs too, and nothing that is not the harness's."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from harness.topology.dockerd import HOME_LABEL, RUN_LABEL


def _client() -> Any | None:
    """An SDK client when an engine could answer here (no wait when there is none), else None."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host and not Path("/var/run/docker.sock").exists():
        return None
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception:  # noqa: BLE001 - no engine, no package: nothing of ours can exist there
        return None
    return client


def _filters(run: str | None, home: str | None) -> dict[str, Any]:
    labels = [f"{RUN_LABEL}={run}" if run else RUN_LABEL]
    if home:
        labels.append(f"{HOME_LABEL}={home}")
    return {"label": labels}


def harness_containers(run: str | None = None, home: str | None = None, all_homes: bool = False) -> list[str]:
    """Names of the harness's containers (of one run, or of one harness home unless ``all_homes``)."""
    client = _client()
    if client is None:
        return []
    try:
        return [c.name for c in client.containers.list(all=True, filters=_filters(run, None if all_homes else home))]
    finally:
        client.close()


def remove_resources(run: str | None = None, home: str | None = None) -> list[str]:
    """Remove every container (forced, with its anonymous volumes), volume and network labelled with
    ``run`` (or, without it, every run of harness ``home``). Returns what was removed."""
    client = _client()
    if client is None:
        return []
    import docker

    removed: list[str] = []
    flt = _filters(run, home)
    try:
        for container in client.containers.list(all=True, filters=flt):
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True, v=True)
                removed.append(f"container {container.name}")
        for volume in client.volumes.list(filters=flt):
            with contextlib.suppress(docker.errors.APIError):
                volume.remove(force=True)
                removed.append(f"volume {volume.name}")
        for network in client.networks.list(filters=flt):
            with contextlib.suppress(docker.errors.APIError):
                network.remove()
                removed.append(f"network {network.name}")
    finally:
        client.close()
    return removed
