"""ICM profile routers (RULEBOOK ICM-1..7), each an :class:`~harness.clients.icm.protocol.IcmRouter`:

* ``reference`` - the harness's own Internet Cluster Manager (302 redirects) - :mod:`.reference`;
* ``haproxy`` - real HAProxy 2.6 (Debian) proxying, configured from the cluster - :mod:`.haproxy`;
* ``nginx`` - real nginx 1.22 (Debian) proxying, configured from the cluster - :mod:`.nginx`.

Importing this package registers them (profile ``icm``) with :mod:`harness.clients.registry`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.clients.icm.haproxy import HaproxyRouter, haproxy_router
from harness.clients.icm.nginx import NginxRouter, nginx_router
from harness.clients.icm.protocol import IcmRouter, open_router
from harness.clients.icm.reference import ReferenceRouter, reference_router
from harness.clients.registry import register_client

CLIENTS: dict[str, Callable[..., Any]] = {
    "reference": reference_router,
    "haproxy": haproxy_router,
    "nginx": nginx_router,
}

for _name, _factory in CLIENTS.items():
    register_client("icm", _name, _factory)

__all__ = ["CLIENTS", "HaproxyRouter", "IcmRouter", "NginxRouter", "ReferenceRouter", "haproxy_router",
           "nginx_router", "open_router", "reference_router"]
