"""HAProxy in front of a Patroni topology (harness/topology/haproxy_front.py), without starting it:
the configuration routes only to the server whose REST API answers ``GET /primary`` 200 (HAM-5),
closes a demoted server's sessions, and listens on loopback only."""

from __future__ import annotations

from pathlib import Path

from harness.topology.haproxy_front import CHECK, check_installed, config_text


def test_config_checks_every_node_on_its_rest_api_with_get_primary() -> None:
    text = config_text(7000, [("n1", "127.0.0.1:6001", 8001), ("n2", "127.0.0.1:6002", 8002)])
    assert "    bind 127.0.0.1:7000\n" in text
    assert "option httpchk GET /primary\n" in text and "http-check expect status 200\n" in text
    assert "server n1 127.0.0.1:6001 check port 8001 addr 127.0.0.1\n" in text
    assert "server n2 127.0.0.1:6002 check port 8002 addr 127.0.0.1\n" in text
    assert f"default-server {CHECK} on-marked-down shutdown-sessions" in text
    assert "mode tcp" in text and "0.0.0.0" not in text and "bind *" not in text
    assert "stats socket" not in text
    with_stats = config_text(7000, [("n1", "127.0.0.1:6001", 8001)], Path("/run/x/haproxy.sock"))
    assert "    stats socket /run/x/haproxy.sock mode 600 level user\n" in with_stats


def test_haproxy_is_installed_here() -> None:
    """The canonical deployment's front is the Debian package the machine has (FACTS: haproxy 2.6)."""
    assert check_installed().endswith("haproxy")


def test_stats_socket_reports_only_the_server_whose_check_answers_200(tmp_path: Path) -> None:
    """A real HAProxy 2.6 with two servers: the check of one answers ``GET /primary`` 200, the other
    503. After the checks ran, :meth:`HAProxyFront.up_servers` names only the first (before they ran,
    HAProxy holds both UP: why ``start`` waits for exactly one)."""
    import http.server
    import subprocess
    import threading
    import time

    from harness.ports import allocate_port
    from harness.topology.haproxy_front import HAProxyFront

    def api(code: int) -> http.server.ThreadingHTTPServer:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
                self.send_response(code if self.path == "/primary" else 404)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    leader, replica = api(200), api(503)
    sock = tmp_path / "haproxy.sock"
    conf = tmp_path / "haproxy.cfg"
    conf.write_text(config_text(allocate_port(), [("n1", "127.0.0.1:9", leader.server_address[1]),
                                                  ("n2", "127.0.0.1:9", replica.server_address[1])], sock))
    proc = subprocess.Popen([check_installed(), "-db", "-f", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        front = HAProxyFront(cluster=None)
        front.stats_socket = sock
        deadline = time.monotonic() + 15
        while front.up_servers() != ["n1"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert front.up_servers() == ["n1"]
    finally:
        proc.kill()
        proc.wait(timeout=10)
        leader.shutdown()
        replica.shutdown()
    assert HAProxyFront(cluster=None).up_servers() is None  # no socket: None, not "nothing is up"
