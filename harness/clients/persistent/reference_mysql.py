"""``reference`` on MariaDB: the harness's own MySQL-protocol persistent proxy
(:mod:`harness.persistproxy.mysql`, PER-1..PER-8) as a
:class:`~harness.clients.persistent.protocol.PersistentClient` in front of a MariaDB pair or group.
:func:`harness.clients.persistent.reference.reference_client` picks it when the pair's engine speaks
the MySQL protocol."""

from __future__ import annotations

from typing import Any

from harness.clients.persistent.embedded import EmbeddedProxyClient
from harness.errors import ConfigError
from harness.persistproxy.mysql import MySQLPersistentProxy, MySQLProxyConfig

MYSQL_ENGINES = ("mariadb",)


class MySQLReferenceClient(EmbeddedProxyClient):
    """The reference MySQL proxy in front of the pair, reaching the principal through its
    client-facing (fault-proxied) address; ``before_switchover`` = ``drain()``,
    ``after_switchover(address)`` = ``resume(address)``."""

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


def speaks_mysql(pair: Any) -> bool:
    """True when the pair's engine speaks the MySQL protocol (MariaDB)."""
    return getattr(getattr(pair, "engine", None), "name", None) in MYSQL_ENGINES
