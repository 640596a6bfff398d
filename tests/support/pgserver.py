"""A cheap local PostgreSQL 15 server for the persistent proxy's own tests: ``initdb`` + ``postgres``
run as the unprivileged user ``postgres`` in a private temp dir, roles ``app`` (SCRAM), ``apppw``
(cleartext), ``appmd5`` (MD5) and ``apptrust`` (trust), all with password = name, database ``app``
and table ``items``. Two of them stand in for a pair (drain, repoint the resolver, resume) until a
real ``harness.topology.Pair`` is available. Every process is stopped by :meth:`LocalServer.stop`."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from harness.errors import MissingDependencyError, NodeStartError
from harness.paths import templates_dir
from harness.ports import allocate_port, release_port

PG_BIN = Path(os.environ.get("FAILOVER_HARNESS_PG_BIN", "/usr/lib/postgresql/15/bin"))
_LIVE: set[LocalServer] = set()

_HBA = """local all all trust
host all apppw 127.0.0.1/32 password
host all appmd5 127.0.0.1/32 md5
host all apptrust 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
"""

_SETUP = """
CREATE ROLE app LOGIN PASSWORD 'app';
CREATE ROLE apppw LOGIN PASSWORD 'apppw';
CREATE ROLE apptrust LOGIN;
SET password_encryption = 'md5';
CREATE ROLE appmd5 LOGIN PASSWORD 'appmd5';
CREATE DATABASE app OWNER app;
"""

_SETUP_APP = """
CREATE TABLE items (id int PRIMARY KEY, v text);
ALTER TABLE items OWNER TO app;
GRANT ALL ON items TO PUBLIC;
"""


class LocalServer:
    """One throw-away PostgreSQL server on 127.0.0.1 (test stand-in; not a replication pair)."""

    def __init__(self, name: str = "pg") -> None:
        if not (PG_BIN / "postgres").exists():
            raise MissingDependencyError(f"PostgreSQL server binaries not found in {PG_BIN}: "
                                         "apt-get install -y postgresql")
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"persist-{name}-", dir="/tmp"))
        self.data = self.dir / "data"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def server_address(self) -> tuple[str, int]:
        """``(host, port)`` of the TCP listener."""
        return ("127.0.0.1", self.port)

    @property
    def socket_dir(self) -> str:
        """Directory of the Unix socket (superuser ``postgres`` logs in there with trust)."""
        return str(self.dir)

    def _as_postgres(self, args: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(args, user="postgres", check=False, capture_output=True, **kw)  # type: ignore[call-overload]

    def start(self) -> LocalServer:
        """Copy the cached template data directory (made once per machine: initdb, roles,
        database), start, wait until it accepts logins."""
        try:
            if not self.data.exists():
                template = _template()
                r = subprocess.run(["cp", "-a", str(template), str(self.data)], capture_output=True,
                                   check=False)
                if r.returncode:
                    raise NodeStartError(f"copying the template data directory failed: {r.stderr.decode()}")
            return self._start(first=False)
        except BaseException:
            self.stop(remove=True)  # nothing left behind when the start fails
            raise

    def _start(self, first: bool) -> LocalServer:
        pw = pwd.getpwnam("postgres")
        os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        if first:
            r = self._as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres",
                                   "--auth=trust", "-E", "UTF8", "--no-sync"])
            if r.returncode:
                raise NodeStartError(f"initdb failed: {r.stderr.decode()[-2000:]}")
            (self.data / "pg_hba.conf").write_text(_HBA)
        self.port = allocate_port()
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - owned by the process
        os.chown(self.dir / "server.log", pw.pw_uid, pw.pw_gid)
        self.proc = subprocess.Popen(
            [str(PG_BIN / "postgres"), "-D", str(self.data), "-c", "listen_addresses=127.0.0.1",
             "-c", f"port={self.port}", "-c", f"unix_socket_directories={self.dir}", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "shared_buffers=16MB",
             "-c", "dynamic_shared_memory_type=mmap",
             "-c", "max_connections=60", "-c", "max_wal_senders=0", "-c", "wal_level=minimal"],
            user="postgres", stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        _LIVE.add(self)
        deadline = time.monotonic() + 20
        while True:
            r = self._as_postgres([str(PG_BIN / "psql"), "-h", self.socket_dir, "-p", str(self.port),
                                   "-U", "postgres", "-d", "postgres", "-Atc", "SELECT 1"])
            if r.returncode == 0:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.dir / "server.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise NodeStartError(f"PostgreSQL {self.name} did not start: {tail}")
            time.sleep(0.05)
        if first:
            self.psql(_SETUP, "postgres")
            self.psql(_SETUP_APP, "app")
        return self

    def psql(self, sql: str, database: str = "app") -> str:
        """Run SQL as superuser over the Unix socket; returns stdout, raises on error."""
        r = self._as_postgres([str(PG_BIN / "psql"), "-h", self.socket_dir, "-p", str(self.port),
                               "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1", "-At", "-f", "-"],
                              input=sql.encode())
        if r.returncode:
            raise NodeStartError(f"psql on {self.name} failed: {r.stderr.decode()}")
        return r.stdout.decode()

    def stop(self, remove: bool = False) -> None:
        """Fast shutdown (SIGINT), SIGKILL after 10 s; ``remove`` also deletes the directory."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.proc = None
        if self.port:
            release_port(self.port)
        if remove:
            _LIVE.discard(self)
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(remove=True)


@contextlib.contextmanager
def two_servers(name_a: str, name_b: str) -> Iterator[tuple[LocalServer, LocalServer]]:
    """Two independent servers, started side by side (B in a thread) and both stopped and removed
    at the end - the principal and its stand-in successor of the proxy tests."""
    a, b = LocalServer(name_a), LocalServer(name_b)
    try:
        started = threading.Thread(target=b.start)
        started.start()
        a.start()
        started.join(60)
        assert b.proc is not None, f"server {name_b} did not start"
        yield a, b
    finally:
        a.stop(remove=True)
        b.stop(remove=True)


def _template() -> Path:
    """The cached, stopped data directory with roles and database (built once, under a file lock
    so that pytest-xdist workers build it only once)."""
    key = hashlib.sha256((str(PG_BIN) + _HBA + _SETUP + _SETUP_APP).encode()).hexdigest()[:12]
    base = templates_dir()
    target = base / f"persist-pg-{key}"
    if (target / "PG_VERSION").exists():
        return target
    with open(base / f"persist-pg-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "PG_VERSION").exists():
            builder = LocalServer("template")
            try:
                builder._start(first=True)
                builder.stop()
                tmp = base / f"persist-pg-{key}.tmp{os.getpid()}"
                shutil.rmtree(tmp, ignore_errors=True)
                subprocess.run(["mv", str(builder.data), str(tmp)], check=True)  # keeps ownership
                (tmp / "postmaster.pid").unlink(missing_ok=True)
                os.rename(tmp, target)
            finally:
                builder.stop(remove=True)
    return target


@atexit.register
def _cleanup() -> None:  # a crashed test must not leave servers behind
    for server in list(_LIVE):
        server.stop(remove=True)
