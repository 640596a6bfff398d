"""What the reference clients of both engines share (RULEBOOK PER-1..PER-4): the harness's own
persistent proxy object (:attr:`EmbeddedProxyClient.proxy`: PostgreSQL's
:class:`~harness.persistproxy.ThreadedPersistentProxy` or the MySQL-protocol
:class:`~harness.persistproxy.mysql.MySQLPersistentProxy`) run in this process, its listener the
client's address, and the coordinated switchover handed to it as ``drain()`` / ``resume(address)``."""

from __future__ import annotations

from typing import Any

from harness.clients.persistent.protocol import Address, ClientBase


class EmbeddedProxyClient(ClientBase):
    """A :class:`ClientBase` whose subclass sets :attr:`proxy` (an object with ``start()``,
    ``drain()``, ``resume(address)``, ``status()`` and ``stop()``) in its ``__init__``."""

    name = "reference"
    proxy: Any
    #: its resume neither changes the run's state nor waits for the switchover's end: an async pair's
    #: switchover resumes it before the old principal's rewind (harness.faults.coordination, early resume)
    resume_inside_switchover = True

    def start(self) -> Address:
        """Start the proxy's listener (``client.start``)."""
        self.address = self.proxy.start()
        self._emit("client.start", address=f"{self.address[0]}:{self.address[1]}")
        return self.address

    def before_switchover(self) -> Any:
        """PER-4: drain (hold new work, wait up to the drain window, keep or close each session)."""
        return self.proxy.drain()

    def after_switchover(self, new_principal_address: Address) -> Any:
        """PER-1/2/3: reconnect kept sessions to the new principal, replay their state, release them."""
        return self.proxy.resume(tuple(new_principal_address))

    def status(self) -> dict[str, Any]:
        """The proxy's status (sessions, counters)."""
        return self.proxy.status()

    def stop(self) -> None:
        """Stop the proxy (closes every session; ``client.stop``)."""
        if self.address is not None:
            self.proxy.stop()
            self._emit("client.stop")
        self.address = None
