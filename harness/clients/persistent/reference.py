"""``reference``: the harness's own persistent-connection proxy (:mod:`harness.persistproxy`,
PER-1..PER-8) as a :class:`~harness.clients.persistent.protocol.PersistentClient` in front of a pair."""

from __future__ import annotations

from typing import Any

from harness.clients.persistent.protocol import Address, ClientBase
from harness.persistproxy import ProxyConfig, ThreadedPersistentProxy


class ReferenceClient(ClientBase):
    """The reference persistent-connection proxy (:class:`ThreadedPersistentProxy`, PER-1..8) in
    front of the pair, reaching the principal through its client-facing (fault-proxied) address;
    ``before_switchover`` = ``drain()``, ``after_switchover(address)`` = ``resume(address)``.
    ``admin=("127.0.0.1", 0)`` also serves the HTTP admin API; its token is :attr:`admin_token` and
    its ``POST /resume`` accepts only the pair's nodes (their client-facing addresses)."""

    name = "reference"

    def __init__(self, pair: Any, history: Any = None, drain_window: float = 60.0,
                 recovery_window: float = 60.0, admin: Address | None = None, **options: Any) -> None:
        super().__init__(pair, history, drain_window, recovery_window, user=options.pop("user", None),
                         password=options.pop("password", None))
        options.setdefault("allowed_principals", _node_addresses(pair))
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

    def start(self) -> Address:
        """Start the proxy thread and listener."""
        self.address = self.proxy.start()
        self._emit("client.start", address=f"{self.address[0]}:{self.address[1]}")
        return self.address

    def before_switchover(self) -> Any:
        """PER-4: drain (hold new work, wait up to the drain window, keep or close each session)."""
        return self.proxy.drain()

    def after_switchover(self, new_principal_address: Address) -> Any:
        """PER-1/2/3: reconnect kept sessions to the new principal, replay state, release them."""
        return self.proxy.resume(tuple(new_principal_address))

    def status(self) -> dict[str, Any]:
        """The proxy's status (sessions, counters)."""
        return self.proxy.status()

    def stop(self) -> None:
        """Stop the proxy (closes every session)."""
        if self.address is not None:
            self.proxy.stop()
            self._emit("client.stop")
        self.address = None


def _node_addresses(pair: Any) -> list[Address]:
    """The client-facing address of every node of the topology (the admin ``/resume`` allow-list)."""
    nodes = getattr(pair, "nodes", None) or [pair.principal]
    return [tuple(node.client_address) for node in nodes]


def reference_client(*, pair: Any, history: Any = None, drain_window: float = 60.0,
                     recovery_window: float = 60.0, **options: Any) -> ReferenceClient:
    """The reference proxy as a :class:`PersistentClient` (PER-1..PER-8): the PER profile's default
    client (``--client reference``)."""
    return ReferenceClient(pair, history, drain_window, recovery_window, **options)
