"""Persistent-connection profile clients (RULEBOOK PER-1..PER-8), each a
:class:`~harness.clients.persistent.protocol.PersistentClient`:

* ``reference`` - the harness's own proxy (:mod:`harness.persistproxy`) - :mod:`.reference`;
* ``pgbouncer-session`` / ``pgbouncer-transaction`` - real PgBouncer 1.18 - :mod:`.pgbouncer`;
* ``direct`` - plain psycopg to the principal, the baseline - :mod:`.direct`;
* ``pgpool`` - real pgpool-II 4.3 in raw mode, re-pointed and restarted at a switchover - :mod:`.pgpool`.

Importing this package registers them (profile ``persistent``) with :mod:`harness.clients.registry`;
:data:`CLIENTS` maps the names to their factories."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.clients.persistent.direct import DirectClient, direct
from harness.clients.persistent.pgbouncer import PgBouncerClient, pgbouncer_session, pgbouncer_transaction
from harness.clients.persistent.pgpool import PgpoolClient, pgpool
from harness.clients.persistent.protocol import ClientBase, PersistentClient, open_client
from harness.clients.persistent.reference import ReferenceClient, reference_client
from harness.clients.registry import register_client

CLIENTS: dict[str, Callable[..., Any]] = {
    "reference": reference_client,
    "pgbouncer-session": pgbouncer_session,
    "pgbouncer-transaction": pgbouncer_transaction,
    "direct": direct,
    "pgpool": pgpool,
}

for _name, _factory in CLIENTS.items():
    register_client("persistent", _name, _factory)

__all__ = [
    "CLIENTS", "ClientBase", "DirectClient", "PersistentClient", "PgBouncerClient", "ReferenceClient", "direct",
    "open_client", "pgbouncer_session", "pgbouncer_transaction", "pgpool", "PgpoolClient", "reference_client",
]
