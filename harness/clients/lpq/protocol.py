"""What an LPQ client adapter offers the harness (profile ``lpq``, RULEBOOK LPQ-1…6): a PostgreSQL
driver opening a connection from a *host list*, translated as thinly as possible into the driver's
own options (no retry logic of the adapter's own - the point is to judge the driver).

An adapter is constructed as ``factory(history=None, process=None, **options)`` and offers:

* ``driver`` (e.g. ``"psycopg 3.3.9 (libpq 18.0)"``): name and version, shown in the matrix;
* ``not_offered(spec) -> str | None``: why the driver has no way to express ``spec`` (a host list at
  all, a ``target_session_attrs`` value, ``load_balance_hosts=random``), in one line - or None.
  The suites ask before opening, and a cell the driver does not offer reads *not offered*;
* ``open(spec)`` with a :class:`HostListSpec`: returns a connection (``execute(sql) -> list[tuple]``
  of text values, ``close()``) or raises :class:`HostListOpenError` (the driver's message and
  SQLSTATE); ``shutdown()`` closes everything.

:class:`HostListAdapter` does the recording (``op.invoke``/``op.ok``/``op.fail`` of ``open``,
``execute``, ``close`` under the client's ``process``; docs/events.md): an adapter subclasses it and
writes ``_connect(spec)``, ``_execute(handle, sql)`` and ``_close(handle)`` only. The per-host
attempts are never self-reported: the harness sees them at the fault proxies and in the
refused-connect capture."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from harness.clients.mirroring.protocol import Recorder, first_line
from harness.errors import ConnectionOpenError, MirroringClientError
from harness.redact import redact
from harness.rules.lpq.spec import SESSION_ATTRS, HostListSpec

__all__ = ["SESSION_ATTRS", "HostListAdapter", "HostListClientError", "HostListConnection", "HostListOpenError",
           "HostListSpec", "NotOfferedError", "one_line"]

class HostListClientError(MirroringClientError):
    """Base of what an LPQ client raises to the application (a test outcome, never a harness error)."""

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


class HostListOpenError(ConnectionOpenError):
    """An open failed: the driver's message (redacted) and SQLSTATE when the server sent one."""

    def __init__(self, message: str, *, sqlstate: str | None = None, reason: str = "error") -> None:
        self.sqlstate = sqlstate
        super().__init__(message, reason=reason)


class NotOfferedError(HostListClientError):
    """The driver has no way to express the spec (``not_offered`` said why); nothing was attempted."""


class HostListConnection:
    """A connection opened by a :class:`HostListAdapter` (records ``execute`` and ``close``)."""

    def __init__(self, client: HostListAdapter, handle: Any) -> None:
        self._client, self.handle, self._closed = client, handle, False

    def execute(self, sql: str) -> list[tuple[Any, ...]]:
        """Run one statement (autocommit); rows of text values ([] when it returns none)."""
        rec = self._client.recorder
        op = rec.invoke("execute", sql)
        try:
            rows = self._client._execute(self.handle, sql)
        except HostListClientError as exc:
            rec.fail(op, "execute", f"{type(exc).__name__}: {exc}", sqlstate=exc.sqlstate)
            raise
        rec.ok(op, "execute", len(rows))
        return rows

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._closed:
            return
        self._closed = True
        rec = self._client.recorder
        op = rec.invoke("close")
        try:
            self._client._close(self.handle)
        except HostListClientError as exc:
            rec.fail(op, "close", str(exc))
            return
        rec.ok(op, "close")
        self._client._forget(self)


class HostListAdapter:
    """Base of the LPQ adapters: recording, bookkeeping and shutdown around three driver calls."""

    driver = "?"
    #: ``target_session_attrs`` values the driver can express (others are *not offered*).
    session_attrs: Sequence[str] = SESSION_ATTRS
    #: whether the driver offers ``load_balance_hosts=random`` (LPQ-6).
    random_order = False
    #: whether the driver takes more than one host at all.
    host_list = True

    def __init__(self, *, history: Any = None, process: Any = None, **options: Any) -> None:
        self.recorder = Recorder(history, process)
        self.extra_options = dict(options)
        self._connections: list[HostListConnection] = []
        self._lock = threading.Lock()
        self._shut = False

    @property
    def process(self) -> Any:
        """The process id this client records under."""
        return self.recorder.process

    def not_offered(self, spec: HostListSpec) -> str | None:
        """Why the driver cannot express ``spec`` (None: it can)."""
        if len(spec.hosts) > 1 and not self.host_list:
            return f"{self.driver} takes a single host: no host list"
        if spec.target_session_attrs not in self.session_attrs:
            return f"{self.driver} has no target_session_attrs={spec.target_session_attrs}"
        if spec.load_balance_hosts == "random" and not self.random_order:
            return f"{self.driver} has no random host order (load_balance_hosts)"
        return None

    def describe(self, spec: HostListSpec) -> str:
        """The driver-native form of ``spec`` as recorded in the history (no password)."""
        return spec.libpq_conninfo(redacted=True)

    def open(self, spec: HostListSpec) -> HostListConnection:
        """Open a connection with the driver's own host-list handling (LPQ-1…6)."""
        why = self.not_offered(spec)
        if why is not None:
            raise NotOfferedError(why)
        rec = self.recorder
        op = rec.invoke("open", {**spec.value(), "driver": self.driver, "conninfo": redact(self.describe(spec))})
        if self._shut:
            rec.fail(op, "open", "client is shut down", reason="aborted")
            raise HostListOpenError("the client is shut down", reason="aborted")
        try:
            handle = self._connect(spec)
        except HostListOpenError as exc:
            rec.fail(op, "open", f"{type(exc).__name__}: {exc}", reason=exc.reason, sqlstate=exc.sqlstate)
            raise
        conn = HostListConnection(self, handle)
        with self._lock:
            self._connections.append(conn)
        rec.ok(op, "open", {"host": self._host(handle)})
        return conn

    def shutdown(self) -> None:
        """Close every connection this client opened and refuse further opens."""
        self._shut = True
        with self._lock:
            conns = list(self._connections)
        for c in conns:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a broken connection is simply dropped at shutdown
                pass
        self._stop()

    def _forget(self, conn: HostListConnection) -> None:
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)

    # -- what an adapter writes ------------------------------------------------------------------
    def _connect(self, spec: HostListSpec) -> Any:
        """Open with the driver; raise :class:`HostListOpenError` for the driver's failure."""
        raise NotImplementedError

    def _execute(self, handle: Any, sql: str) -> list[tuple[Any, ...]]:
        """Run ``sql``; rows of text; raise :class:`HostListClientError` for the driver's failure."""
        raise NotImplementedError

    def _close(self, handle: Any) -> None:
        """Close the driver's connection."""
        raise NotImplementedError

    def _host(self, handle: Any) -> str | None:
        """What the driver says it is connected to, if it says (informative only)."""
        return None

    def _stop(self) -> None:
        """Release the driver's resources (a helper process, an event loop) at shutdown."""


def one_line(exc: BaseException) -> str:
    """A driver error on one line (redacted)."""
    return redact(first_line(str(exc)) or type(exc).__name__)
