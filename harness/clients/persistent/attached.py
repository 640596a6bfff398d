"""Coordinators for the clients attached to a run from the command line (``persistent-proxy --run``,
``pgbouncer --run``): what ``failover-harness fault --run ID switchover`` uses to drain every one of
them before the role swap and resume them after it (RULEBOOK PER-1, PER-4), from another process.

* ``reference``: the proxy's HTTP admin API - ``POST /drain``, then ``POST /resume`` without an
  address (the proxy finds the new principal itself, from the run state), with the admin token read
  from its 0600 token file (never printed); before a node removal (``fault remove-node``)
  ``POST /remove-node`` with that node's address on the proxy's back-end path (PER-9/PER-10).
* ``pgbouncer-session`` / ``pgbouncer-transaction``: :class:`PgBouncerClient` rebuilt over the running
  pgbouncer (its folder and port): ``PAUSE`` / rewrite ``[databases]`` + ``RELOAD`` / ``RESUME``.
  It has no node concept (it points at the principal only), so a node removal asks nothing of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from harness.clients.persistent.pgbouncer import PgBouncerClient
from harness.clients.persistent.protocol import Address
from harness.errors import ConfigError, CoordinationError


def admin_post(name: str, url: str, path: str, body: dict[str, Any], token: str, timeout: float) -> Any:
    """``POST url+path`` to a reference proxy's admin API with its token; the JSON answer, or a
    CoordinationError naming the proxy and what went wrong (PER-1/PER-4 coordination)."""
    try:
        reply = httpx.post(url + path, json=body, headers={"X-Failover-Harness-Token": token}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise CoordinationError(f"{name}: POST {path} failed: {type(exc).__name__}: {exc}") from exc
    if reply.status_code != 200:
        raise CoordinationError(f"{name}: POST {path} answered {reply.status_code}: {reply.text[:200]}")
    return reply.json()

class AdminCoordinator:
    """A running reference proxy, driven through its admin API (PER-4 drain, PER-1/2/3 resume)."""

    #: ``POST /resume``: the proxy reads the run state, it does not change it (early resume)
    resume_inside_switchover = True

    def __init__(self, name: str, admin: str, token_file: str, drain_timeout: float | None = None,
                 addresses: dict[Address, Address] | None = None, names: dict[Address, str] | None = None) -> None:
        self.name = name
        self.url = f"http://{admin}"
        self.token_file = Path(token_file)
        self.drain_timeout = drain_timeout
        #: a node's client address -> its address on the proxy's back-end path (``--via server``)
        self.addresses = dict(addresses or {})
        #: a node's client address -> its name (the proxy ties a removal to it, PER-9)
        self.names = dict(names or {})
        #: the proxy's answer to the last ``POST /remove-node`` (``moved``, ``closed``, ``seconds``)
        self.last_removal: Any = None

    def _post(self, path: str, body: dict[str, Any], timeout: float) -> Any:
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise CoordinationError(f"cannot read the admin token of {self.name} ({self.token_file}): {exc}") from exc
        return admin_post(self.name, self.url, path, body, token, timeout)

    def before_switchover(self) -> Any:
        """``POST /drain`` (PER-4: waits up to the proxy's drain window)."""
        body = {} if self.drain_timeout is None else {"timeout": self.drain_timeout}
        return self._post("/drain", body, timeout=(self.drain_timeout or 60.0) + 30.0)

    def prepare_switchover(self, next_principal_address: Address) -> Any:
        """``POST /prepare`` with the node's address on the proxy's back-end path: pre-attach the kept
        sessions there while the switchover runs (the PER-1 stall; answers at once)."""
        key = (str(next_principal_address[0]), int(next_principal_address[1]))
        host, port = self.addresses.get(key, key)
        return self._post("/prepare", {"host": host, "port": port}, timeout=30.0)

    def after_switchover(self, new_principal_address: Address) -> Any:
        """``POST /resume`` without an address: the proxy resolves the new principal itself (its
        back end may be the nodes' server addresses, not the client-facing one passed here)."""
        return self._post("/resume", {}, timeout=90.0)

    def before_remove_node(self, address: Address) -> Any:
        """``POST /remove-node`` for the node whose client address is ``address`` (PER-9/PER-10: the
        proxy routes away from it, lets a running query finish within its removal window, moves or
        closes the sessions there, then answers); with the node's name, so that a node added later at
        that address is routed to."""
        key = (str(address[0]), int(address[1]))
        host, port = self.addresses.get(key, key)
        body: dict[str, Any] = {"host": host, "port": port}
        if key in self.names:
            body["node"] = self.names[key]
        self.last_removal = self._post("/remove-node", body, timeout=90.0)
        return self.last_removal


def pgbouncer_over(topo: Any, endpoint: Any) -> PgBouncerClient:
    """A :class:`PgBouncerClient` over the pgbouncer an endpoint record names (its folder, port,
    mode), able to coordinate it (PAUSE / re-point + RELOAD / RESUME) from this process."""
    client = PgBouncerClient(topo, pool_mode=endpoint.mode or "transaction",
                             via_fault_proxy=endpoint.backend == "client")
    client.dir = Path(endpoint.dir) if endpoint.dir else None
    client.port = int(endpoint.listen.rpartition(":")[2])
    client.address = ("127.0.0.1", client.port)
    client.name = endpoint.name
    return client


def _back_addresses(topo: Any, via: str) -> dict[Address, Address]:
    """Each node's client address -> its address on an attached client's back-end path."""
    out: dict[Address, Address] = {}
    for n in topo.nodes:
        client = (str(n.client_address[0]), int(n.client_address[1]))
        out[client] = (str(n.server_address[0]), int(n.server_address[1])) if via == "server" else client
    return out


def coordinators_for(topo: Any, endpoints: list[Any]) -> list[Any]:
    """One switchover coordinator per attached client of the run (PER-1/PER-4); a kind this harness
    cannot coordinate is a ConfigError naming it."""
    out: list[Any] = []
    for e in endpoints:
        if e.kind == "reference":
            if not e.admin or not e.token_file:
                raise ConfigError(f"attached proxy {e.name} has no admin API to coordinate it; start it with --run")
            names = {(str(n.client_address[0]), int(n.client_address[1])): n.name for n in topo.nodes}
            out.append(AdminCoordinator(e.name, e.admin, e.token_file, addresses=_back_addresses(topo, e.backend),
                                        names=names))
        elif e.kind.startswith("pgbouncer"):
            out.append(pgbouncer_over(topo, e))
        else:
            raise ConfigError(f"attached client {e.name} of kind {e.kind!r} cannot be coordinated")
    return out
