"""The thin Docker Compose backend: what can be validated without a Docker engine (the file's
structure, the generated commands) and the clear error where no engine runs. Nothing here starts
containers."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from harness.errors import MissingDependencyError
from harness.topology.compose import compose_command, compose_file, require_docker_engine


def test_pair_compose_file_puts_every_node_behind_toxiproxy():
    spec = yaml.safe_load(compose_file("pg-pair").read_text())
    services = spec["services"]
    assert set(services) == {"toxiproxy", "n1", "n2"}
    assert services["toxiproxy"]["image"] == "ghcr.io/shopify/toxiproxy:2.12.0"
    assert "-host=0.0.0.0" in services["toxiproxy"]["command"]  # TOXIPROXY.md: required in compose
    proxies = json.loads((compose_file("pg-pair").parent / "toxiproxy.json").read_text())
    assert {p["upstream"] for p in proxies} == {"n1:5432", "n2:5432"}
    published = {p.split(":")[1] for p in services["toxiproxy"]["ports"]}
    assert {p["listen"].split(":")[1] for p in proxies} <= published
    assert all(p["listen"].startswith("0.0.0.0:") for p in proxies)
    for node in ("n1", "n2"):  # only the proxy publishes ports: clients reach nodes only through it
        assert "ports" not in services[node]
    assert services["n2"]["depends_on"]["n1"]["condition"] == "service_healthy"


def test_compose_commands():
    cmd = compose_command("pg-pair", "fh-run1")
    assert cmd[:4] == ["docker", "compose", "-p", "fh-run1"] and cmd[-3:] == ["up", "-d", "--wait"]
    assert compose_command("pg-pair", "fh-run1", "down")[-3:] == ["down", "-v", "--remove-orphans"]
    with pytest.raises(MissingDependencyError, match="no compose file"):
        compose_file("pg-ring")


def test_engine_check_matches_this_machine():
    try:
        engine = subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except FileNotFoundError:
        engine = False
    if engine:
        require_docker_engine()
    else:
        with pytest.raises(MissingDependencyError, match="--backend local"):
            require_docker_engine()
