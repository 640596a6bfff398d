"""App profile clients (APP rules): application-side pools (protocol :mod:`harness.clients.app.protocol`).
Importing this package registers them under profile ``app``: ``sqlalchemy-preping`` (the reference),
``sqlalchemy``, ``psycopg-pool-check``, ``psycopg-pool``, ``asyncpg-pool``; through a Node helper
``node-pg-pool`` (node-postgres ``Pool``, one host: it has no host list); through the generic JDBC
helper ``hikaricp`` (HikariCP over pgjdbc). A factory takes an
:class:`~harness.clients.app.protocol.AppTarget` and returns an
:class:`~harness.clients.app.protocol.AppPool`; the pool library is imported when the pool is built."""

from __future__ import annotations

from harness.clients.app import java_pools as _java
from harness.clients.app import node_pools as _node
from harness.clients.app import python_pools as _py
from harness.clients.registry import register_client

APP_CLIENTS = {
    "sqlalchemy-preping": _py.sqlalchemy_preping,
    "sqlalchemy": _py.sqlalchemy_plain,
    "psycopg-pool-check": _py.psycopg_pool_check,
    "psycopg-pool": _py.psycopg_pool_plain,
    "asyncpg-pool": _py.asyncpg_pool,
    "node-pg-pool": _node.node_pg_pool,
    "hikaricp": _java.hikaricp,
}

for _name, _factory in APP_CLIENTS.items():
    register_client("app", _name, _factory)
register_client("app", "reference", _py.sqlalchemy_preping)
