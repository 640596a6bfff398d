"""APP rules (RULEBOOK family APP, docs/rules.md): an application-side pool or ORM under failover.

Importing this package registers the checkers: APP-1 recovery bound, APP-2 failed requests per
fault, APP-3 no write acknowledged by a demoted node / no read served by a node that left the
topology, APP-4 no stale connection handed out by a validating pool, APP-5 pool size respected.
The history they read is described in :mod:`harness.rules.app.history`."""

from __future__ import annotations

from harness.rules.app.pool import check_no_stale_connection, check_pool_size
from harness.rules.app.recovery import check_failed_requests, check_recovery
from harness.rules.app.servers import check_servers_view

__all__ = ["check_failed_requests", "check_no_stale_connection", "check_pool_size", "check_recovery",
           "check_servers_view"]
