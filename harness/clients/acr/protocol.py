"""What an ACR client adapter offers the harness (profile ``acr``, RULEBOOK ACR-1…9, docs/acr.md).

An adapter is constructed as ``factory(history=None, process=None, **options)`` and offers:

* ``connect(spec)`` - ``spec`` is a :class:`~harness.topology.acr.AcrSpec` (the members, the
  group-wide address, the alternate group, the login); returns an :class:`AcrConnection`. A client
  may bind its transport lazily (ACR-7) or at once.
* ``shutdown()`` - close every connection it made.
* ``mode`` - ``"seamless"`` or ``"non-seamless"`` (which ACR behaviour the client claims; the
  checkers judge it by that mode).

An :class:`AcrConnection` runs statements inside transactions (a transaction begins with the first
statement after connect / commit / rollback; a ``SET`` outside a transaction is a special register):
``execute(sql, params=None) -> list[tuple]`` (all rows fetched), ``commit()``, ``rollback()``,
``cancel()`` (from another thread: interrupt the running statement, ACR-9) and ``close()``.

What the application sees is one of the profile's **outcome classes**, which the adapter maps its
driver's errors onto:

* *seamless*: the call returns normally (even though the member failed underneath);
* *rerouted-retry*: :class:`~harness.errors.Sql30108N` (SQLSTATE 08506) - the transaction was rolled
  back, the connection is (or will lazily be) re-established: retry the transaction;
* *communication-error*: :class:`~harness.errors.Sql30081N` (SQLSTATE 08001) - reconnection failed or
  the transport could not be reused: reconnect, re-establish state, retry;
* anything else (an SQL error of the statement itself) is raised as the driver raises it.

The workload (:mod:`harness.workload.acr`) records the application's operations (``op.*``); the
client may record its own view (``acr.transport`` per transport attempt, ``acr.replay``) under its
``process`` id; the checkers judge it by what the fault proxy and the server saw."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from harness.errors import AcrClientError as AcrClientError
from harness.errors import Sql30081N as Sql30081N
from harness.errors import Sql30108N as Sql30108N

MODES = ("seamless", "non-seamless")

#: The outcome class of an error the application got (``None``: the call returned, *seamless*).
OUTCOME_CLASSES = ("seamless", "rerouted-retry", "communication-error", "sql-error")


def outcome_class(error: BaseException | None) -> str:
    """The profile's outcome class of what a call raised (None: it returned)."""
    if error is None:
        return "seamless"
    if isinstance(error, Sql30108N):
        return "rerouted-retry"
    if isinstance(error, Sql30081N):
        return "communication-error"
    return "sql-error"


@runtime_checkable
class AcrConnection(Protocol):
    """A connection of an ACR client."""

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement in the current transaction (starting one if none is open); all rows."""
        ...

    def commit(self) -> None:
        """Commit the current transaction (ACR-5: seamless after a full fetch)."""
        ...

    def rollback(self) -> None:
        """Roll the current transaction back."""
        ...

    def cancel(self) -> None:
        """Interrupt the running statement (from another thread; ACR-9 failure code 4)."""
        ...

    def close(self) -> None:
        """Close the connection (idempotent)."""
        ...


@runtime_checkable
class AcrClient(Protocol):
    """An ACR client under test (the reference implementation or an adapter of a real driver)."""

    mode: str

    def connect(self, spec: Any) -> AcrConnection:
        """A connection to the group described by ``spec`` (an :class:`~harness.topology.acr.AcrSpec`)."""
        ...

    def shutdown(self) -> None:
        """Close every connection this client made."""
        ...
