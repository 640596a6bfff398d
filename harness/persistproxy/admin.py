"""Admin interface of the persistent proxy: HTTP/JSON via aiohttp, on the loopback by default.

* ``GET  /status``  -> :meth:`PersistentProxy.status` (read-only, no token)
* ``POST /drain``   body ``{"timeout": seconds}`` (optional) -> :meth:`PersistentProxy.drain` (PER-4)
* ``POST /resume``  body ``{"host": h, "port": p}`` (optional) -> :meth:`PersistentProxy.resume`
  (PER-1, PER-3); the address must be one the proxy was configured with (else 403)
* ``POST /prepare`` body ``{"host": h, "port": p}`` -> :meth:`PersistentProxy.prepare` (after a
  drain: pre-attach the kept sessions to the hot standby about to be promoted; answers at once; the
  same allow-list as ``/resume``)
* ``POST /remove-node`` body ``{"host": h, "port": p, "window": seconds, "node": name}`` (window and
  node optional) -> :meth:`PersistentProxy.remove_node` (PER-9, PER-10): the read-only node at that
  address is routed away from and its sessions moved or closed before the answer; ``node`` names it
  (another node listed at that address later is routed to)

Every request that changes state must carry ``Content-Type: application/json`` (else 415, so that a
web page cannot send it as a "simple" cross-origin request) and the admin token of this proxy in
``X-Failover-Harness-Token: TOKEN`` or ``Authorization: Bearer TOKEN`` (else 401). Errors are
answered as ``{"error": text}``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from harness.errors import ConfigError

from .backend import Address
from .proxy import PersistentProxy

log = logging.getLogger(__name__)

TOKEN_HEADER = "X-Failover-Harness-Token"
_READ_ONLY = frozenset({"GET", "HEAD"})
_MAX_BODY = 64 << 10

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_token() -> str:
    """A fresh random admin token (256 bits, URL-safe) - one per proxy."""
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, port: int) -> str:
    """The warning printed when the admin API is bound to a non-loopback address."""
    return (f"warning: the persistent proxy's admin API listens on {host}:{port}, beyond the loopback: every "
            "host that can reach that address can read GET /status (sessions and client addresses), and anyone "
            "among them who holds the admin token can drain the proxy and resume it on an allowed principal")


def _error(status: int, text: str, **headers: str) -> web.Response:
    return web.json_response({"error": text}, status=status, headers=headers or None)


def _token_of(request: web.Request) -> str | None:
    given = request.headers.get(TOKEN_HEADER)
    if given is None:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value:
            given = value.strip()
    return given


def _guard(token: str) -> Any:
    """Middleware: a state-changing request needs a JSON content type (415) and the token (401)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in _READ_ONLY:
            return await handler(request)
        if request.content_type != "application/json":
            return _error(415, f"the admin API accepts only Content-Type: application/json, not "
                               f"{request.content_type!r}")
        given = _token_of(request)
        if given is None:
            return _error(401, f"missing admin token: send it in the {TOKEN_HEADER} header "
                               "(or Authorization: Bearer)", **{"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode()):
            return _error(401, "wrong admin token", **{"WWW-Authenticate": "Bearer"})
        return await handler(request)

    return guard


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        text = await request.text()
        data = json.loads(text) if text.strip() else {}
    except (ValueError, LookupError, RecursionError) as exc:  # bad JSON or charset, absurd nesting
        raise web.HTTPBadRequest(text=json.dumps({"error": f"body is not JSON: {exc}"}),
                                 content_type="application/json") from exc
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(text=json.dumps({"error": "body must be a JSON object"}),
                                 content_type="application/json")
    return data


def _address(body: dict[str, Any]) -> Address | None:
    if "host" not in body and "port" not in body:
        return None
    host, port = body.get("host"), body.get("port")
    if not isinstance(host, str) or not host or isinstance(port, bool) or not isinstance(port, int) \
            or not 1 <= port <= 65535:
        raise ValueError("resume needs both host (a string) and port (1-65535), or neither")
    return host, port


def build_app(proxy: PersistentProxy, token: str) -> web.Application:
    """The aiohttp application serving ``/status``, ``/drain``, ``/resume`` (PER-1..PER-4) and
    ``/remove-node`` (PER-9/10), with ``token`` required on every POST and ``/resume`` limited to the
    allowed principals."""

    async def status(_request: web.Request) -> web.Response:
        return web.json_response(proxy.status())

    async def drain(request: web.Request) -> web.Response:
        timeout = (await _body(request)).get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                    or not math.isfinite(timeout) or timeout < 0):
            return _error(400, f"timeout must be a finite number of seconds >= 0, not {timeout!r}")
        return web.json_response(await proxy.drain(None if timeout is None else float(timeout)))

    async def resume(request: web.Request) -> web.Response:
        try:
            address = _address(await _body(request))
        except ValueError as exc:
            return _error(400, str(exc))
        if address is not None and not proxy.allows_principal(address):
            allowed = ", ".join(f"{h}:{p}" for h, p in proxy.allowed_principals()) or "none"
            return _error(403, f"{address[0]}:{address[1]} is not a principal this proxy may resume on "
                               f"(allowed: {allowed}); omit host/port to let the proxy find the principal")
        return web.json_response(await proxy.resume(address))

    async def prepare(request: web.Request) -> web.Response:
        try:
            address = _address(await _body(request))
        except ValueError:
            address = None
        if address is None:
            return _error(400, "prepare needs host (a string) and port (1-65535): the node about to be promoted")
        if not proxy.allows_principal(address):
            return _error(403, f"{address[0]}:{address[1]} is not a principal this proxy may resume on")
        return web.json_response(await proxy.prepare(address))

    async def remove_node(request: web.Request) -> web.Response:
        body = await _body(request)
        try:
            address = _address(body)
        except ValueError:
            address = None
        if address is None:
            return _error(400, "remove-node needs host (a string) and port (1-65535): the read-only node's address")
        window = body.get("window")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int | float)
                                   or not math.isfinite(window) or window < 0):
            return _error(400, f"window must be a finite number of seconds >= 0, not {window!r}")
        node = body.get("node")
        if node is not None and (not isinstance(node, str) or not 0 < len(node) <= 200):
            return _error(400, f"node must be the removed node's name (a string of 1 to 200 characters), not {node!r}")
        return web.json_response(await proxy.remove_node(address, None if window is None else float(window), node))

    app = web.Application(middlewares=[_guard(token)], client_max_size=_MAX_BODY)
    app.router.add_get("/status", status)
    app.router.add_post("/drain", drain)
    app.router.add_post("/resume", resume)
    app.router.add_post("/prepare", prepare)
    app.router.add_post("/remove-node", remove_node)
    return app


class AdminServer:
    """Runs :func:`build_app` on ``host:port``: the loopback unless ``allow_remote`` (then with a
    warning in the log, see :func:`exposure_warning`). ``token`` defaults to a new random one."""

    def __init__(self, proxy: PersistentProxy, host: str = "127.0.0.1", port: int = 0, *,
                 token: str | None = None, allow_remote: bool = False) -> None:
        if not is_loopback(host) and not allow_remote:
            raise ConfigError(f"the admin API binds to the loopback (127.0.0.1) unless explicitly allowed, "
                              f"not {host!r}: pass allow_remote=True (CLI: --admin-allow-remote) to expose it")
        if token is not None and len(token) < 16:
            raise ConfigError("the admin token must be at least 16 characters; omit it to get a random one")
        self.proxy = proxy
        self.host = host
        self.port = port
        self.token = token or new_token()
        self._runner: web.AppRunner | None = None
        self.address: Address | None = None

    def app(self) -> web.Application:
        """The application served (:func:`build_app` of this proxy)."""
        return build_app(self.proxy, self.token)

    async def start(self) -> Address:
        """Start serving; returns the bound address."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        assert server is not None
        sock = server.sockets[0].getsockname()  # type: ignore[union-attr]
        self.address = (sock[0], sock[1])
        if not is_loopback(self.host):
            log.warning("%s", exposure_warning(*self.address))
        return self.address

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
