"""Every dependency of the harness outside Python: how to tell it is present, the one command that
installs it, and what needs it. ``failover-harness setup`` installs what is missing, ``failover-harness
doctor`` lists them, and the checkout's ``scripts/setup.sh`` (``make setup``) runs the same system
step (``python3 -m harness.cli.deps``) before its virtual environment exists - so this module uses the
standard library only."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Dependency:
    """One thing the harness runs: a Debian package (``package``) or an npm tool (``npm``)."""

    name: str
    probe: str  # an absolute path that must exist, or a command looked up on PATH
    package: str | None  # the Debian package that provides it (None: not from apt)
    needed_by: str  # what uses it (doctor prints it)
    version_args: tuple[str, ...] = ()  # e.g. ("--version",): doctor prints the first line

    def found(self) -> str | None:
        """The file that provides it, or None."""
        if self.probe.startswith("/"):
            matches = sorted(glob.glob(self.probe), reverse=True)
            return matches[0] if matches else None
        return shutil.which(self.probe)

    def version(self) -> str | None:
        """The first line of its version output, or None."""
        where = self.found()
        if where is None or not self.version_args:
            return None
        try:
            out = subprocess.run([where, *self.version_args], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        text = (out.stdout or out.stderr).strip().splitlines()
        return text[0].strip() if text else None


#: The system packages, in the order doctor lists them. PostgreSQL 15 is what the local backend needs.
SYSTEM: tuple[Dependency, ...] = (
    Dependency("PostgreSQL 15 server", "/usr/lib/postgresql/15/bin/postgres", "postgresql",
               "the local backend (every suite)", ("--version",)),
    Dependency("MariaDB server", "/usr/sbin/mariadbd", "mariadb-server", "--engine mariadb", ("--version",)),
    Dependency("mariadb-backup", "/usr/bin/mariadb-backup", "mariadb-backup", "--engine mariadb (standbys)"),
    Dependency("PgBouncer", "/usr/sbin/pgbouncer", "pgbouncer", "persistent clients pgbouncer-*", ("--version",)),
    Dependency("pgpool-II", "/usr/sbin/pgpool", "pgpool2", "persistent client pgpool", ("--version",)),
    Dependency("sysbench", "/usr/bin/sysbench", "sysbench", "the persistent sysbench test", ("--version",)),
    Dependency("HAProxy", "/usr/sbin/haproxy", "haproxy", "icm client haproxy", ("-v",)),
    Dependency("nginx", "/usr/sbin/nginx", "nginx", "icm client nginx", ("-v",)),
    Dependency("Java runtime", "java", "default-jre-headless", "the Allure report, pgjdbc clients", ("-version",)),
    Dependency("Java compiler", "javac", "default-jdk-headless", "pgjdbc clients (the JDBC helper)", ("-version",)),
    Dependency("PostgreSQL JDBC driver", "/usr/share/java/postgresql.jar", "libpostgresql-jdbc-java",
               "pgjdbc clients"),
    Dependency("HikariCP", "/usr/share/java/HikariCP.jar", "libhikaricp-java", "app client hikaricp"),
    Dependency("Patroni", "/usr/bin/patroni", "patroni", "topologies patroni-* (suites/ham)", ("--version",)),
    Dependency("etcd", "/usr/bin/etcd", "etcd-server", "topologies patroni-* (the DCS)", ("--version",)),
    Dependency("pg_auto_failover", "/usr/bin/pg_autoctl", "pg-auto-failover-cli", "topologies pgaf-* (suites/ham)",
               ("--version",)),
    Dependency("pg_auto_failover monitor extension", "/usr/share/postgresql/15/extension/pgautofailover.control",
               "postgresql-15-auto-failover", "topologies pgaf-* (the monitor)"),
    Dependency("Node.js", "node", "nodejs", "node-pg / postgres-js clients", ("--version",)),
    Dependency("npm", "npm", "npm", "installing the Allure command line and the Node drivers", ("--version",)),
    Dependency("C compiler", "gcc", "gcc", "the compiled proxy framing when building from source"),
)


def python_headers() -> Dependency:
    """The headers of this Python (Debian keeps them in python3-dev), for building from source."""
    import sysconfig

    return Dependency("Python headers", os.path.join(sysconfig.get_paths()["include"], "Python.h"), "python3-dev",
                      "the compiled proxy framing when building from source")


def missing_packages(deps: tuple[Dependency, ...] | None = None) -> list[str]:
    """The Debian packages of the dependencies that are not present (each once, in order)."""
    out: list[str] = []
    for dep in (deps if deps is not None else (*SYSTEM, python_headers())):
        if dep.package and dep.found() is None and dep.package not in out:
            out.append(dep.package)
    return out


def apt_command(packages: list[str]) -> str:
    """The one command that installs ``packages`` (with sudo when not root)."""
    sudo = "" if os.geteuid() == 0 else "sudo "
    return f"{sudo}apt-get install -y --no-install-recommends {' '.join(packages)}"


def can_apt() -> bool:
    """True when this process may install system packages itself: root, with apt-get."""
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def say(message: str) -> None:
    """One progress line of the set-up (stderr)."""
    print(f"[setup] {message}", file=sys.stderr, flush=True)


def install_system(packages: list[str]) -> bool:
    """Install ``packages`` with apt when root (services of haproxy / nginx are never started: the
    harness runs them on 127.0.0.1 itself); else print the exact command. True when installed."""
    if not packages:
        say("system packages: all present")
        return True
    if not can_apt():
        say(f"missing system packages: {' '.join(packages)}")
        say(f"install them with: {apt_command(packages)}   (then run this again)")
        return False
    say(f"installing system packages: {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    policy = Path("/usr/sbin/policy-rc.d")
    created = False
    if not policy.exists():
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        created = True
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    finally:
        if created:
            policy.unlink(missing_ok=True)
    return True


def pg_major(version_line: str | None) -> int | None:
    """The major version in ``postgres (PostgreSQL) 15.10`` (None when unreadable)."""
    match = re.search(r"(\d+)(?:\.\d+)?", version_line or "")
    return int(match.group(1)) if match else None


def main(argv: list[str] | None = None) -> int:
    """``python3 -m harness.cli.deps``: the system-package step of the set-up (scripts/setup.sh); exit 1
    when packages are missing and cannot be installed here."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--system"]):
        print("usage: python3 -m harness.cli.deps [--system]", file=sys.stderr)
        return 2
    return 0 if install_system(missing_packages()) else 1


if __name__ == "__main__":
    sys.exit(main())
