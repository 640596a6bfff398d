"""``direct``: plain psycopg with a multi-host connection string over the nodes' client-facing
addresses - no proxy, so every connection is lost at a switchover (a reconnect finds the new
principal). The PER profile's baseline (PER-1..PER-4 expected violated)."""

from __future__ import annotations

from typing import Any

from harness.clients.persistent.protocol import Address, ClientBase
from harness.errors import ConfigError
from harness.topology import postgres as pg


class DirectClient(ClientBase):
    """Baseline (PER-1..8 expected violated where a proxy matters): sessions connect straight to the
    current principal's client-facing address; nothing coordinates, nothing is kept."""

    name = "direct"
    coordinates = False

    def start(self) -> Address:
        """Nothing to start: the address is the principal's at start time (fixed afterwards, as an
        application configured with one host would be)."""
        self.address = tuple(self.pair.principal.client_address)  # type: ignore[assignment]
        self._emit("client.start", address=f"{self.address[0]}:{self.address[1]}")
        return self.address  # type: ignore[return-value]

    def dsn(self, dbname: str = pg.APP_DATABASE, **params: Any) -> str:
        """A multi-host string over every node (``target_session_attrs=read-write``) so that a
        session that reconnects finds the new principal - the connection itself is never kept."""
        if self.address is None:
            raise ConfigError("client direct is not started: call start() first")
        return self.pair.dsn(dbname=dbname, user=self.user, password=self.password, **params)

    def before_switchover(self) -> Any:
        """Not coordinated (never called by the suites)."""
        return None

    def after_switchover(self, new_principal_address: Address) -> Any:
        """Not coordinated."""
        return None

    def stop(self) -> None:
        """Nothing to stop."""
        if self.address is not None:
            self._emit("client.stop")
        self.address = None


def direct(*, pair: Any, history: Any = None, drain_window: float = 60.0, recovery_window: float = 60.0,
           **options: Any) -> DirectClient:
    """Direct psycopg, no proxy: the baseline of the PER profile (PER-1 expected violated). Takes
    ``user`` / ``password`` as options; any other is a ConfigError."""
    unknown = sorted(set(options) - {"user", "password"})
    if unknown:
        raise ConfigError(f"client direct takes no option(s) {', '.join(unknown)}; it has only user and password")
    return DirectClient(pair, history, drain_window, recovery_window, **options)
