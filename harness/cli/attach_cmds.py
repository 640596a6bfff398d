"""Clients attached to a run from the command line (RULEBOOK PER-1, PER-4): what
``persistent-proxy --run ID`` and ``pgbouncer --run ID --mode transaction|session`` share.

An attached client is a foreground process registered in the run state (``EndpointRecord``: name,
kind, listen, admin, dsn without a password) so that ``status --run ID --json`` lists it under
``persistent_proxies``, ``fault --run ID switchover`` drains and resumes it (``fault failover``
re-points it), and ``down`` stops it. Its back end is the nodes' *server* addresses by default (the
application's path, not a fault-proxied one); ``--via client`` puts the fault proxy in between."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from typing import Any

from harness.errors import ConfigError, HarnessError
from harness.topology import LocalTopology
from harness.topology.run import live_endpoints, record_endpoint
from harness.topology.state import EndpointRecord

VIA = ("server", "client")
# what an attached client's start-up line says about its back end
VIA_TEXT = {"server": "the nodes' server addresses (direct; the fault proxy is not in between)",
            "client": "the nodes' client addresses (through the fault proxy)"}


class RunBackend:
    """The nodes of run ``run_id`` as a back end: their addresses, the current principal (re-read from
    the run state on every call, so a switchover or failover made by another process is seen), the
    test login (PER-1: the proxy logs in with it)."""

    def __init__(self, run_id: str, via: str = "server") -> None:
        if via not in VIA:
            raise ConfigError(f"--via must be one of {', '.join(VIA)}, not {via!r}")
        self.run_id = run_id
        self.via = via
        self.topo = LocalTopology.attach(run_id)
        self.credentials = self.topo.engine.credentials

    def _address(self, node: Any) -> tuple[str, int]:
        return tuple(node.server_address if self.via == "server" else node.client_address)  # type: ignore[return-value]

    def addresses(self) -> list[tuple[str, int]]:
        """Every node's address on the chosen path."""
        return [self._address(n) for n in self.topo.nodes]

    def addresses_now(self) -> list[tuple[str, int]]:
        """Every node's address on the chosen path, from the run state as it is now (the admin
        ``/resume`` allow-list, PER-9: a node added by 'fault add-node' is a node of the run, a
        removed one no longer; nothing else ever is)."""
        self.topo.refresh()
        return self.addresses()

    def principal(self) -> tuple[str, int]:
        """The current principal's address, from the run state as it is now (PER-1 resolver)."""
        self.topo.refresh()
        return self._address(self.topo.principal)

    def readonly(self) -> list[tuple[str, int, str]]:
        """The running standbys as ``(host, port, name)``, from the run state as it is now (PER-9/10
        read-only routing: a node added by 'fault add-node' is picked up, a removed one is gone; the
        name - never reused in a run - lets a node added at a removed node's address be routed to)."""
        self.topo.refresh()
        return [(*self._address(n), n.name) for n in self.topo.standbys if n.state == "running"]

    def dsn(self, address: tuple[str, int]) -> str:
        """A connection string for ``address`` as it may be printed: the password file, not the password."""
        c = self.credentials
        secret = f"passfile={c.passfile}" if c.passfile else "password=***"
        return f"host={address[0]} port={address[1]} dbname={c.database} user={c.user} {secret}"

    def describe_backend(self) -> str:
        """The start-up line's words for the back end (addresses included)."""
        return VIA_TEXT[self.via] + ": " + ", ".join(f"{h}:{p}" for h, p in self.addresses())

    def attach(self, record: EndpointRecord) -> None:
        """Register ``record`` in the run state (status lists it, faults coordinate it, down stops it)."""
        record_endpoint(self.topo.path, record)

    def detach(self, record: EndpointRecord) -> None:
        """Forget ``record`` (the run may already be gone: then nothing is left to forget)."""
        with contextlib.suppress(OSError, HarnessError, ValueError):
            if self.topo.path.is_dir():
                record_endpoint(self.topo.path, record, remove=True)


def endpoints_of(topo: Any) -> list[EndpointRecord]:
    """The attached clients of ``topo``'s run whose process is alive."""
    return live_endpoints(topo.path)


def coordinate_run(faults: Any, topo: Any) -> list[Any]:
    """Register a coordinator for every attached client of the run with ``faults`` (PER-1/PER-4)."""
    from harness.clients.persistent.attached import coordinators_for

    coordinators = coordinators_for(topo, endpoints_of(topo))
    for c in coordinators:
        faults.coordinate(c)
    return coordinators


def repoint_run(topo: Any) -> list[Any]:
    """After an unplanned failover: tell every attached client where the principal is now (a proxy
    finds it by itself and answers ``resumed: 0``; pgbouncer is re-pointed and reloaded)."""
    from harness.clients.persistent.attached import coordinators_for

    topo.refresh()
    address = tuple(topo.principal.client_address)
    return [c.after_switchover(address) for c in coordinators_for(topo, endpoints_of(topo))]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``pgbouncer`` sub-command."""
    p = subparsers.add_parser(
        "pgbouncer", help="run PgBouncer 1.18 in front of a run, coordinated by its switchovers",
        description="Start real PgBouncer (session or transaction pooling) in front of run ID, registered in "
        "the run: 'status --run ID' lists it, 'fault --run ID switchover' pauses, re-points and resumes it, "
        "'down' stops it. Serves until SIGINT/SIGTERM.")
    p.add_argument("--run", required=True, help="the run to front (as 'up' printed it)")
    p.add_argument("--mode", choices=["transaction", "session"], default="transaction",
                   help="pool mode (default %(default)s)")
    p.add_argument("--via", choices=VIA, default="server",
                   help="reach the nodes at their server addresses (default) or through the fault proxy")
    p.add_argument("--name", default=None, help="name in the run state (default pgbouncer-MODE-PORT)")
    p.add_argument("--drain-window", type=float, default=60.0, help="how long PAUSE may take, s (default 60)")
    p.set_defaults(func=run_pgbouncer)


def wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def run_pgbouncer(args: argparse.Namespace) -> int:
    """Start pgbouncer in front of the run, register it, print one JSON line, serve until a signal."""
    from harness.clients.persistent.pgbouncer import PgBouncerClient

    backend = RunBackend(args.run, args.via)
    if args.drain_window <= 0:
        raise ConfigError("--drain-window must be > 0 seconds")
    client = PgBouncerClient(backend.topo, pool_mode=args.mode, drain_window=args.drain_window,
                             via_fault_proxy=args.via == "client")
    # stop pgbouncer on SIGTERM even during the start
    signal.signal(signal.SIGTERM, _interrupt)
    record: EndpointRecord | None = None
    try:
        address = client.start()
        name = args.name or f"{client.name}-{address[1]}"
        record = EndpointRecord(name=name, kind=client.name, listen=f"{address[0]}:{address[1]}",
                                dsn=backend.dsn(address), pid=os.getpid(), admin=f"{address[0]}:{address[1]}",
                                dir=str(client.dir), mode=args.mode, backend=args.via)
        backend.attach(record)
        print(json.dumps({"name": name, "kind": client.name, "listen": record.listen, "run": args.run,
                          "backend": args.via, "dsn": record.dsn}), flush=True)
        print(f"pgbouncer: {name} ({client.version}, pool_mode={args.mode}) on {record.listen}; back end: "
              f"{backend.describe_backend()}", file=sys.stderr, flush=True)
        wait_for_signal()
    except KeyboardInterrupt:
        pass
    finally:
        if record is not None:
            backend.detach(record)
        client.stop()
    print("pgbouncer stopped", file=sys.stderr)
    return 0
