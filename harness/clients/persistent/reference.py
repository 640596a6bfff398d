"""``reference``: the harness's own persistent-connection proxy (:mod:`harness.persistproxy`,
PER-1..PER-8) as a :class:`~harness.clients.persistent.protocol.PersistentClient` in front of a pair."""

from __future__ import annotations

from typing import Any

from harness.clients.persistent.embedded import EmbeddedProxyClient
from harness.clients.persistent.protocol import Address
from harness.errors import ConfigError
from harness.persistproxy import ProxyConfig, ThreadedPersistentProxy
from harness.topology import postgres as pg


class ReferenceClient(EmbeddedProxyClient):
    """The reference persistent-connection proxy (:class:`ThreadedPersistentProxy`, PER-1..8) in
    front of the pair, reaching the principal through its client-facing (fault-proxied) address;
    ``before_switchover`` = ``drain()``, ``after_switchover(address)`` = ``resume(address)``.
    ``admin=("127.0.0.1", 0)`` also serves the HTTP admin API; its token is :attr:`admin_token` and
    its ``POST /resume`` accepts only the pair's nodes as they are now (their client-facing
    addresses: a node added later too). Read-only routing (``endpoints=``) names each standby, so
    that a node added later at a removed node's address is routed to (PER-9)."""

    def __init__(self, pair: Any, history: Any = None, drain_window: float = 60.0,
                 recovery_window: float = 60.0, admin: Address | None = None, **options: Any) -> None:
        super().__init__(pair, history, drain_window, recovery_window, user=options.pop("user", None),
                         password=options.pop("password", None))
        options.setdefault("allowed_principals", lambda: _node_addresses(self.pair))
        if options.get("endpoints"):  # PER-9/10: read-only endpoints route to the standbys
            options.setdefault("readonly_resolver", lambda: [(*n.client_address, n.name) for n in self.pair.standbys
                                                             if n.state == "running"])
            options.setdefault("removal_window", drain_window)
        self.config = ProxyConfig(user=self.user, password=self.password,
                                  resolver=lambda: self.pair.principal.client_address,
                                  on_event=history.record if history is not None else None,
                                  drain_window=self.drain_window, recovery_window=self.recovery_window,
                                  **options)
        self.proxy = ThreadedPersistentProxy(self.config, admin=admin)

    @property
    def admin_token(self) -> str | None:
        """The token the admin API requires (None without ``admin=``)."""
        return self.proxy.admin_token

    @property
    def admin_address(self) -> Address | None:
        """Where the admin API listens once started (None without ``admin=``)."""
        return self.proxy.admin_address

    def endpoint_address(self, kind: str) -> Address:
        """Where the read-only endpoint ``kind`` listens (PER-10; ``cluster`` = :attr:`address`)."""
        if kind == "cluster" and self.address is not None:
            return self.address
        for k, address in self.proxy.proxy.endpoint_addresses:
            if k == kind:
                return address
        raise ConfigError(f"reference proxy has no {kind!r} endpoint; start it with endpoints=[({kind!r}, "
                          "('127.0.0.1', 0))]")

    def endpoint_dsn(self, kind: str, dbname: str = pg.APP_DATABASE) -> str:
        """A connection string through endpoint ``kind`` (PER-10)."""
        host, port = self.endpoint_address(kind)
        return f"host={host} port={port} dbname={dbname} user={self.user} password={self.password}"

    def prepare_switchover(self, next_principal_address: Address) -> Any:
        """The PER-1 stall: pre-attach the kept sessions to the hot standby about to be promoted
        (:meth:`PersistentProxy.prepare`; returns at once, the resume takes them if they are ready)."""
        return self.proxy.prepare(tuple(next_principal_address))

    def before_remove_node(self, address: Address) -> Any:
        """PER-9/10: route away from the read-only node at ``address`` (named, so that a node added
        later at that address is routed to), move or close its sessions."""
        address = (str(address[0]), int(address[1]))
        node = next((n.name for n in getattr(self.pair, "nodes", None) or []
                     if tuple(n.client_address) == address), None)
        return self.proxy.remove_node(address, node=node)


def _node_addresses(pair: Any) -> list[Address]:
    """The client-facing address of every node of the topology now (the admin ``/resume`` allow-list)."""
    nodes = getattr(pair, "nodes", None) or [pair.principal]
    return [tuple(node.client_address) for node in nodes]


def reference_client(*, pair: Any, history: Any = None, drain_window: float = 60.0,
                     recovery_window: float = 60.0, **options: Any) -> ReferenceClient:
    """The reference proxy as a :class:`PersistentClient` (PER-1..PER-8): the PER profile's default
    client (``--client reference``); on a MariaDB pair, the MySQL-protocol one (docs/mariadb.md)."""
    from harness.clients.persistent.reference_mysql import MySQLReferenceClient, speaks_mysql

    if speaks_mysql(pair):
        return MySQLReferenceClient(pair, history, drain_window, recovery_window, **options)  # type: ignore[return-value]
    return ReferenceClient(pair, history, drain_window, recovery_window, **options)
