"""psycopg2 (profile ``lpq``, name ``psycopg2``): a thin layer over libpq's own ``PQconnectdb``, so
the host list is libpq's - but with the libpq that psycopg2 is built with (the wheel's)."""

from __future__ import annotations

from typing import Any

import psycopg2

from harness.clients.lpq.protocol import (
    HostListAdapter,
    HostListClientError,
    HostListOpenError,
    HostListSpec,
    one_line,
)


def _libpq() -> str:
    v = psycopg2.__libpq_version__
    return f"{v // 10000}.{v % 10000}"


class Psycopg2Client(HostListAdapter):
    """``psycopg2.connect(conninfo)`` with autocommit."""

    driver = f"psycopg2 {psycopg2.__version__.split()[0]} (Python; libpq {_libpq()})"
    random_order = psycopg2.__libpq_version__ >= 160000

    def _connect(self, spec: HostListSpec) -> Any:
        try:
            conn = psycopg2.connect(spec.libpq_conninfo())
        except psycopg2.Error as exc:
            raise HostListOpenError(one_line(exc), sqlstate=exc.pgcode) from None
        conn.autocommit = True
        return conn

    def _execute(self, handle: Any, sql: str) -> list[tuple[Any, ...]]:
        try:
            with handle.cursor() as cur:
                cur.execute(sql)
                return [tuple(None if v is None else str(v) for v in r) for r in cur.fetchall()] \
                    if cur.description is not None else []
        except psycopg2.Error as exc:
            raise HostListClientError(one_line(exc), sqlstate=exc.pgcode) from None

    def _close(self, handle: Any) -> None:
        handle.close()

    def _host(self, handle: Any) -> str | None:
        return f"{handle.info.host}:{handle.info.port}"


def make(history: Any = None, process: Any = None, **options: Any) -> Psycopg2Client:
    """Factory of ``psycopg2``."""
    return Psycopg2Client(history=history, process=process, **options)
