"""The command lines and environment of a pg_auto_failover topology (docs/ha-managers.md): the
monitor's and each data node's ``pg_autoctl create ... --run``, a restarted node's ``pg_autoctl run``,
and the settings the harness writes into each data directory before pg_autoctl sees it.

Each pg_autoctl keeps its configuration and state under ``$XDG_CONFIG_HOME`` / ``$XDG_DATA_HOME``
(``$HOME/.config`` ...): every node gets its own home in the run directory, so nodes never share
them. Every server's Unix socket is in the run's ``sock`` folder (``PGHOST`` for pg_autoctl,
``unix_socket_directories`` for the server: outside the data directory, as pg_rewind needs).

What can be behind the fault proxy: a data node reaches the monitor through the monitor URI it is
given (``--monitor``), so that link is the node's own proxy. The host and port a node registers
(``--hostname`` / ``--pgport``) are both the address the monitor's health checks use and the
address the other nodes stream from, and pg_autoctl makes the server listen on exactly that port
(``pg_autoctl set node metadata --pgport`` refuses a port the server does not listen on), so the
monitor -> node and replication links cannot be proxied; they are direct."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: The pg_autoctl binary (Debian package pg-auto-failover-cli).
PG_AUTOCTL = "/usr/bin/pg_autoctl"
#: The formation and group every harness node joins (pg_autoctl's defaults).
FORMATION = "default"
GROUP = 0
#: The database of the monitor and the login the data nodes use to reach it.
MONITOR_DB = "pg_auto_failover"
MONITOR_USER = "autoctl_node"


@dataclass(frozen=True)
class NodePaths:
    """Where one pg_autoctl node (the monitor or a data node) keeps its files."""

    home: Path  # $HOME and the XDG folders of its pg_autoctl
    socket_dir: Path

    @property
    def pgdata(self) -> Path:
        return self.home / "data"


def environment(node: NodePaths, bindir: Path) -> dict[str, str]:
    """The environment of every pg_autoctl command of ``node``: its own home and XDG folders, the
    PostgreSQL 15 binaries first on ``PATH`` (pg_autoctl finds ``pg_ctl`` there) and the run's
    socket folder as ``PGHOST``."""
    home = str(node.home)
    return {"PATH": f"{bindir}:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/config", "XDG_DATA_HOME": f"{home}/share",
            "XDG_RUNTIME_DIR": f"{home}/run", "PGHOST": str(node.socket_dir)}


def server_settings(socket_dir: Path) -> str:
    """``postgresql.auto.conf`` lines the harness adds to a fresh data directory: small memory (pg_autoctl
    otherwise sizes shared_buffers from the machine's memory), fsync off, the run's socket folder.
    Standbys inherit them with the base backup; no ``port`` here (pg_autoctl sets each node's own)."""
    return ("shared_buffers = '16MB'\nmax_connections = 50\nfsync = off\nwal_keep_size = '64MB'\n"
            f"unix_socket_directories = '{socket_dir}'\nlogging_collector = off\n"
            "wal_retrieve_retry_interval = '200ms'\n")


def monitor_uri(address: str) -> str:
    """The monitor's connection URI at ``address`` (``host:port``; a node's monitor proxy, or the
    monitor itself for the harness's own requests)."""
    return f"postgres://{MONITOR_USER}@{address}/{MONITOR_DB}?sslmode=disable"


def create_monitor_argv(node: NodePaths, port: int) -> list[str]:
    """``pg_autoctl create monitor ... --run``: the monitor on ``127.0.0.1:port``, trust for loopback
    (``--auth trust``), no TLS (``--no-ssl``: loopback only)."""
    return [PG_AUTOCTL, "create", "monitor", "--pgdata", str(node.pgdata), "--pgport", str(port),
            "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run"]


def create_node_argv(node: NodePaths, name: str, port: int, monitor_address: str) -> list[str]:
    """``pg_autoctl create postgres ... --run``: data node ``name`` listening on (and registered as)
    ``127.0.0.1:port``, reaching the monitor at ``monitor_address`` (its monitor proxy)."""
    return [PG_AUTOCTL, "create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(port),
            "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--name", name, "--auth", "trust", "--no-ssl",
            "--formation", FORMATION, "--monitor", monitor_uri(monitor_address), "--run"]


def run_argv(node: NodePaths) -> list[str]:
    """``pg_autoctl run``: a node's keeper started again (it starts or adopts its server and rejoins)."""
    return [PG_AUTOCTL, "run", "--pgdata", str(node.pgdata)]
