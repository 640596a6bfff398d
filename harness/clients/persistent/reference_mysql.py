"""``reference`` on MariaDB: the harness's own MySQL-protocol persistent proxy
(:mod:`harness.persistproxy.mysql`, PER-1..PER-8) as a
:class:`~harness.clients.persistent.protocol.PersistentClient` in front of a MariaDB pair or group.
:func:`harness.clients.persistent.reference.reference_client` picks it when the pair's engine speaks
the MySQL protocol."""

from __future__ import annotations

from typing import Any

from harness.clients.persistent.protocol import Address, ClientBase
from harness.errors import ConfigError
from harness.persistproxy.mysql import MySQLPersistentProxy, MySQLProxyConfig

MYSQL_ENGINES = ("mariadb",)


class MySQLReferenceClient(ClientBase):
    """The reference MySQL proxy in front of the pair, reaching the principal through its
    client-facing (fault-proxied) address; ``before_switchover`` = ``drain()``,
    ``after_switchover(address)`` = ``resume(address)``."""

    name = "reference"

    def __init__(self, pair: Any, history: Any = None, drain_window: float = 60.0,
                 recovery_window: float = 60.0, **options: Any) -> None:
        super().__init__(pair, history, drain_window, recovery_window, user=options.pop("user", None),
                         password=options.pop("password", None))
        if options:
            raise ConfigError(f"the MySQL reference proxy takes no option(s) {', '.join(sorted(options))}")
        self.proxy = MySQLPersistentProxy(MySQLProxyConfig(
            user=self.user, password=self.password, resolver=lambda: self.pair.principal.client_address,
            drain_window=self.drain_window, recovery_window=self.recovery_window,
            on_event=history.record if history is not None else None))

    def start(self) -> Address:
        """Start the proxy's listener thread."""
        self.address = self.proxy.start()
        self._emit("client.start", address=f"{self.address[0]}:{self.address[1]}")
        return self.address

    def before_switchover(self) -> Any:
        """PER-4: drain (hold new commands, wait up to the drain window, keep or close each session)."""
        return self.proxy.drain()

    def after_switchover(self, new_principal_address: Address) -> Any:
        """PER-1/2/3: log kept sessions in on the new principal, replay their state, release them."""
        return self.proxy.resume(tuple(new_principal_address))  # type: ignore[arg-type]

    def status(self) -> dict[str, Any]:
        """The proxy's counters."""
        return self.proxy.status()

    def stop(self) -> None:
        """Stop the proxy (closes every session)."""
        if self.address is not None:
            self.proxy.stop()
            self._emit("client.stop")
        self.address = None


def speaks_mysql(pair: Any) -> bool:
    """True when the pair's engine speaks the MySQL protocol (MariaDB)."""
    return getattr(getattr(pair, "engine", None), "name", None) in MYSQL_ENGINES
