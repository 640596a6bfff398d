"""The PER profile's client protocol (RULEBOOK PER-1..PER-8): what every client under test of the
persistent-connection profile offers the suites, whatever it is (the reference proxy, PgBouncer, a
direct connection or a third-party adapter), and :func:`open_client`, which builds and starts one.

A :class:`PersistentClient` is started in front of a pair (``start()``), gives application sessions a
``dsn()``, is told about planned switchovers when it ``coordinates`` (``before_switchover()`` /
``after_switchover(address)``; the suites register it with ``faults.coordinate(client)``) and is
``stop()``-ped at the end. Factories take the same keywords (``pair``, ``history``, ``drain_window``,
``recovery_window``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from harness.errors import ClientStartError, ConfigError
from harness.ports import Address
from harness.topology import postgres as pg

__all__ = ["Address", "ClientBase", "ClientStartError", "PersistentClient", "open_client"]


@runtime_checkable
class PersistentClient(Protocol):
    """What the PER suites need from a client under test (uniform over every adapter)."""

    name: str
    coordinates: bool

    def start(self) -> Address:
        """Start in front of the pair; returns the address application sessions connect to."""

    def dsn(self, dbname: str = ..., **params: Any) -> str:
        """libpq connection string for one application session through this client."""

    def before_switchover(self) -> Any:
        """Drain before a planned switchover (only called when ``coordinates``)."""

    def after_switchover(self, new_principal_address: Address) -> Any:
        """Re-point and resume after a planned switchover (only called when ``coordinates``)."""

    def stop(self) -> None:
        """Stop, releasing every process, port and file."""


class ClientBase:
    """Shared plumbing: context manager, dsn built from ``address``, ``describe``."""

    name = "client"
    coordinates = True

    def __init__(self, pair: Any, history: Any = None, drain_window: float = 60.0,
                 recovery_window: float = 60.0, user: str | None = None, password: str | None = None) -> None:
        if pair is None:
            raise ConfigError(f"client {self.name} needs pair= (the topology it fronts)")
        if drain_window <= 0 or recovery_window <= 0:
            raise ConfigError("drain_window and recovery_window must be > 0 seconds")
        self.pair = pair
        self.history = history
        self.drain_window = float(drain_window)
        self.recovery_window = float(recovery_window)
        creds = _credentials(pair) if user is None or password is None else None
        if password is None and creds is None:
            raise ConfigError(f"client {self.name}: the pair has no engine credentials to log in with; "
                              "pass user= and password=")
        self.user = user if user is not None else (creds.user if creds else pg.APP_USER)
        self.password = password if password is not None else creds.password
        self.address: Address | None = None

    def _emit(self, type_: str, **fields: Any) -> None:
        if self.history is not None:
            self.history.record(type_, client=self.name, **fields)

    def dsn(self, dbname: str = pg.APP_DATABASE, **params: Any) -> str:
        """libpq connection string for an application session through this client."""
        if self.address is None:
            raise ConfigError(f"client {self.name} is not started: call start() first")
        host, port = self.address
        extra = "".join(f" {k}={v}" for k, v in params.items())
        return f"host={host} port={port} dbname={dbname} user={self.user} password={self.password}{extra}"

    def describe(self) -> dict[str, Any]:
        """Name, address and windows (recorded in history meta by the suites)."""
        addr = f"{self.address[0]}:{self.address[1]}" if self.address else None
        return {"client": self.name, "address": addr, "coordinates": self.coordinates,
                "drain_window": self.drain_window, "recovery_window": self.recovery_window}

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Address:  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def _credentials(pair: Any) -> Any:
    """The test login of the pair's engine (its random password, never printed), or None for a stand-in
    pair without an engine."""
    engine = getattr(pair, "engine", None)
    return getattr(engine, "credentials", None)


def open_client(factory: Callable[..., Any], *, pair: Any, history: Any = None, drain_window: float = 60.0,
                recovery_window: float = 60.0, **options: Any) -> PersistentClient:
    """Build and start the client under test from the suites' ``client_factory`` (PER-1..PER-8): the
    factory is called with ``pair``, ``history``, ``drain_window``, ``recovery_window`` and must return
    a :class:`PersistentClient` (else a ConfigError naming what is missing)."""
    client = factory(pair=pair, history=history, drain_window=drain_window, recovery_window=recovery_window,
                     **options)
    if not isinstance(client, PersistentClient):
        raise ConfigError(f"client factory {getattr(factory, '__qualname__', factory)!r} returned "
                          f"{type(client).__name__}, which lacks the PersistentClient methods (name, coordinates, "
                          "start, dsn, before_switchover, after_switchover, stop)")
    client.start()
    return client
