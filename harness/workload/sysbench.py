"""sysbench 1.0.20 (Debian) as a real client (docs/mariadb.md; the seed's PER-1 measurement: ``oltp_read_write``,
20 tables x 10,000 rows, 20 threads): ``prepare`` / ``run`` against an address with its ``mysql``
(MariaDB) or ``pgsql`` (PostgreSQL) driver, with the password in a 0600 option file (never on a
command line), and the figures parsed from its output - transactions, tps, p95 latency, errors,
reconnects and the per-second report (the stall around a switchover)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError, MissingDependencyError
from harness.redact import redact, write_private_file

_INTERVAL = re.compile(r"^\[ *(\d+)s \] thds: (\d+) tps: ([\d.]+) qps: ([\d.]+).*?lat \(ms,95%\): ([\d.]+) "
                       r"err/s: ([\d.]+) reconn/s: ([\d.]+)", re.M)


@dataclass
class SysbenchResult:
    """What one ``sysbench run`` reported."""

    exit_code: int
    transactions: int = 0
    tps: float = 0.0
    p95_ms: float = 0.0
    errors: int = 0
    reconnects: int = 0
    intervals: list[dict[str, float]] = field(default_factory=list)
    output: str = field(default="", repr=False)

    @property
    def min_interval_tps(self) -> float:
        """The lowest per-second tps (the stall of a switchover), 0 when no interval was reported."""
        return min((i["tps"] for i in self.intervals), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON shape (history, benchmarks)."""
        return {"exit_code": self.exit_code, "transactions": self.transactions, "tps": self.tps,
                "p95_ms": self.p95_ms, "errors": self.errors, "reconnects": self.reconnects,
                "min_interval_tps": self.min_interval_tps, "intervals": len(self.intervals),
                "error_seconds": [i["t"] for i in self.intervals if i["err_s"] > 0]}


def sysbench_binary() -> str:
    """The sysbench program (MissingDependencyError with the install command when absent)."""
    path = shutil.which("sysbench")
    if not path:
        raise MissingDependencyError("sysbench is not installed; install it with 'apt-get install -y sysbench' "
                                     "(or run 'failover-harness setup')")
    return path


def parse_output(text: str, exit_code: int) -> SysbenchResult:
    """The figures of a ``sysbench run`` output."""
    r = SysbenchResult(exit_code, output=text)
    m = re.search(r"transactions:\s+(\d+)\s+\(([\d.]+) per sec", text)
    if m:
        r.transactions, r.tps = int(m.group(1)), float(m.group(2))
    m = re.search(r"95th percentile:\s+([\d.]+)", text)
    if m:
        r.p95_ms = float(m.group(1))
    m = re.search(r"ignored errors:\s+(\d+)", text)
    if m:
        r.errors = int(m.group(1))
    m = re.search(r"reconnects:\s+(\d+)", text)
    if m:
        r.reconnects = int(m.group(1))
    fatal = text.count("FATAL:")
    if fatal:  # sysbench stops a thread on an error it does not ignore
        r.errors = max(r.errors, fatal)
    for g in _INTERVAL.findall(text):
        r.intervals.append({"t": float(g[0]), "threads": float(g[1]), "tps": float(g[2]), "qps": float(g[3]),
                            "p95_ms": float(g[4]), "err_s": float(g[5]), "reconn_s": float(g[6])})
    return r


DRIVERS = {"mariadb": "mysql", "postgres": "pgsql"}  # --engine value -> sysbench --db-driver


def driver_for(engine: str) -> str:
    """sysbench's ``--db-driver`` for an ``--engine`` value (PER-1's client on either engine);
    ConfigError naming the engines it knows otherwise."""
    try:
        return DRIVERS[engine]
    except KeyError:
        raise ConfigError(f"sysbench has no driver for engine {engine!r}; use one of {sorted(DRIVERS)}") from None


# sysbench 1.0.20's bundled OLTP tests (they share the tables of ``prepare``)
TESTS = ("oltp_read_write", "oltp_read_only", "oltp_write_only", "oltp_point_select", "oltp_update_index",
         "oltp_update_non_index", "oltp_insert", "oltp_delete", "select_random_points", "select_random_ranges")


class Sysbench:
    """``test`` (default ``oltp_read_write``, one of :data:`TESTS`) with the ``mysql`` or ``pgsql``
    driver against ``address`` as ``user`` (tables x rows; ``ps_mode`` is ``--db-ps-mode``: ``auto`` =
    server-side prepared statements)."""

    def __init__(self, address: tuple[str, int], user: str, password: str, database: str, *, tables: int = 20,
                 table_size: int = 10_000, workdir: Path | None = None, driver: str = "mysql",
                 ps_mode: str = "auto", options: tuple[str, ...] = (), test: str = "oltp_read_write") -> None:
        if driver not in DRIVERS.values():
            raise ConfigError(f"sysbench driver {driver!r} unknown; use one of {sorted(DRIVERS.values())}")
        if test not in TESTS:
            raise ConfigError(f"sysbench test {test!r} unknown; use one of {', '.join(TESTS)}")
        self.test = test
        self.address = address
        self.user = user
        self.database = database
        self.tables = tables
        self.table_size = table_size
        self.driver = driver
        self.ps_mode = ps_mode
        self.options = options  # further options of the test, e.g. ("--delete_inserts=0",)
        self._dir = Path(tempfile.mkdtemp(prefix="fh-sysbench-", dir=workdir))
        self._config = write_private_file(self._dir / "sysbench.cfg", f"{driver}-password={password}\n")

    def _argv(self, command: str, threads: int, extra: list[str]) -> list[str]:
        host, port = self.address
        d = self.driver
        return [sysbench_binary(), self.test, f"--db-driver={d}", f"--{d}-host={host}",
                f"--{d}-port={port}", f"--{d}-user={self.user}", f"--{d}-db={self.database}",
                f"--config-file={self._config}", f"--tables={self.tables}", f"--table-size={self.table_size}",
                f"--db-ps-mode={self.ps_mode}", *self.options, f"--threads={threads}", *extra, command]

    def prepare(self, threads: int = 4, timeout: float = 600) -> None:
        """Create and fill the tables (HarnessError with sysbench's output when it fails)."""
        res = subprocess.run(self._argv("prepare", threads, []), capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise HarnessError(f"sysbench prepare failed (exit {res.returncode}): "
                               f"{redact((res.stderr or res.stdout).strip()[-800:])}")

    def cleanup(self, threads: int = 4, timeout: float = 600) -> None:
        """Drop the tables (``cleanup``; missing tables are no error)."""
        subprocess.run(self._argv("cleanup", threads, []), capture_output=True, text=True, timeout=timeout)

    def start(self, seconds: float, threads: int = 20, report_interval: int = 1) -> subprocess.Popen:
        """Start ``sysbench run`` in the background (:meth:`finish` waits for it)."""
        return subprocess.Popen(self._argv("run", threads, [f"--time={int(seconds)}",
                                                           f"--report-interval={report_interval}",
                                                           "--percentile=95"]),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    @staticmethod
    def finish(proc: subprocess.Popen, timeout: float = 600) -> SysbenchResult:
        """Wait for a started run and parse it."""
        out, _ = proc.communicate(timeout=timeout)
        return parse_output(redact(out or ""), proc.returncode)

    def run(self, seconds: float, threads: int = 20) -> SysbenchResult:
        """One run in the foreground."""
        return self.finish(self.start(seconds, threads), timeout=seconds + 600)

    def close(self) -> None:
        """Remove the option file."""
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Sysbench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
