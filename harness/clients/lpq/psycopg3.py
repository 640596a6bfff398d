"""psycopg 3 with a multi-host connection string (profile ``lpq``, name ``psycopg``). psycopg 3
resolves the host list and tries the hosts itself (in Python, one libpq attempt per host), so it is
judged apart from libpq. The spec is handed over as the libpq string; nothing else."""

from __future__ import annotations

from typing import Any

import psycopg

from harness.clients.lpq.protocol import (
    HostListAdapter,
    HostListClientError,
    HostListOpenError,
    HostListSpec,
    one_line,
)


class PsycopgClient(HostListAdapter):
    """``psycopg.connect(conninfo, autocommit=True)``."""

    driver = f"psycopg {psycopg.__version__} (Python; libpq {psycopg.pq.version() // 10000})"
    random_order = True

    def _connect(self, spec: HostListSpec) -> Any:
        try:
            return psycopg.connect(spec.libpq_conninfo(), autocommit=True)
        except psycopg.Error as exc:
            raise HostListOpenError(one_line(exc), sqlstate=getattr(exc, "sqlstate", None)) from None

    def _execute(self, handle: Any, sql: str) -> list[tuple[Any, ...]]:
        try:
            cur = handle.execute(sql)
            return [tuple(None if v is None else str(v) for v in r) for r in cur.fetchall()] \
                if cur.description is not None else []
        except psycopg.Error as exc:
            raise HostListClientError(one_line(exc), sqlstate=getattr(exc, "sqlstate", None)) from None

    def _close(self, handle: Any) -> None:
        handle.close()

    def _host(self, handle: Any) -> str | None:
        return f"{handle.info.host}:{handle.info.port}"


def make(history: Any = None, process: Any = None, **options: Any) -> PsycopgClient:
    """Factory of ``psycopg``."""
    return PsycopgClient(history=history, process=process, **options)
