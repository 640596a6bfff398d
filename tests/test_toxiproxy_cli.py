"""``failover-harness toxiproxy-server``: foreground run, clean shutdown on SIGINT, clear errors."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from harness.cli import main
from harness.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_foreground_server_answers_and_stops_on_sigint() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from harness.cli import main; "
         "sys.exit(main(['toxiproxy-server', '--port', '0']))"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, line
        url = line.rsplit(" ", 1)[1].strip()
        assert httpx.get(f"{url}/version", timeout=5).json()["version"] == "2.12.0"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_bad_port_and_busy_port(capsys) -> None:
    assert main(["toxiproxy-server", "--port", "70000"]) == 2
    assert "not a TCP port" in capsys.readouterr().err
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        assert main(["toxiproxy-server", "--port", str(busy.getsockname()[1])]) == 3
        assert "address already in use" in capsys.readouterr().err
    finally:
        busy.close()


def test_non_loopback_host_needs_allow_remote(capsys) -> None:
    assert main(["toxiproxy-server", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--allow-remote" in err and "no authentication" in err and err.count("\n") == 1
    assert main(["toxiproxy-server", "--host", "db.example.invalid", "--port", "0"]) == 2
    assert "not an IP address" in capsys.readouterr().err


def test_allow_remote_warning_names_who_can_reach_it() -> None:
    # Checked without binding beyond loopback (tests keep to 127.0.0.1).
    from harness.cli.toxiproxy_cmds import check_host, remote_warning

    check_host("0.0.0.0", allow_remote=True)  # allowed when asked for
    check_host("127.0.0.2", allow_remote=False)  # all of 127/8 is loopback
    wide = remote_warning("0.0.0.0", 8474)
    assert wide.startswith("WARNING") and "any host that can reach this machine" in wide and "8474" in wide
    assert "any host that can reach 192.0.2.7" in remote_warning("192.0.2.7", 1)
    with pytest.raises(ConfigError, match="allow-remote"):
        check_host("::", allow_remote=False)
