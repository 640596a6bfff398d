"""The configuration files of a Patroni topology: one etcd member's command line and one Patroni
node's configuration (written as JSON, which Patroni's YAML reader accepts), with every address
another party uses behind the fault proxy (docs/ha-managers.md):

* ``postgresql.connect_address`` - the node's replication proxy (what the other nodes' standbys
  stream from and pg_rewind reads);
* ``restapi.connect_address`` - the node's REST-API proxy (what the other members query);
* ``etcd3.hosts`` - the node's own DCS proxy, with ``use_proxies`` so that Patroni never discovers
  etcd's real client URL and goes around the proxy."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.topology.patroni_settings import PatroniTiming


@dataclass(frozen=True)
class NodeAddresses:
    """Where one node listens and how the others reach it (``host:port`` strings)."""

    name: str
    pg_port: int
    api_port: int
    repl_proxy: str  # connect_address (other nodes' replication and pg_rewind)
    api_proxy: str  # restapi.connect_address
    dcs_proxy: str  # this node's way to etcd


@dataclass(frozen=True)
class Logins:
    """The superuser and replication logins Patroni creates at bootstrap and uses between nodes."""

    superuser_password: str
    replication_password: str


def etcd_argv(binary: str, data_dir: Path, client_port: int, peer_port: int, advertise: str) -> list[str]:
    """The command line of the single etcd member (client URL ``advertise`` is the DCS proxy of n1;
    Patroni ignores it anyway with ``use_proxies``)."""
    peer = f"http://127.0.0.1:{peer_port}"
    return [binary, "--name", "e1", "--data-dir", str(data_dir),
            "--listen-client-urls", f"http://127.0.0.1:{client_port}",
            "--advertise-client-urls", f"http://{advertise}",
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"e1={peer}", "--initial-cluster-state", "new",
            "--heartbeat-interval", "100", "--election-timeout", "1000", "--logger", "zap"]


def hba_lines() -> list[str]:
    """Superuser over the Unix socket (trust, harness use); everything over TCP with a password."""
    return ["local all all trust",
            "host replication replicator 127.0.0.1/32 scram-sha-256",
            "host all all 127.0.0.1/32 scram-sha-256"]


#: Patroni's ``maximum_lag_on_failover`` (bytes; its default): the WAL part of the documented
#: asynchronous-mode loss bound (harness/rules/durability_bound.py).
MAXIMUM_LAG_ON_FAILOVER = 1048576


def node_config(scope: str, node: NodeAddresses, node_dir: Path, bindir: Path, timing: PatroniTiming,
                logins: Logins) -> dict[str, Any]:
    """The Patroni configuration of ``node`` (its data directory is ``node_dir/data``, its socket
    and logs ``node_dir``)."""
    return {
        "scope": scope,
        "name": node.name,
        "log": {"dir": str(node_dir), "level": "INFO", "file_num": 2, "file_size": 10_000_000},
        "restapi": {"listen": f"127.0.0.1:{node.api_port}", "connect_address": node.api_proxy},
        "etcd3": {"hosts": [node.dcs_proxy], "protocol": "http", "use_proxies": True},
        "bootstrap": {
            "dcs": {
                "ttl": timing.ttl, "loop_wait": timing.loop_wait, "retry_timeout": timing.retry_timeout,
                "maximum_lag_on_failover": MAXIMUM_LAG_ON_FAILOVER, "synchronous_mode": timing.synchronous_mode,
                "primary_stop_timeout": timing.primary_stop_timeout,
                "synchronous_mode_strict": timing.synchronous_mode_strict,
                "postgresql": {"use_pg_rewind": True, "use_slots": True,
                               "parameters": {"wal_level": "replica", "hot_standby": "on", "wal_log_hints": "on",
                                              "max_wal_senders": 10, "max_replication_slots": 10,
                                              "wal_keep_size": "64MB", "max_connections": 50,
                                              "shared_buffers": "16MB"}},
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, {"wal-segsize": "1"}],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{node.pg_port}",
            "connect_address": node.repl_proxy,
            "data_dir": str(node_dir / "data"),
            "bin_dir": str(bindir),
            "pgpass": str(node_dir / "pgpass"),
            "use_unix_socket": True,
            "basebackup": [{"checkpoint": "fast"}],  # a spread checkpoint makes a clone wait minutes
            "authentication": {
                "superuser": {"username": "postgres", "password": logins.superuser_password},
                "replication": {"username": "replicator", "password": logins.replication_password},
            },
            "parameters": {"unix_socket_directories": str(node_dir), "fsync": "off",
                           "logging_collector": "off"},
            "pg_hba": hba_lines(),
        },
        "watchdog": {"mode": "off"},
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
    }


def write_node_config(path: Path, config: dict[str, Any]) -> Path:
    """Write a node's configuration (mode 0600: it holds the logins' passwords)."""
    from harness.redact import write_private_file

    return write_private_file(path, json.dumps(config, indent=1))
