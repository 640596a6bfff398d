"""``failover-harness toxiproxy-server``: run the embedded Toxiproxy-compatible server in the
foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from harness.errors import ConfigError, ProxyError
from harness.toxiproxy.limits import is_loopback
from harness.toxiproxy.server import VERSION, ToxiproxyServer, serve_forever

#: A run's state file (harness.topology.run.STATE_FILE; not imported: the server starts light).
STATE_FILE = "state.json"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``toxiproxy-server`` sub-command."""
    p = subparsers.add_parser(
        "toxiproxy-server",
        help="run the embedded Toxiproxy-compatible fault proxy in the foreground",
        description="Run the embedded Toxiproxy 2.12-compatible server (HTTP API v2 plus the "
        "/events connection-event extension) until SIGINT or SIGTERM.")
    p.add_argument("--host", default="127.0.0.1",
                   help="API bind address, an IP address (default 127.0.0.1; another than loopback needs "
                   "--allow-remote)")
    p.add_argument("--port", type=int, default=8474, help="API port (default 8474; 0 = any free port)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host: the API has no authentication (like real Toxiproxy), "
                   "so anyone who reaches it can create proxies on this machine")
    p.add_argument("--run-dir", default=None,
                   help="the run this server serves (set by 'up --detach'): 'down' finds the server by it, "
                   "and the server stops by itself once that run's folder is gone")
    p.set_defaults(func=run_server)


async def watch_run(run_dir: Path, stop: asyncio.Event, every: float = 0.5) -> None:
    """Set ``stop`` once the run's state file is gone (its ``down`` ran, or its ``up`` failed and
    cleaned up): a fault proxy never outlives its run (docs/topology.md, "Bringing a topology up")."""
    while not stop.is_set():
        if not (run_dir / STATE_FILE).exists():
            stop.set()
            return
        await asyncio.sleep(every)


def remote_warning(host: str, port: int) -> str:
    """The warning printed when the API listens beyond loopback: who can then reach it."""
    who = ("any host that can reach this machine on any of its interfaces" if host in ("0.0.0.0", "::")
           else f"any host that can reach {host}")
    return (f"WARNING: the Toxiproxy API listens on {host}:{port} with no authentication: {who} can create, "
            "change and delete proxies and toxics here (and open connections through them)")


def check_host(host: str, allow_remote: bool) -> None:
    """``--host`` must be an IP address; anything but loopback needs ``--allow-remote`` (no API auth)."""
    import ipaddress

    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"--host {host!r} is not an IP address; use e.g. 127.0.0.1") from None
    if not is_loopback(host) and not allow_remote:
        raise ConfigError(f"--host {host} would let other hosts reach the Toxiproxy API, which has no "
                          "authentication; keep the default 127.0.0.1, or add --allow-remote if that is meant")


def run_server(args: argparse.Namespace) -> int:
    """Serve until a signal arrives; returns 0 after a clean shutdown."""
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not a TCP port; use 0..65535")
    check_host(args.host, args.allow_remote)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if args.run_dir:
            watcher = asyncio.ensure_future(watch_run(Path(args.run_dir), stop))
            watcher.add_done_callback(lambda _: None)

        def ready(server: ToxiproxyServer) -> None:
            if not is_loopback(args.host):
                print(remote_warning(args.host, server.port), file=sys.stderr, flush=True)
            host = f"[{args.host}]" if ":" in args.host else args.host
            print(f"toxiproxy-server (failover-harness embedded, API {VERSION}) listening on "
                  f"http://{host}:{server.port}", flush=True)

        await serve_forever(args.host, args.port, stop, ready, allow_remote=args.allow_remote)

    try:
        asyncio.run(main())
    except ProxyError:
        raise
    print("toxiproxy-server stopped", file=sys.stderr, flush=True)
    return 0
