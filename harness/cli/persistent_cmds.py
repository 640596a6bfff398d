"""``failover-harness persistent-proxy``: run the reference persistent-connection proxy (PER-1..8)
in the foreground until interrupted.

Secrets stay out of argv and stdout (harness.redact): the back-side password comes from ``PGPASSWORD`` or
a 0600 file (``--password-file``), never from ``--password``; the admin API's token is written to a
0600 file whose path (not the token) is printed, and the file is removed when the proxy stops.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.paths import harness_home
from harness.persistproxy.loop import loop_kind, new_loop

PASSWORD_ENV = "PGPASSWORD"


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
        "Admin API: GET /status, POST /drain, POST /resume (docs/persistent-proxy.md). "
        f"The password of --user is read from ${PASSWORD_ENV} or --password-file, never from the command line.")
    p.add_argument("--listen", default="127.0.0.1:0",
                   help="HOST:PORT to accept clients on (default %(default)s)")
    p.add_argument("--run", default=None, metavar="ID",
                   help="front run ID: its nodes are the back end (the principal read from the run state), "
                   "its test login the credentials, an admin API on 127.0.0.1:0; registered in the run so that "
                   "'fault --run ID switchover' drains and resumes it and 'down' stops it")
    p.add_argument("--via", choices=["server", "client"], default="server",
                   help="with --run: reach the nodes at their server addresses (default) or through the fault proxy")
    p.add_argument("--name", default=None, help="with --run: name in the run state (default reference-PORT)")
    p.add_argument("--readonly-endpoint", action="append", default=[], metavar="KIND",
                   choices=["custom-active", "custom-connection"],
                   help="with --run: also listen for read-only sessions routed to the run's running standbys "
                   "(re-read from the run state, so an added node is picked up): custom-active (moved when their "
                   "node is removed, PER-10) or custom-connection (disconnected); repeatable; needs 'up "
                   "--mirror-readable'")
    p.add_argument("--backend", action="append", default=None, metavar="HOST:PORT",
                   help="candidate server; repeat for a pair (the principal is the one not in recovery); "
                   "required without --run")
    p.add_argument("--user", default=None, help="role the proxy logs in with on the principal (required without --run)")
    p.add_argument("--password", default=None, help=argparse.SUPPRESS)  # refused: see _password
    p.add_argument("--password-file", default=None, metavar="PATH",
                   help=f"file (mode 0600) holding the password of --user (default: ${PASSWORD_ENV}); "
                   "front clients log in with the same password")
    p.add_argument("--front-auth", choices=["scram", "password", "trust"], default="scram",
                   help="how front clients authenticate (default %(default)s)")
    p.add_argument("--admin", default=None, metavar="HOST:PORT",
                   help="serve the HTTP admin API here (loopback only unless --admin-allow-remote)")
    p.add_argument("--admin-allow-remote", action="store_true",
                   help="allow --admin on a non-loopback address (prints who can then reach it)")
    p.add_argument("--token-file", default=None, metavar="PATH",
                   help="where to write the admin token (mode 0600; default: a private file under the "
                   "harness home); its path is printed, the token never is")
    p.add_argument("--allow-principal", action="append", default=[], metavar="HOST:PORT",
                   help="an address POST /resume may name besides the --backend ones; repeatable")
    p.add_argument("--max-message-size", type=int, default=64 << 20, metavar="BYTES",
                   help="largest frontend message a client may send (default 64 MiB)")
    p.add_argument("--drain-window", type=float, default=60.0, help="PER-4 drain window, s (default 60)")
    p.add_argument("--recovery-window", type=float, default=60.0,
                   help="PER-3 recovery window, s (default 60)")
    p.add_argument("--probe-database", default="postgres", help="database for principal probes")
    p.add_argument("--no-pre-attach", dest="pre_attach", action="store_false",
                   help="do not log in on the node about to be promoted during a coordinated switchover (POST "
                   "/prepare; by default each session's next connection is opened and its state replayed there "
                   "while the old principal stops, when that node is a hot standby)")
    p.add_argument("--release-after-logins", type=float, default=0.3, metavar="SECONDS",
                   help="at a resume, hold the clients' statements until every kept session has logged in to the "
                   "new principal, at most this long (default %(default)s; 0: each as soon as its own session is "
                   "back)")
    p.add_argument("--workers", default="1", metavar="N",
                   help="worker processes on the same listen address (default 1; 'auto' = one per core): a "
                   "supervisor runs N proxies, routes CancelRequests to the worker that owns the key and fans "
                   "the admin API out to every worker")
    p.add_argument("--listen-mode", choices=["reuseport", "shared"], default="reuseport",
                   help="with --workers > 1: each worker accepts from its own SO_REUSEPORT socket on the port "
                   "(default; the kernel spreads connections by a hash of the client address) or all from one "
                   "shared socket (whichever worker wakes first)")
    p.set_defaults(func=run)


def _with_run_nodes(given: list[tuple[str, int]], backend: Any) -> Callable[[], list[tuple[str, int]]]:
    """The admin ``/resume`` allow-list of a proxy fronting a run: ``--allow-principal`` and the run's
    nodes as the run state has them at each check (a node added by 'fault add-node' may be resumed
    on, a removed one no longer; PER-9: nothing but the nodes and the given addresses)."""

    def allowed() -> list[tuple[str, int]]:
        return [*given, *(a for a in backend.addresses_now() if a not in given)]

    return allowed


def _password(args: argparse.Namespace) -> str | None:
    """The back-side password: ``--password-file`` (must not be readable by others), else
    ``$PGPASSWORD``, else none; ``--password`` on the command line is refused (world-readable argv)."""
    if args.password is not None:
        raise ConfigError(f"--password would be visible to every local user in /proc/PID/cmdline: put the "
                          f"password in ${PASSWORD_ENV} or in a mode-0600 file given with --password-file")
    if args.password_file is None:
        return os.environ.get(PASSWORD_ENV)
    path = Path(args.password_file)
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read --password-file {path}: {exc}") from exc
    if not stat.S_ISREG(mode):
        raise ConfigError(f"--password-file {path} is not a regular file")
    if mode & 0o077:
        raise ConfigError(f"--password-file {path} is readable by other users (mode {stat.S_IMODE(mode):04o}): "
                          f"chmod 600 {path}")
    return text.rstrip("\r\n")


def _private_dir() -> Path:
    """``<harness home>/persistent-proxy-<uid>``, mode 0700, owned by this user; token files of
    proxies that are gone (killed without cleanup) are removed."""
    d = harness_home() / f"persistent-proxy-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        d.mkdir(mode=0o700)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ConfigError(f"{d} is not a private directory of this user: remove it, or give --token-file")
    for old in d.glob("admin-*.token"):
        pid = old.stem.removeprefix("admin-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                old.unlink()
    return d


def _write_token(path: Path, token: str) -> None:
    """Write ``token`` to ``path`` with mode 0600 (never following a symlink)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write the admin token file {path}: {exc}") from exc
    with os.fdopen(fd, "w", encoding="ascii") as f:
        os.fchmod(fd, 0o600)
        f.write(token + "\n")


def run(args: argparse.Namespace) -> int:
    """Start the proxy (and admin API), print one JSON line with the addresses and the token file's
    path, serve until SIGINT/SIGTERM (PER-1..PER-8; the admin API's protection: docs/persistent-proxy.md)."""
    from harness.persistproxy import AdminServer, PersistentProxy, ProxyConfig
    from harness.persistproxy.admin import is_loopback
    from harness.persistproxy.workers import Supervisor, SupervisorAdmin, worker_count

    workers = worker_count(args.workers)

    listen = _address(args.listen, "--listen")
    run_backend = None
    if args.run is not None:
        from harness.cli.attach_cmds import RunBackend

        run_backend = RunBackend(args.run, args.via)
    elif not args.backend or not args.user:
        raise ConfigError("give --backend HOST:PORT (repeatable) and --user, or --run ID to front a run of this "
                          "machine")
    if args.readonly_endpoint and run_backend is None:
        raise ConfigError("--readonly-endpoint needs --run ID (the read-only nodes are the run's standbys)")
    backends = [_address(b, "--backend") for b in args.backend or []]
    allowed: Any = [_address(a, "--allow-principal") for a in args.allow_principal]
    if run_backend is not None:
        allowed = _with_run_nodes(allowed, run_backend)
        args.admin = args.admin or "127.0.0.1:0"
    admin = _address(args.admin, "--admin") if args.admin else None
    if admin and not is_loopback(admin[0]) and not args.admin_allow_remote:
        raise ConfigError(f"--admin {args.admin} is not a loopback address: bind it to 127.0.0.1:PORT, or add "
                          "--admin-allow-remote to expose the admin API to the network")
    if args.drain_window < 0 or args.recovery_window < 0:
        raise ConfigError("--drain-window and --recovery-window must be >= 0")
    if not 0 <= args.release_after_logins <= 60:
        raise ConfigError(f"--release-after-logins {args.release_after_logins:g} is out of range: give 0 to 60 "
                          "seconds (0 releases each session as soon as it is back)")
    password = _password(args)
    user = args.user
    if run_backend is not None:  # the run's test login unless told otherwise
        creds = run_backend.credentials
        user = user or creds.user
        if password is None:
            password = creds.password
    config = ProxyConfig(user=user, password=password, listen=listen, candidates=backends,
                         resolver=run_backend.principal if run_backend is not None and not backends else None,
                         allowed_principals=allowed, front_auth=args.front_auth, drain_window=args.drain_window,
                         recovery_window=args.recovery_window, database=args.probe_database,
                         max_message_size=args.max_message_size,
                         endpoints=[(kind, ("127.0.0.1", 0)) for kind in dict.fromkeys(args.readonly_endpoint)],
                         readonly_resolver=run_backend.readonly if run_backend is not None else None,
                         removal_window=args.drain_window, pre_attach=args.pre_attach,
                         release_after_logins=args.release_after_logins)
    token_file = Path(args.token_file) if args.token_file else None
    if admin and token_file is None:
        token_file = _private_dir() / f"admin-{os.getpid()}.token"

    supervisor: Supervisor | None = None
    if workers > 1:  # a process per core: the workers are forked before any event loop runs here
        supervisor = Supervisor(config, workers, listen_mode=args.listen_mode)
        try:
            supervisor.start()
        except OSError as exc:
            raise ConfigError(f"cannot listen on {args.listen}: {exc}") from exc
    outcome: dict[str, Any] = {}

    async def main() -> None:
        proxy = PersistentProxy(config) if supervisor is None else None
        if proxy is not None:
            try:
                address = await proxy.start()
            except OSError as exc:
                raise ConfigError(f"cannot listen on {args.listen}: {exc}") from exc
        else:
            assert supervisor is not None and supervisor.address is not None
            address = supervisor.address
        admin_server = None
        info: dict[str, Any] = {"listen": f"{address[0]}:{address[1]}", "admin": None, "token_file": None,
                                "workers": workers}
        owner: Any = proxy if proxy is not None else supervisor
        endpoints = owner.endpoint_addresses
        if endpoints:  # PER-10: the read-only endpoints
            info["endpoints"] = {kind: f"{h}:{p}" for kind, (h, p) in endpoints}
        try:
            if admin and token_file is not None:
                if supervisor is not None:
                    admin_server = SupervisorAdmin(supervisor, *admin, allow_remote=args.admin_allow_remote)
                else:
                    admin_server = AdminServer(proxy, *admin, allow_remote=args.admin_allow_remote)
                _write_token(token_file, admin_server.token)
                written.append(token_file)
                try:
                    a = await admin_server.start()
                except OSError as exc:
                    raise ConfigError(f"cannot serve the admin API on {args.admin}: {exc}") from exc
                info["admin"] = f"{a[0]}:{a[1]}"
                info["token_file"] = str(token_file)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):  # before the ready line: a SIGTERM right after it stops cleanly
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(sig, stop.set)
            if run_backend is not None:
                from harness.topology.state import EndpointRecord

                name = args.name or f"reference-{address[1]}"
                record = EndpointRecord(name=name, kind="reference", listen=info["listen"] or "",
                                        dsn=run_backend.dsn(address), pid=os.getpid(), admin=info["admin"],
                                        token_file=info["token_file"], backend=args.via, workers=workers)
                run_backend.attach(record)
                attached.append(record)
                info.update({"run": args.run, "name": name, "backend": args.via, "dsn": record.dsn})
                where = run_backend.describe_backend()
            else:
                where = "candidates " + ", ".join(f"{h}:{p}" for h, p in backends)
            print(json.dumps(info), flush=True)
            many = f", {workers} worker processes ({args.listen_mode} socket)" if supervisor is not None else ""
            print(f"persistent-proxy: listening on {info['listen']} ({loop_kind()} loop{many}); back end: {where}",
                  file=sys.stderr, flush=True)
            if supervisor is None:
                await stop.wait()
            else:  # a worker that dies ends the proxy with an error (its sessions are gone)
                stopped = asyncio.ensure_future(stop.wait())
                died = asyncio.ensure_future(supervisor.wait_death())
                await asyncio.wait([stopped, died], return_when=asyncio.FIRST_COMPLETED)
                if died.done() and not stopped.done():  # Ctrl-C reaches the workers too: let it arrive here
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(stopped), 0.5)
                if died.done() and not stopped.done():
                    w = died.result()
                    outcome["died"] = (f"persistent-proxy: worker {w.index} (pid {w.pid}) {w.exit}: stopping "
                                       "the other workers (the sessions it served are lost)")
                    print(outcome["died"], file=sys.stderr, flush=True)
                for task in (stopped, died):
                    task.cancel()
        finally:
            for record in attached:
                run_backend.detach(record)  # type: ignore[union-attr]
            if admin_server is not None:
                await admin_server.stop()
            if proxy is not None:
                await proxy.stop()
            if supervisor is not None:
                await supervisor.stop()

    written: list[Path] = []
    attached: list[Any] = []
    # warnings (e.g. an exposed admin API) and unexpected errors of the proxy go to stderr
    logging.basicConfig(level=logging.WARNING, format="persistent-proxy: %(message)s")
    try:
        with asyncio.Runner(loop_factory=new_loop) as runner:  # uvloop when installed
            runner.run(main())
    finally:
        if supervisor is not None:
            supervisor.stop_sync()  # idempotent: no worker outlives the supervisor
        for path in written:
            with contextlib.suppress(OSError):
                path.unlink()
    if outcome.get("died"):
        print("persistent-proxy stopped after a worker died", file=sys.stderr)
        return 1
    print("persistent-proxy stopped", file=sys.stderr)
    return 0
