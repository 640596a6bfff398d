"""Reference persistent-connection proxy for PostgreSQL (RULEBOOK PER-1..PER-8): keeps client
sessions open across a switchover or failover of the principal and replays their state.

* :class:`PersistentProxy` - the asyncio object (``start``/``stop``/``drain``/``resume``/``status``)
* :class:`ThreadedPersistentProxy` - the same in a background thread, blocking API
* :class:`ProxyConfig` - credentials, resolver or candidate addresses, windows, event callback

See ``docs/persistent-proxy.md``.
"""

from .admin import AdminServer, build_app
from .backend import BackendError, probe_candidates
from .proxy import PersistentProxy, ProxyConfig
from .threaded import ThreadedPersistentProxy

__all__ = [
    "AdminServer",
    "BackendError",
    "PersistentProxy",
    "ProxyConfig",
    "ThreadedPersistentProxy",
    "build_app",
    "probe_candidates",
]
