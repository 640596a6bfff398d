"""The ICM profile's router protocol (RULEBOOK ICM-1..7): what every router under test offers the
suites, whether it redirects like Domino's Internet Cluster Manager (the reference) or proxies like
HAProxy and nginx, and :func:`open_router`, which builds and starts one.

A router is started in front of an :class:`~harness.topology.icm.IcmCluster` (``start()``), gives
the browser a ``url(scheme, path)``, says in ``limitations`` which rules it cannot express (the
verdicts then show the violation with that evidence - never a skip), and is ``stop()``-ped at the
end. Factories take the keywords ``cluster`` and ``history``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from harness.errors import ConfigError


@runtime_checkable
class IcmRouter(Protocol):
    """What the ICM suites need from a router under test."""

    name: str
    mode: str  # "redirect" (302 + Location, like ICM) or "proxy" (serves through itself)
    limitations: dict[str, str]  # rule ID -> what the router cannot express (shown in reports)

    def start(self) -> None:
        """Start in front of the cluster (listeners for HTTP and HTTPS)."""

    def url(self, scheme: str, path: str = "/") -> str:
        """The router's URL for ``scheme`` (http or https) and ``path``."""

    def stop(self) -> None:
        """Stop, releasing every process, port and file."""


def open_router(factory: Callable[..., Any], *, cluster: Any, history: Any = None, **options: Any) -> IcmRouter:
    """Build and start the router under test from the suites' ``client_factory`` (ICM-1..7); the
    factory must return an :class:`IcmRouter` (else a ConfigError naming what is missing)."""
    router = factory(cluster=cluster, history=history, **options)
    if not isinstance(router, IcmRouter):
        raise ConfigError(f"router factory {getattr(factory, '__qualname__', factory)!r} returned "
                          f"{type(router).__name__}, which lacks the IcmRouter members (name, mode, limitations, "
                          "start, url, stop)")
    router.start()
    if history is not None:
        history.record("icm.router.start", router=router.name, mode=router.mode, limitations=router.limitations,
                       http=router.url("http"), https=router.url("https"))
    return router
