"""The reference persistent-connection proxy for PostgreSQL (RULEBOOK PER-1..PER-8), a product of its
own: keeps client sessions open across a switchover or failover of the principal and replays their
state (PostgreSQL wire protocol v3, SCRAM on both sides, drain/resume, an HTTP admin interface).

* :class:`PersistentProxy` - the asyncio object (``start``/``stop``/``drain``/``resume``/``status``)
* :class:`ThreadedPersistentProxy` - the same in a background thread, blocking API
* :class:`ProxyConfig` - credentials, resolver or candidate addresses, windows, event callback

It uses nothing of the harness but :mod:`harness.errors` and :mod:`harness.redact` (an import
contract checks it); the PER profile's client adapter around it is
:mod:`harness.clients.persistent.reference`. See ``docs/persistent-proxy.md``.
"""

from __future__ import annotations

from .admin import AdminServer, build_app
from .backend import Address, BackendError, probe_candidates
from .proxy import PersistentProxy, ProxyConfig
from .threaded import ThreadedPersistentProxy

__all__ = [
    "Address",
    "AdminServer",
    "BackendError",
    "PersistentProxy",
    "ProxyConfig",
    "ThreadedPersistentProxy",
    "build_app",
    "probe_candidates",
]
