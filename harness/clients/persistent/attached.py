"""Coordinators for the clients attached to a run from the command line (``persistent-proxy --run``,
``pgbouncer --run``): what ``failover-harness fault --run ID switchover`` uses to drain every one of
them before the role swap and resume them after it (RULEBOOK PER-1, PER-4), from another process.

* ``reference``: the proxy's HTTP admin API - ``POST /drain``, then ``POST /resume`` without an
  address (the proxy finds the new principal itself, from the run state), with the admin token read
  from its 0600 token file (never printed).
* ``pgbouncer-session`` / ``pgbouncer-transaction``: :class:`PgBouncerClient` rebuilt over the running
  pgbouncer (its folder and port): ``PAUSE`` / rewrite ``[databases]`` + ``RELOAD`` / ``RESUME``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from harness.clients.persistent.pgbouncer import PgBouncerClient
from harness.clients.persistent.protocol import Address
from harness.errors import ConfigError, CoordinationError


class AdminCoordinator:
    """A running reference proxy, driven through its admin API (PER-4 drain, PER-1/2/3 resume)."""

    def __init__(self, name: str, admin: str, token_file: str, drain_timeout: float | None = None) -> None:
        self.name = name
        self.url = f"http://{admin}"
        self.token_file = Path(token_file)
        self.drain_timeout = drain_timeout

    def _post(self, path: str, body: dict[str, Any], timeout: float) -> Any:
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise CoordinationError(f"cannot read the admin token of {self.name} ({self.token_file}): {exc}") from exc
        headers = {"X-Failover-Harness-Token": token}
        try:
            reply = httpx.post(self.url + path, json=body, headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            raise CoordinationError(f"{self.name}: POST {path} failed: {type(exc).__name__}: {exc}") from exc
        if reply.status_code != 200:
            raise CoordinationError(f"{self.name}: POST {path} answered {reply.status_code}: {reply.text[:200]}")
        return reply.json()

    def before_switchover(self) -> Any:
        """``POST /drain`` (PER-4: waits up to the proxy's drain window)."""
        body = {} if self.drain_timeout is None else {"timeout": self.drain_timeout}
        return self._post("/drain", body, timeout=(self.drain_timeout or 60.0) + 30.0)

    def after_switchover(self, new_principal_address: Address) -> Any:
        """``POST /resume`` without an address: the proxy resolves the new principal itself (its
        back end may be the nodes' server addresses, not the client-facing one passed here)."""
        return self._post("/resume", {}, timeout=90.0)


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


def coordinators_for(topo: Any, endpoints: list[Any]) -> list[Any]:
    """One switchover coordinator per attached client of the run (PER-1/PER-4); a kind this harness
    cannot coordinate is a ConfigError naming it."""
    out: list[Any] = []
    for e in endpoints:
        if e.kind == "reference":
            if not e.admin or not e.token_file:
                raise ConfigError(f"attached proxy {e.name} has no admin API to coordinate it; start it with --run")
            out.append(AdminCoordinator(e.name, e.admin, e.token_file))
        elif e.kind.startswith("pgbouncer"):
            out.append(pgbouncer_over(topo, e))
        else:
            raise ConfigError(f"attached client {e.name} of kind {e.kind!r} cannot be coordinated")
    return out
