"""ACR profile clients (DB2 automatic client reroute, RULEBOOK ACR-1…9): the protocol every adapter
follows, the reference client (``reference`` = seamless, ``reference-non-seamless``) and the adapters
of real drivers (``psycopg-multihost``, ``pgjdbc``, ``aws-wrapper``). See ``docs/acr.md``.

Importing this package registers them with :mod:`harness.clients.registry` under profile ``acr``;
:data:`ACR_CLIENTS` maps the names to their factories."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.clients.acr.pgjdbc import pgjdbc
from harness.clients.acr.protocol import OUTCOME_CLASSES, AcrClient, AcrConnection, outcome_class
from harness.clients.acr.psycopg_multihost import psycopg_multihost
from harness.clients.acr.reference import ReferenceAcrClient, make, non_seamless
from harness.clients.registry import register_client

ACR_CLIENTS: dict[str, Callable[..., Any]] = {
    "reference": make,
    "reference-non-seamless": non_seamless,
    "psycopg-multihost": psycopg_multihost,
    "pgjdbc": pgjdbc,
}

for _name, _factory in ACR_CLIENTS.items():
    register_client("acr", _name, _factory)

__all__ = ["ACR_CLIENTS", "OUTCOME_CLASSES", "AcrClient", "AcrConnection", "ReferenceAcrClient", "make",
           "non_seamless", "outcome_class", "pgjdbc", "psycopg_multihost"]
