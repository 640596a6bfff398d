"""Choose the fault proxy server for a run, visibly.

Order: ``TOXIPROXY_URL`` set -> that server (*external*; no connection events);
else ``TOXIPROXY_SERVER_BIN`` or ``toxiproxy-server`` on PATH -> spawn it on a free port
(*spawned*; events derived from its trace log); else the in-process *embedded* server
(full connection events).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from harness.errors import ConfigError, MissingDependencyError
from harness.ports import allocate_port, release_port
from harness.toxiproxy.client import ToxiproxyClient
from harness.toxiproxy.models import ConnEvent
from harness.toxiproxy.server import EmbeddedToxiproxy
from harness.toxiproxy.spawned import ToxiproxyProcess

EventCallback = Callable[[ConnEvent], None]
KINDS = ("external", "spawned", "embedded")


def _noop() -> None:
    return None


@dataclass
class FaultProxyHandle:
    """The chosen fault proxy server: ``kind`` (external/spawned/embedded), ``url``, ``version``,
    an API ``client``, and connection events when ``events_supported``."""

    kind: str
    url: str
    version: str
    client: ToxiproxyClient
    events_supported: bool
    events_note: str
    source: str
    _subscribe: Callable[[EventCallback], Callable[[], None]] | None = field(default=None, repr=False)
    embedded: EmbeddedToxiproxy | None = field(default=None, repr=False)
    _settle: Callable[[float], bool] | None = field(default=None, repr=False)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(ConnEvent)`` for every later connection event; returns unsubscribe.

        For an external server events are unavailable: nothing is ever called and the returned
        function does nothing (check :attr:`events_supported`)."""
        if self._subscribe is None:
            return _noop
        return self._subscribe(callback)

    def settle(self, timeout: float = 2.0) -> bool:
        """Return once every connection event the server observed before this call has reached the
        subscribers (True), False if that could not be confirmed within ``timeout``. The embedded
        server publishes on the connection's own thread, so it is always settled; a spawned real
        server's events are derived from its log on a thread of ours (OBS-1)."""
        return True if self._settle is None else self._settle(timeout)

    def describe(self) -> str:
        """One line for reports, e.g. ``fault proxy: embedded Toxiproxy-compatible server 2.12.0 at
        http://127.0.0.1:40123 (connection events: full)``."""
        names = {"external": "external toxiproxy-server", "spawned": "spawned toxiproxy-server",
                 "embedded": "embedded Toxiproxy-compatible server"}
        return (f"fault proxy: {names[self.kind]} {self.version} at {self.url} [{self.source}] "
                f"(connection events: {self.events_note})")


class _Recorder:
    """Anything with ``record(type, t=..., **fields)`` (e.g. ``harness.history.History``)."""

    def record(self, type: str, t: float | None = None, **fields: object) -> object: ...


def forward_to_history(handle: FaultProxyHandle, history: _Recorder) -> Callable[[], None]:
    """Record every later connection event of ``handle`` into ``history`` with its own ``t``
    (``history.record(ev.type, t=ev.t, **ev.fields)``); returns unsubscribe. A no-op when the
    server has no events (check ``handle.events_supported``)."""

    def forward(event: ConnEvent) -> None:
        history.record(event.type, t=event.t, **event.fields)

    return handle.subscribe(forward)


def find_server_binary(env: Mapping[str, str] | None = None) -> str | None:
    """``TOXIPROXY_SERVER_BIN`` (must exist) or ``toxiproxy-server`` on PATH, else None."""
    env = os.environ if env is None else env
    configured = env.get("TOXIPROXY_SERVER_BIN")
    if configured:
        path = shutil.which(configured) or (configured if os.access(configured, os.X_OK) else None)
        if path is None:
            raise MissingDependencyError(
                f"TOXIPROXY_SERVER_BIN={configured!r} is not an executable file; fix the path or "
                "unset it to use the embedded server")
        return path
    return shutil.which("toxiproxy-server", path=env.get("PATH"))


def planned_choice(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(kind, where)`` the selection order picks now, without starting anything: ``("external",
    URL)``, ``("spawned", binary path)`` or ``("embedded", "harness.toxiproxy")``. A
    ``TOXIPROXY_SERVER_BIN`` that is not executable is reported as ``("spawned", "PATH (missing)")``."""
    env = os.environ if env is None else env
    if env.get("TOXIPROXY_URL"):
        return "external", env["TOXIPROXY_URL"]
    try:
        binary = find_server_binary(env)
    except MissingDependencyError:
        return "spawned", f"{env.get('TOXIPROXY_SERVER_BIN')} (missing)"
    if binary:
        return "spawned", binary
    return "embedded", "harness.toxiproxy"


@contextmanager
def start_fault_proxy(kind: str | None = None, env: Mapping[str, str] | None = None,
                      host: str = "127.0.0.1", timeout: float = 5.0,
                      on_spawn: Callable[[int], None] | None = None) -> Iterator[FaultProxyHandle]:
    """Pick and start the fault proxy server; stop whatever was started on exit. ``on_spawn`` gets
    the PID of a spawned server process the moment it exists (a run records it, so that its ``down``
    and ``down --all`` stop it even after a crash).

    ``kind`` forces a choice ("external", "spawned", "embedded"); by default the environment
    decides (module docstring). ``env`` defaults to ``os.environ``."""
    env = os.environ if env is None else env
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"unknown fault proxy kind {kind!r}; use one of {', '.join(KINDS)}")
    url = env.get("TOXIPROXY_URL")
    if kind is None:
        if url:
            kind = "external"
        elif find_server_binary(env):
            kind = "spawned"
        else:
            kind = "embedded"

    if kind == "external":
        if not url:
            raise ConfigError("fault proxy kind 'external' needs TOXIPROXY_URL "
                              "(e.g. http://127.0.0.1:8474)")
        client = ToxiproxyClient(url, timeout=timeout)
        try:
            version = client.version()  # raises ToxiproxyUnreachableError naming the URL
            yield FaultProxyHandle("external", client.url, version, client, False,
                                   "unavailable (external server has no event API)", "TOXIPROXY_URL")
        finally:
            client.close()
        return

    if kind == "spawned":
        binary = find_server_binary(env)
        if binary is None:
            raise MissingDependencyError(
                "toxiproxy-server is not on PATH and TOXIPROXY_SERVER_BIN is unset; install it "
                "(https://github.com/Shopify/toxiproxy/releases) or use the embedded server")
        port = allocate_port(host)
        clients: list[ToxiproxyClient] = []
        proc = ToxiproxyProcess(binary, host, port,
                                node_of=lambda name: clients[0].nodes.get(name) if clients else None,
                                listen_of=lambda name: clients[0].listens.get(name) if clients else None)
        try:
            proc.start(on_spawn=on_spawn)
            client = ToxiproxyClient(proc.url, timeout=timeout)
            clients.append(client)
            try:
                source = "TOXIPROXY_SERVER_BIN" if env.get("TOXIPROXY_SERVER_BIN") else "PATH"
                yield FaultProxyHandle("spawned", proc.url, client.version(), client, True,
                                       "derived from its trace log and /metrics (times as the lines arrive)",
                                       f"{source}: {binary}", proc.subscribe, _settle=proc.settle)
            finally:
                client.close()
        finally:
            proc.stop()
            release_port(port)
        return

    server = EmbeddedToxiproxy(host=host, port=0).start()
    try:
        client = ToxiproxyClient(server.url, timeout=timeout)
        try:
            yield FaultProxyHandle("embedded", server.url, client.version(), client, True, "full",
                                   "no TOXIPROXY_URL, no toxiproxy-server binary", server.subscribe,
                                   server)
        finally:
            client.close()
    finally:
        server.stop()
