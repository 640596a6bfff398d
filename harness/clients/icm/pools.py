"""What a proxying ICM router's configuration lists (HAProxy backends, nginx upstreams), per database
and scheme: one pool named after both, holding the servers with a replica of the database (ICM-1),
each once as an active server with its Server_MaxUsers and RESTRICTED settings (ICM-4) and once more
as a backup (ICM-6's last resort). Each adapter writes these entries in its own syntax. Pure: reads
the cluster, writes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def pool_name(scheme: str, database: str) -> str:
    """The pool of ``database`` on ``scheme``: ``http_mail`` for ``mail.nsf`` over HTTP."""
    return f"{scheme}_{database.removesuffix('.nsf')}"


@dataclass(frozen=True)
class PoolEntry:
    """One server line of a pool: where the router reaches the server (its fault proxy) and, for an
    active entry, its settings (``max_users`` 0: no limit)."""

    server: str
    host: str
    port: int
    backup: bool
    max_users: int = 0
    restricted: int = 0  # Server_Restricted (non-zero: RESTRICTED)


def pool_entries(cluster: Any, scheme: str, database: str) -> list[PoolEntry]:
    """The entries of ``database``'s pool on ``scheme``: every server holding a replica as an
    active entry (ICM-1, with Server_MaxUsers / RESTRICTED, ICM-4), then each again as a backup
    (ICM-6), in the cluster's order."""
    holders = cluster.holders(database)
    active = []
    for server in holders:
        host, port = cluster.address(server, scheme)
        s = cluster.settings(server)
        active.append(PoolEntry(server, host, port, False, s.max_users, s.restricted))
    backups = [PoolEntry(server, *cluster.address(server, scheme), True) for server in holders]
    return active + backups
