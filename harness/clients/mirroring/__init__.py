"""Mirroring profile clients (RULEBOOK MIR-1…13): the protocol every adapter follows, the reference
client (``reference-native`` / ``reference-managed``) and the psycopg multi-host adapter
(``psycopg-multihost``). See ``docs/mirroring.md``.

Importing this package registers the three clients with :mod:`harness.clients.registry` under
profile ``mirroring``; :data:`MIRRORING_CLIENTS` maps the same names to their factories."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.clients.mirroring.protocol import (
    AttemptRecord,
    ConnectionLostError,
    ConnectionOpenError,
    MirroringClient,
    MirroringClientError,
    MirroringConnection,
    Recorder,
)
from harness.clients.mirroring.psycopg_multihost import PsycopgMultiHostClient, psycopg_multihost
from harness.clients.mirroring.reference import ReferenceMirroringClient, managed, native
from harness.clients.registry import register_client

MIRRORING_CLIENTS: dict[str, Callable[..., Any]] = {
    "reference-native": native,
    "reference-managed": managed,
    "psycopg-multihost": psycopg_multihost,
}


for _name, _factory in MIRRORING_CLIENTS.items():
    register_client("mirroring", _name, _factory)
register_client("mirroring", "reference", native)  # the profile's default (--client omitted)

__all__ = [
    "MIRRORING_CLIENTS", "AttemptRecord", "ConnectionLostError", "ConnectionOpenError", "MirroringClient",
    "MirroringClientError", "MirroringConnection", "PsycopgMultiHostClient", "Recorder",
    "ReferenceMirroringClient", "managed", "native", "psycopg_multihost",
]
