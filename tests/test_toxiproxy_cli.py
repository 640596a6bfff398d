"""``failover-harness toxiproxy-server``: foreground run, clean shutdown on SIGINT, clear errors."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from harness.cli import main

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
