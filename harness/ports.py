"""TCP listen ports that nothing else takes between handing one out and the server binding it
(ports that cannot be stolen: a test never flakes because another process took its port).

A port is picked at random *outside the kernel's ephemeral range*
(``/proc/sys/net/ipv4/ip_local_port_range``): every outgoing connection on the machine takes its
local port from that range, so no ``connect()`` anywhere can take a number the harness handed out
(binding port 0, as the harness did before, handed out exactly those numbers, and one was seen
taken before PostgreSQL bound it). The port is checked free by binding it, then reserved
machine-wide with an exclusive lock file under ``<harness home>/ports/`` naming the owning PID, so
that two harness processes never hand out the same number; reservations of dead processes are
reclaimed. ``FAILOVER_HARNESS_PORT_RANGE=LO-HI`` narrows the pool.

A program that binds a harness port explicitly can still get there first: a server that finds its
port taken at start-up is started again on another port by its owner (:func:`retry_on_port_in_use`,
at most :data:`PORT_ATTEMPTS` tries), which records the move.
"""

from __future__ import annotations

import errno
import os
import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from harness.errors import ConfigError, PortInUseError
from harness.paths import harness_home, shared_dir

#: A TCP address as the harness passes it around: ``(host, port)``.
Address = tuple[str, int]

#: How many times a server is started on a fresh port when its port turns out to be taken.
PORT_ATTEMPTS = 5
#: The harness's pool before the ephemeral range is cut out of it.
POOL = (20000, 65535)
RANGE_ENV = "FAILOVER_HARNESS_PORT_RANGE"
_EPHEMERAL_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_random = random.Random()  # seeded from os.urandom at import

T = TypeVar("T")


def ephemeral_range(path: Path | None = None) -> tuple[int, int]:
    """The kernel's ephemeral port range ``(low, high)`` from ``ip_local_port_range`` (the Linux
    default 32768..60999 when it cannot be read)."""
    try:
        low, high = (int(x) for x in (path or _EPHEMERAL_FILE).read_text().split()[:2])
    except (OSError, ValueError):
        return 32768, 60999
    return min(low, high), max(low, high)


def port_pool() -> list[tuple[int, int]]:
    """The inclusive ranges ports are drawn from: :data:`POOL` (or ``FAILOVER_HARNESS_PORT_RANGE``)
    minus the ephemeral range; the whole pool only when the ephemeral range covers all of it."""
    low, high = POOL
    spec = os.environ.get(RANGE_ENV, "").strip()
    if spec:
        try:
            a, b = (int(x) for x in spec.split("-", 1))
        except ValueError:
            raise ConfigError(f"{RANGE_ENV}={spec!r} is not LO-HI; write e.g. {RANGE_ENV}=20000-32767") from None
        if not 1024 <= a <= b <= 65535:
            raise ConfigError(f"{RANGE_ENV}={spec!r} must satisfy 1024 <= LO <= HI <= 65535")
        low, high = a, b
    e_low, e_high = ephemeral_range()
    ranges = [(lo, hi) for lo, hi in ((low, min(high, e_low - 1)), (max(low, e_high + 1), high)) if lo <= hi]
    return ranges or [(low, high)]


def _ports_dir() -> Path:
    return shared_dir(harness_home() / "ports")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(port: int) -> int | None:
    """The PID named by the reservation of ``port``, or None when it is not reserved."""
    try:
        return int((_ports_dir() / str(port)).read_text() or "0") or None
    except (OSError, ValueError):
        return None


def hand_over(ports: list[int], owner: int) -> None:
    """Make ``owner`` the holder of these reservations (atomically, file by file), so that a run that
    outlives the process which reserved its ports (``up --detach``) keeps them reserved until it is
    torn down; ports without a reservation are left alone."""
    for port in ports:
        path = _ports_dir() / str(port)
        if path.exists():
            tmp = path.with_name(f".{port}.{os.getpid()}.tmp")
            tmp.write_text(str(owner))
            os.replace(tmp, path)


def _try_reserve(port: int, owner: int) -> bool:
    path = _ports_dir() / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = int(path.read_text() or "0")
            except (OSError, ValueError):
                holder = 0
            if holder and _pid_alive(holder):
                return False
            path.unlink(missing_ok=True)  # stale reservation of a dead process
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(owner))
        return True
    return False


def _bindable(host: str, port: int, reuse: bool = False) -> bool:
    """True when a listener can bind ``host:port`` right now. With ``reuse`` the bind sets
    SO_REUSEADDR, as every listener the harness starts (and PostgreSQL, MariaDB, Toxiproxy, PgBouncer)
    does, so the TIME_WAIT leftovers of a server stopped there do not count - a listener does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _draw(ranges: list[tuple[int, int]]) -> int:
    total = sum(hi - lo + 1 for lo, hi in ranges)
    k = _random.randrange(total)
    for lo, hi in ranges:
        if k <= hi - lo:
            return lo + k
        k -= hi - lo + 1
    raise AssertionError("unreachable")


def allocate_port(host: str = "127.0.0.1", owner: int | None = None) -> int:
    """Return a TCP port outside the ephemeral range that is free on ``host`` and reserved for
    ``owner`` (default: this PID) - a port no outgoing connection can take."""
    owner = owner or os.getpid()
    ranges = port_pool()
    in_time_wait: int | None = None
    for _ in range(500):
        port = _draw(ranges)
        if _bindable(host, port):
            if _try_reserve(port, owner):
                return port
        elif in_time_wait is None and _bindable(host, port, reuse=True):
            in_time_wait = port
    # No strictly free port: one that only TIME_WAIT leftovers hold is still bindable by a server
    # (SO_REUSEADDR) - the case of a pinned range whose one port a removed node just freed.
    if in_time_wait is not None and _bindable(host, in_time_wait, reuse=True) and _try_reserve(in_time_wait, owner):
        return in_time_wait
    raise OSError(f"could not reserve a free TCP port in {ranges} after 500 tries")


def release_port(port: int) -> None:
    """Drop the reservation of ``port`` (the port itself is closed by whoever used it)."""
    (_ports_dir() / str(port)).unlink(missing_ok=True)


def port_in_use(exc: BaseException) -> bool:
    """True when ``exc`` says a server could not bind its listen port (EADDRINUSE)."""
    if isinstance(exc, PortInUseError):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return True
    return "address already in use" in str(exc).lower()


def retry_on_port_in_use(start: Callable[[], T], move: Callable[[BaseException], None],
                         attempts: int = PORT_ATTEMPTS) -> T:
    """``start()``; when it fails because its port is taken (:func:`port_in_use`), ``move(exc)``
    (the caller picks another port, records the move and starts the server again) and wait again -
    at most ``attempts`` times in all, then the last error propagates (a taken port is
    a bounded, recorded retry, never a flake)."""
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except Exception as exc:
            if attempt >= attempts or not port_in_use(exc):
                raise
            move(exc)
    raise AssertionError("unreachable")
