"""``failover-harness toxiproxy-server``: run the embedded Toxiproxy-compatible server in the
foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from harness.errors import ConfigError, ProxyError
from harness.toxiproxy.server import VERSION, ToxiproxyServer, serve_forever


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``toxiproxy-server`` sub-command."""
    p = subparsers.add_parser(
        "toxiproxy-server",
        help="run the embedded Toxiproxy-compatible fault proxy in the foreground",
        description="Run the embedded Toxiproxy 2.12-compatible server (HTTP API v2 plus the "
        "/events connection-event extension) until SIGINT or SIGTERM.")
    p.add_argument("--host", default="127.0.0.1", help="API bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8474, help="API port (default 8474; 0 = any free port)")
    p.set_defaults(func=run_server)


def run_server(args: argparse.Namespace) -> int:
    """Serve until a signal arrives; returns 0 after a clean shutdown."""
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not a TCP port; use 0..65535")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready(server: ToxiproxyServer) -> None:
            print(f"toxiproxy-server (failover-harness embedded, API {VERSION}) listening on "
                  f"http://{args.host}:{server.port}", flush=True)

        await serve_forever(args.host, args.port, stop, ready)

    try:
        asyncio.run(main())
    except ProxyError:
        raise
    print("toxiproxy-server stopped", file=sys.stderr, flush=True)
    return 0
