"""``failover-harness persistent-proxy``: run the reference persistent-connection proxy (PER-1..8)
in the foreground until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

from harness.errors import ConfigError


def _address(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"{what} must be HOST:PORT (e.g. 127.0.0.1:5432), not {text!r}")
    return host.strip("[]"), int(port)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``persistent-proxy`` sub-command."""
    p = subparsers.add_parser(
        "persistent-proxy",
        help="run the reference persistent-connection proxy (PolarProxy PER-1..8) for PostgreSQL",
        description="A PostgreSQL wire-protocol proxy that keeps client sessions open across a "
        "switchover of the principal and replays their state (RULEBOOK PER-1..PER-8). "
        "Admin API: GET /status, POST /drain, POST /resume (docs/persistent-proxy.md).")
    p.add_argument("--listen", default="127.0.0.1:0",
                   help="HOST:PORT to accept clients on (default %(default)s)")
    p.add_argument("--backend", action="append", required=True, metavar="HOST:PORT",
                   help="candidate server; repeat for a pair (the principal is the one not in recovery)")
    p.add_argument("--user", required=True, help="role the proxy logs in with on the principal")
    p.add_argument("--password", default=None, help="password of --user (also asked of front clients)")
    p.add_argument("--front-auth", choices=["scram", "password", "trust"], default="scram",
                   help="how front clients authenticate (default %(default)s)")
    p.add_argument("--admin", default=None, metavar="127.0.0.1:PORT", help="serve the HTTP admin API here")
    p.add_argument("--drain-window", type=float, default=60.0, help="PER-4 drain window, s (default 60)")
    p.add_argument("--recovery-window", type=float, default=60.0,
                   help="PER-3 recovery window, s (default 60)")
    p.add_argument("--probe-database", default="postgres", help="database for principal probes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Start the proxy (and admin API), print one JSON line with the addresses, serve until SIGINT/SIGTERM."""
    from harness.persistproxy import AdminServer, PersistentProxy, ProxyConfig

    listen = _address(args.listen, "--listen")
    backends = [_address(b, "--backend") for b in args.backend]
    admin = _address(args.admin, "--admin") if args.admin else None
    if admin and admin[0] not in ("127.0.0.1", "localhost", "::1"):
        raise ConfigError("--admin must bind to the loopback (127.0.0.1:PORT)")
    if args.drain_window < 0 or args.recovery_window < 0:
        raise ConfigError("--drain-window and --recovery-window must be >= 0")
    config = ProxyConfig(user=args.user, password=args.password, listen=listen, candidates=backends,
                         front_auth=args.front_auth, drain_window=args.drain_window,
                         recovery_window=args.recovery_window, database=args.probe_database)

    async def main() -> None:
        proxy = PersistentProxy(config)
        try:
            address = await proxy.start()
        except OSError as exc:
            raise ConfigError(f"cannot listen on {args.listen}: {exc}") from exc
        admin_server = None
        info = {"listen": f"{address[0]}:{address[1]}", "admin": None}
        if admin:
            admin_server = AdminServer(proxy, *admin)
            a = await admin_server.start()
            info["admin"] = f"{a[0]}:{a[1]}"
        print(json.dumps(info), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        if admin_server is not None:
            await admin_server.stop()
        await proxy.stop()

    asyncio.run(main())
    print("persistent-proxy stopped", file=sys.stderr)
    return 0
