"""The floor any proxy pays on this machine, two relays with no PostgreSQL parsing, no
session state and no switchover handling between the clients and the principal's server address:

* :class:`HaproxyTcpRelay` - HAProxy (Debian's 2.6) in ``mode tcp``: bytes relayed by a mature C
  event loop;
* :class:`PythonTcpRelay` - the persistent proxy's own machinery with nothing on top: one thread of
  this process, the same event loop (uvloop), one callback and one write per chunk each way. The
  reference proxy's ratio below this row is the cost of its parsing and session tracking; this
  row's below 1.0x is the hop's.

``benchmarks/persistent.py`` and ``benchmarks/sysbench.py`` measure them beside the persistent proxies
in the steady rounds only: they show what the extra loopback hop alone costs next to direct, i.e. how
far below 1.0x a proxy's throughput ratio must be here whatever it does. Reference rows, never
targets of their own."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo

from harness.persistproxy.loop import start_loop_thread
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



class _Side(asyncio.Protocol):
    """One end of a relayed connection: what it receives is written to its peer's transport."""

    def __init__(self, relay: PythonTcpRelay, peer: _Side | None = None) -> None:
        self.relay = relay
        self.peer = peer
        self.transport: Any = None
        self.early: list[bytes] = []  # client bytes that came before the server connection was up

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.relay.open.add(transport)
        if self.peer is None:  # a client connection: open its server side
            asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, back = await loop.create_connection(lambda: _Side(self.relay, self), *self.relay.upstream)
        except OSError:
            self.transport.close()
            return
        self.peer = back
        for chunk in self.early:
            back.transport.write(chunk)
        self.early.clear()

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.early.append(data)
        else:
            peer.transport.write(data)

    def pause_writing(self) -> None:  # this side's send buffer is full: stop reading the other
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.relay.open.discard(self.transport)
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class PythonTcpRelay:
    """``with PythonTcpRelay(server_address) as relay: relay.address`` - a relay in a thread of this
    process on the persistent proxy's event loop (:func:`harness.persistproxy.loop.new_loop`), one
    callback and one write per chunk each way and nothing else: the hop's cost to a proxy built like
    the reference one, without its parsing and session tracking."""

    coordinates = False
    name = "relay-floor-py"
    legend = (f"{name} = a relay in this process on the reference proxy's event loop with nothing else: one "
              "callback and one write per chunk each way, no parsing - the reference row's distance to it is the "
              "cost of its PostgreSQL parsing and session tracking")

    def __init__(self, server_address: tuple[str, int], dsn: str = "", pair: Any = None) -> None:
        self.upstream = (str(server_address[0]), int(server_address[1]))
        self._dsn = dsn
        self.port = 0
        self.open: set[Any] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def available() -> bool:
        """Always: it needs nothing the proxy does not."""
        return True

    @property
    def address(self) -> tuple[str, int]:
        """The relay's listening ``(host, port)``."""
        return ("127.0.0.1", self.port)

    def dsn(self) -> str:
        """The principal's DSN with the relay's host and port."""
        return make_conninfo(self._dsn, host="127.0.0.1", port=str(self.port))

    def start(self) -> PythonTcpRelay:
        """Start the loop thread and listen on a free port of 127.0.0.1."""

        def setup(loop: asyncio.AbstractEventLoop) -> None:
            self._server = loop.run_until_complete(loop.create_server(lambda: _Side(self), "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]

        self._loop, self._thread = start_loop_thread(self.name, setup, timeout=10)
        return self

    def stop(self) -> None:
        """Close the listener and every relayed connection, then end the loop thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        def shut() -> None:
            if self._server is not None:
                self._server.close()
            for transport in list(self.open):
                transport.abort()
            loop.stop()

        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(shut)
        thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> PythonTcpRelay:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
