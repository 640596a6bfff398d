"""LPQ profile clients (RULEBOOK LPQ-1…6): PostgreSQL drivers opening from a host list, each a thin
translation of the driver's own host-list options (protocol: :mod:`harness.clients.lpq.protocol`;
docs/clients.md). Importing this package registers them with :mod:`harness.clients.registry` under
profile ``lpq``.

C: ``reference`` = ``libpq`` (the newest libpq at hand, through ctypes), ``libpq-system``;
Python: ``psycopg`` (3), ``psycopg2``, ``asyncpg``, ``pg8000``; Node (one JSON-lines helper process
per client): ``node-pg``, ``postgres-js``; Java (one JSON-lines helper process): ``pgjdbc``."""

from __future__ import annotations

import importlib
from typing import Any

from harness.clients.registry import register_client

#: name -> "module:factory" (the module under harness.clients.lpq). Every driver package is a
#: dependency of the project (pyproject.toml, tools/drivers/node, scripts/setup.sh): one that cannot
#: be imported is a ConfigError of the registry, never a silently missing column.
LPQ_CLIENTS: dict[str, str] = {
    "libpq": "libpq:reference",
    "libpq-system": "libpq:libpq_system",
    "psycopg": "psycopg3:make",
    "psycopg2": "psycopg2_libpq:make",
    "asyncpg": "asyncpg_driver:make",
    "pg8000": "pg8000_driver:make",
    "node-pg": "node:node_pg",
    "postgres-js": "node:postgres_js",
    "pgjdbc": "jdbc:pgjdbc",
}


def factory(name: str) -> Any:
    """The factory of the registered LPQ client ``name``."""
    module, _, attr = LPQ_CLIENTS[name].partition(":")
    return getattr(importlib.import_module(f"harness.clients.lpq.{module}"), attr)


for _name in LPQ_CLIENTS:
    register_client("lpq", _name, factory(_name))
register_client("lpq", "reference", factory("libpq"))  # the profile's default (--client omitted)

#: The same drivers as mirroring clients (``lpq-<name>``; docs/lpq.md): the host list is
#: ``[Server, Failover Partner]`` with ``target_session_attrs=read-write`` (as_mirroring.py).
MIRRORING_DRIVERS = ("libpq", "psycopg", "psycopg2", "asyncpg", "postgres-js", "pgjdbc")


def _register_mirroring() -> None:
    from harness.clients.lpq.as_mirroring import as_mirroring

    for name in MIRRORING_DRIVERS:
        register_client("mirroring", f"lpq-{name}", as_mirroring(factory(name)))


_register_mirroring()
