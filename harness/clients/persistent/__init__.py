"""Reference persistent-connection proxy for PostgreSQL (RULEBOOK PER-1..PER-8): keeps client
sessions open across a switchover or failover of the principal and replays their state.

* :class:`PersistentProxy` - the asyncio object (``start``/``stop``/``drain``/``resume``/``status``)
* :class:`ThreadedPersistentProxy` - the same in a background thread, blocking API
* :class:`ProxyConfig` - credentials, resolver or candidate addresses, windows, event callback

Importing this package registers :func:`reference` as client ``reference`` of profile
``persistent`` in :mod:`harness.clients.registry`. See ``docs/persistent-proxy.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .admin import AdminServer, build_app
from .backend import Address, BackendError, probe_candidates
from .proxy import PersistentProxy, ProxyConfig
from .threaded import ThreadedPersistentProxy


def reference(*, resolver: Callable[[], Any] | None = None, candidates: Sequence[Address] = (),
              user: str = "app", password: str | None = "app", history: Any = None,
              admin: Address | None = None, **options: Any) -> ThreadedPersistentProxy:
    """Factory of the PER profile's reference client (PER-1..PER-8): an un-started
    :class:`ThreadedPersistentProxy` (use it as a context manager). ``resolver`` is typically
    ``lambda: pair.principal.server_address``; ``history`` receives the ``persist.*`` events;
    ``options`` are further :class:`ProxyConfig` fields (``drain_window``, ``recovery_window``...)."""
    on_event = history.record if history is not None else options.pop("on_event", None)
    config = ProxyConfig(user=user, password=password, resolver=resolver, candidates=candidates,
                         on_event=on_event, **options)
    return ThreadedPersistentProxy(config, admin=admin)


def _register() -> None:
    try:
        from harness.clients.registry import register_client
    except ImportError:  # pragma: no cover - registry not present
        return
    register_client("persistent", "reference", reference)


_register()

# The PER profile's other clients (pgbouncer-session, pgbouncer-transaction, direct): see adapters.py.
from . import adapters as _adapters  # noqa: E402

_adapters.register()

__all__ = [
    "AdminServer",
    "BackendError",
    "PersistentProxy",
    "ProxyConfig",
    "ThreadedPersistentProxy",
    "build_app",
    "probe_candidates",
    "reference",
]
