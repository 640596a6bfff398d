"""The planned Docker Compose backend: what can be validated without building it (the draft file's
structure, the generated commands) and the one-line refusal of ``--backend compose``. Nothing here
starts containers."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.errors import ConfigError, MissingDependencyError
from harness.topology.compose import compose_command, compose_file, docker_engine_answers


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


def test_compose_backend_refuses_in_one_line_and_never_falls_back():
    """Until the Compose backend is built, --backend compose is a ConfigError naming the reason (and
    whether an engine answers here) - never local processes reported under that name."""
    from harness.topology.backend import resolve

    with pytest.raises(ConfigError) as err:
        resolve("compose", "postgres")
    message = str(err.value)
    assert "\n" not in message and "not available" in message and "--backend local" in message
    assert ("a Docker engine answers here" in message) == docker_engine_answers()
