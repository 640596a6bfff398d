"""HAProxy in front of a Patroni topology (harness/topology/haproxy_front.py), without starting it:
the configuration routes only to the server whose REST API answers ``GET /primary`` 200 (HAM-5),
closes a demoted server's sessions, and listens on loopback only."""

from __future__ import annotations

from harness.topology.haproxy_front import CHECK, check_installed, config_text


def test_config_checks_every_node_on_its_rest_api_with_get_primary() -> None:
    text = config_text(7000, [("n1", "127.0.0.1:6001", 8001), ("n2", "127.0.0.1:6002", 8002)])
    assert "    bind 127.0.0.1:7000\n" in text
    assert "option httpchk GET /primary\n" in text and "http-check expect status 200\n" in text
    assert "server n1 127.0.0.1:6001 check port 8001 addr 127.0.0.1\n" in text
    assert "server n2 127.0.0.1:6002 check port 8002 addr 127.0.0.1\n" in text
    assert f"default-server {CHECK} on-marked-down shutdown-sessions" in text
    assert "mode tcp" in text and "0.0.0.0" not in text and "bind *" not in text


def test_haproxy_is_installed_here() -> None:
    """The canonical deployment's front is the Debian package the machine has (FACTS: haproxy 2.6)."""
    assert check_installed().endswith("haproxy")
