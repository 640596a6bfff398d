"""MariaDB 10.11 on the Docker Compose backend (``--backend compose --engine mariadb``): the pair and
group of ``compose/mariadb-pair.yml`` / ``mariadb-group3.yml`` behind the Toxiproxy container.

The choreography is the local MariaDB topology's (:mod:`harness.topology.mariadb` through
:class:`~harness.topology.local.LocalTopology`: GTID replication, semi-sync as sync mode, promote by
``STOP SLAVE; RESET SLAVE ALL``, rewind by GTID comparison, re-clone by ``mariadb-backup``); the
container primitives are :class:`~harness.topology.compose.ComposeTopology`'s. What differs from
PostgreSQL on compose:

* each node's folder holds a copy of the machine's MariaDB template and its ``my.cnf`` (bind-mounted
  at the same path); the entrypoint (``compose/fh-mariadb-node.sh``) owns the folder to the image's
  ``mysql`` user and ``exec``\\ s ``mariadbd --defaults-file=...`` as the container's first process, so
  the harness reaches the server over its Unix socket in the folder and reads its configuration from
  its command line on the host, as it does a local ``mariadbd``;
* whom a replica follows is set over SQL (``CHANGE MASTER TO`` its replication proxy), not by the
  entrypoint; a configuration change is applied over SQL too (no SIGHUP);
* a clean stop first makes the server read-only, waits for its binlog dump threads and records its
  final GTID position (:func:`~harness.topology.mariadb.prepare_clean_stop`), then SIGTERM; an
  immediate stop is SIGKILL;
* rewind and re-clone run on the host, as local, on the stopped container's bind-mounted data
  directory (owned to the host's database user for that; the entrypoint takes it back at start);
* no node add (the capability table's ``mariadb add_node`` row says why).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.errors import NodeStartError
from harness.topology import mariadb
from harness.topology.compose import ComposeTopology
from harness.topology.local import LocalGroup, LocalPair, LocalTopology
from harness.topology.process import RunAs, database_user, pid_alive

#: MariaDB's stop signals: a clean shutdown for fast and smart, SIGKILL for immediate (crash recovery
#: at the next start, like PostgreSQL's immediate mode).
MARIADB_STOP_SIGNALS = {"fast": "SIGTERM", "smart": "SIGTERM", "immediate": "SIGKILL"}


def chown_tree(root: Path, user: RunAs) -> None:
    """Own ``root`` and everything under it to ``user`` (a stopped node's folder, before the host's
    tools - the GTID probe server, ``mariadb-backup`` - work on it as that user)."""
    for path in [root, *root.rglob("*")]:
        os.lchown(path, user.uid, user.gid)


def wait_exec(pid: int, timeout: float = 30) -> bool:
    """Wait until container process ``pid`` has ``exec``\\ ed the server (its command line names the
    configuration file: ``--defaults-file=``); False when it died first or the time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        try:
            if b"--defaults-file=" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            return False
        time.sleep(0.005)
    return False


class ComposeMariaDBTopology(ComposeTopology):
    """MariaDB containers of one Compose project, driven like local MariaDB servers (module docstring)."""

    stop_signals = MARIADB_STOP_SIGNALS

    def _bootstrap_files(self) -> dict[str, str]:
        """None: every node starts from a copy of the machine's template (logins included)."""
        return {}

    def _prepare_principal(self, principal: str) -> None:
        """Nothing: the template already holds the test and replication logins."""

    def _server_version(self, name: str) -> str:
        s = self._node_state(name)
        with self.engine.admin_connect(self.socket_dir(name), s.port) as conn:
            return str(conn.execute("SELECT VERSION()").fetchone()[0]).split("-")[0]

    def _spawn(self, name: str) -> None:
        """As PostgreSQL's, after removing the pid file and socket a killed container left behind."""
        for stale in ("mysqld.pid", "mysqld.sock"):
            (self.socket_dir(name) / stale).unlink(missing_ok=True)
        super()._spawn(name)

    def _wait_started(self, name: str) -> None:
        """Wait until the entrypoint has handed over to ``mariadbd``, then as local (accepting
        connections, its role applied over SQL; writable on the principal)."""
        s = self._node_state(name)
        if not wait_exec(s.pid or 0):
            raise NodeStartError(f"the container of node {name} did not start mariadbd; its log:\n"
                                 f"{self.engine.log_tail(self.path / name / 'postgres.log')}\n"
                                 f"{self._container_log(name)}")
        super()._wait_started(name)

    def _standby_started(self, name: str) -> None:
        """At ``up``: wait until the replica's server answers and has applied its role (``CHANGE
        MASTER TO`` its replication proxy), as local ``up`` does for each replica."""
        self._wait_started(name)

    def _apply_conf(self, name: str) -> None:
        """As local: the role, source and semi-sync setting applied over SQL."""
        LocalTopology._apply_conf(self, name)

    def _before_stop(self, pid: int, mode: str) -> None:
        """A clean stop records the node's final GTID position first (local MariaDB's stop)."""
        if mode != "immediate":
            mariadb.prepare_clean_stop(pid)

    def _rewind(self, name: str, principal: str) -> None:
        """As local (GTID comparison; a diverged node is re-cloned with ``mariadb-backup``), run on the
        host as its database user on the stopped container's folder."""
        user = database_user()
        chown_tree(self.path / name, user)
        run_as, self.run_as = self.run_as, user
        try:
            LocalTopology._rewind(self, name, principal)
        finally:
            self.run_as = run_as


class ComposeMariaDBPair(ComposeMariaDBTopology, LocalPair):
    """A MariaDB principal + mirror pair of containers (``compose/mariadb-pair.yml``)."""


class ComposeMariaDBGroup(ComposeMariaDBTopology, LocalGroup):
    """A MariaDB principal and two replicas of containers (``compose/mariadb-group3.yml``)."""
