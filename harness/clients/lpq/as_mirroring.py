"""Every LPQ driver as a *mirroring* client too (docs/lpq.md): ``Server=A; Failover Partner=B``
becomes the host list ``[A, B]`` with ``target_session_attrs=read-write`` and ``connect_timeout =
max(2, ceil(login timeout))`` - as a PostgreSQL user would write it, exactly like
``psycopg-multihost`` (docs/mirroring.md). The driver's own host-list handling then meets MIR-1…13.
Registered under profile ``mirroring`` as ``lpq-<name>`` (``lpq-libpq``, ``lpq-postgres-js`` …).

Records like every mirroring adapter (``op.*`` with the MIR ``op.invoke`` value); it cannot see
its per-host attempts (no ``attempt.*``): the checkers use the fault proxies and the capture.
``presented_server`` is what the driver reports when it says (else ``host:port`` of the server that
answered ``inet_server_port()`` - the partner actually reached). A broken connection (an error
without SQLSTATE, or class 08 / 57P01…57P03) raises ``ConnectionLostError`` (MIR-11)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness.clients.lpq.protocol import HostListAdapter, HostListClientError, HostListOpenError
from harness.clients.mirroring.protocol import (
    ConnectionLostError,
    ConnectionOpenError,
    Recorder,
    parse_recorded,
    spec_value,
)
from harness.rules.connstring import ConnectionSpec
from harness.rules.lpq.spec import HostListSpec

LOST_STATES = ("57P01", "57P02", "57P03")


def host_list_of(spec: ConnectionSpec) -> HostListSpec:
    """The host list a PostgreSQL user writes for ``Server=A; Failover Partner=B``."""
    hosts = [spec.initial] + ([spec.failover] if spec.failover is not None else [])
    timeout = None if spec.login_timeout is None else max(2, math.ceil(spec.login_timeout))
    return HostListSpec(hosts=tuple((a.host, a.port) for a in hosts), dbname=spec.database, user=spec.user or "",
                        password=spec.password, connect_timeout=timeout, target_session_attrs="read-write")


class MirroredConnection:
    """A driver connection seen as a mirroring connection."""

    def __init__(self, client: HostListMirroringClient, handle: Any, presented: str) -> None:
        self._client, self._handle, self.presented_server, self._closed = client, handle, presented, False

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement (no placeholders: the drivers' styles differ; ``params`` must be empty)."""
        rec = self._client.recorder
        op = rec.invoke("execute", sql)
        if params:
            rec.fail(op, "execute", "placeholders are not supported by this adapter")
            raise HostListClientError("placeholders are not supported by this adapter")
        try:
            rows = self._client.driver._execute(self._handle, sql)
        except HostListClientError as exc:
            state = exc.sqlstate or ""
            if not state or state.startswith("08") or state in LOST_STATES:
                rec.info(op, "execute", f"ConnectionLostError: {exc}")
                raise ConnectionLostError(f"connection to {self.presented_server} lost: {exc}") from None
            rec.fail(op, "execute", f"{type(exc).__name__}: {exc}")
            raise
        rec.ok(op, "execute", len(rows))
        return rows

    def close(self) -> None:
        """Close (idempotent)."""
        if self._closed:
            return
        self._closed = True
        op = self._client.recorder.invoke("close")
        try:
            self._client.driver._close(self._handle)
        except HostListClientError:
            pass
        self._client.recorder.ok(op, "close")


class HostListMirroringClient:
    """A mirroring client over one LPQ driver adapter (its three driver calls, none of its recording)."""

    def __init__(self, driver: HostListAdapter, *, history: Any = None, process: Any = None) -> None:
        self.driver = driver
        self.recorder = Recorder(history, process)
        self._connections: list[MirroredConnection] = []
        self._shut = False

    @property
    def process(self) -> Any:
        """The process id this client records under."""
        return self.recorder.process

    def open(self, spec: ConnectionSpec | str) -> MirroredConnection:
        """Open with the driver's host list (see the module docstring)."""
        rec = self.recorder
        spec, text = parse_recorded(rec, spec)
        hosts = host_list_of(spec)
        op = rec.invoke("open", {**spec_value(spec, text), "conninfo": self.driver.describe(hosts)})
        if self._shut:
            rec.fail(op, "open", "client is shut down", reason="aborted")
            raise ConnectionOpenError("the client is shut down", reason="aborted")
        try:
            handle = self.driver._connect(hosts)
        except HostListOpenError as exc:
            rec.fail(op, "open", f"{type(exc).__name__}: {exc}", reason=exc.reason)
            raise ConnectionOpenError(f"{self.driver.driver} could not connect: {exc}", reason=exc.reason) from None
        served = self.driver._host(handle)
        if not served:
            try:
                port = self.driver._execute(handle, "SELECT inet_server_port()::text")[0][0]
                served = f"{spec.initial.host}:{port}"
            except HostListClientError:
                served = None
        conn = MirroredConnection(self, handle, served or "")
        self._connections.append(conn)
        rec.ok(op, "open", {"presented_server": conn.presented_server, "served_by": served})
        return conn

    def abort(self) -> None:
        """The drivers' opens cannot be interrupted from another thread (documented gap)."""

    def shutdown(self) -> None:
        """Close every connection, refuse further opens, stop the driver (its helper process)."""
        self._shut = True
        for c in list(self._connections):
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a broken connection is dropped at shutdown
                pass
        self.driver.shutdown()


def as_mirroring(lpq_factory: Any) -> Any:
    """A mirroring factory over an LPQ factory."""

    def make(history: Any = None, process: Any = None, **options: Any) -> HostListMirroringClient:
        return HostListMirroringClient(lpq_factory(**options), history=history, process=process)

    make.__doc__ = f"Mirroring factory over {getattr(lpq_factory, '__name__', lpq_factory)}."
    return make
