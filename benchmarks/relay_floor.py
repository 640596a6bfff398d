"""The floor any proxy pays on this machine (issue 15): HAProxy (Debian's 2.6) in ``mode tcp`` between
the clients and the principal's server address - bytes relayed by a mature C event loop, with no
PostgreSQL parsing, no session state and no switchover handling. ``benchmarks/persistent.py`` and
``benchmarks/sysbench.py`` measure it beside the persistent proxies in the steady rounds only: it
shows what the extra loopback hop alone costs next to direct, i.e. how far below 1.0x a proxy's
throughput ratio must be here whatever it does. A reference row, never a target of its own."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo

from harness.ports import allocate_port, release_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


class HaproxyTcpRelay:
    """``with HaproxyTcpRelay(server_address, dsn) as relay: relay.dsn()`` - HAProxy relaying TCP to
    ``server_address`` (the principal's, at start) on a port of its own on 127.0.0.1."""

    coordinates = False
    name = "relay-floor"
    #: the benchmarks' line under their tables
    legend = (f"{name} = HAProxy in mode tcp to the principal: bytes relayed in C, no PostgreSQL parsing, no "
              "switchover handling - what the extra hop alone costs here (a reference row, not a target)")

    def __init__(self, server_address: tuple[str, int], dsn: str, pair: Any = None) -> None:
        self.upstream = (str(server_address[0]), int(server_address[1]))
        self._dsn = dsn
        #: the run HAProxy joins (``register_process``), so that the run's teardown stops it even
        #: when the benchmark itself is killed
        self._pair = pair
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @staticmethod
    def available() -> bool:
        """Whether HAProxy is installed (``apt-get install -y haproxy``; scripts/setup.sh lists it)."""
        return Path(HAPROXY).exists()

    @property
    def address(self) -> tuple[str, int]:
        """The relay's listening ``(host, port)``."""
        return ("127.0.0.1", self.port)

    def dsn(self) -> str:
        """The principal's DSN with the relay's host and port."""
        return make_conninfo(self._dsn, host="127.0.0.1", port=str(self.port))

    def start(self) -> HaproxyTcpRelay:
        """Write the configuration, start ``haproxy -db`` and wait until it accepts connections."""
        self._dir = tempfile.TemporaryDirectory(prefix="fh-relay-floor-")
        self.port = allocate_port()
        conf = Path(self._dir.name) / "haproxy.conf"
        conf.write_text("\n".join([
            "global", "    maxconn 1024", "",
            "defaults", "    mode tcp", "    timeout connect 2s", "    timeout client 120s",
            "    timeout server 120s", "",
            "listen relay_floor", f"    bind 127.0.0.1:{self.port}",
            f"    server principal {self.upstream[0]}:{self.upstream[1]}", ""]))
        self._proc = subprocess.Popen([HAPROXY, "-db", "-f", str(conf)], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        self._register(remove=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = (self._proc.stderr.read() if self._proc.stderr else b"").decode(errors="replace").strip()
                self.stop()
                raise RuntimeError(f"haproxy exited at start: {err.splitlines()[-1] if err else 'no output'}")
            try:
                socket.create_connection(self.address, timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"haproxy did not listen on 127.0.0.1:{self.port} within 10 s")

    def stop(self) -> None:
        """Stop HAProxy (terminate, then kill) and remove its folder."""
        if self._proc is not None:
            self._register(remove=True)
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
            if self._proc.stderr:
                self._proc.stderr.close()
            self._proc = None
        if self.port:
            release_port(self.port)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def _register(self, remove: bool) -> None:
        register = getattr(self._pair, "register_process", None)
        if self._proc is not None and register is not None and getattr(self._pair, "run_id", None):
            register(self.name, self._proc.pid, remove=remove)

    def __enter__(self) -> HaproxyTcpRelay:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

