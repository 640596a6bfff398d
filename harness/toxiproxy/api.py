"""The embedded server's HTTP API (Toxiproxy API v2 plus ``GET /events``): :class:`ToxiproxyServer`.

Every handler validates what it is given (:mod:`harness.toxiproxy.limits`) and answers in the real
server's shapes (:mod:`harness.toxiproxy.replies`); an unexpected exception is logged and answered
with a one-line 500, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from harness.errors import ConfigError, ProxyError
from harness.redact import protect_logger
from harness.toxiproxy.events import EVENTS_KEPT, EventCallback, EventLog
from harness.toxiproxy.httpconn import HEADER_TIMEOUT, serve
from harness.toxiproxy.limits import (
    INT64_MAX,
    MAX_BODY,
    ApiError,
    is_loopback,
    query_int,
    validate_attributes,
    validate_name,
    validate_toxicity,
)
from harness.toxiproxy.models import STREAMS, TOXIC_TYPES, ConnEvent
from harness.toxiproxy.proxystate import ProxyState, ToxicState
from harness.toxiproxy.replies import (
    check_proxy_fields,
    error_reply,
    json_reply,
    not_found_reply,
    populate_error,
    proxy_spec,
    read_body,
    request_id,
    require_obj,
)

log = protect_logger(logging.getLogger("harness.toxiproxy.server"))  # no password in a log line (harness.redact)

VERSION = "2.12.0"


class ToxiproxyServer:
    """The embedded Toxiproxy server bound to the running asyncio loop.

    The API binds loopback unless ``allow_remote`` is set (it has no authentication, like real
    Toxiproxy's: whoever reaches it can create proxies on this machine). A connection whose request
    headers take longer than ``header_timeout`` seconds is closed (:mod:`harness.toxiproxy.httpconn`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, allow_remote: bool = False,
                 header_timeout: float = HEADER_TIMEOUT) -> None:
        if not is_loopback(host) and not allow_remote:
            raise ConfigError(f"the Toxiproxy API would listen on {host}, reachable from other hosts with no "
                              "authentication; bind 127.0.0.1, or allow it explicitly (--allow-remote)")
        self.host = host
        self.port = port
        self.proxies: dict[str, ProxyState] = {}
        self.header_timeout = header_timeout  # a request's headers must be complete within it (as real 2.12)
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._conn_ids = 0
        self._log = EventLog(EVENTS_KEPT)

    # -- events --------------------------------------------------------------------------------
    def next_conn_id(self) -> int:
        """A new connection id (unique for this server)."""
        self._conn_ids += 1
        return self._conn_ids

    def emit(self, type_: str, **fields: Any) -> None:
        """Record a connection event stamped now and pass it to every subscriber."""
        self._log.emit(type_, **fields)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(event)`` for every later event (on the server's thread); returns unsubscribe."""
        return self._log.subscribe(callback)

    def events(self, since: int = 0, limit: int | None = None) -> tuple[list[ConnEvent], int]:
        """Kept events with ``seq >= since`` (at most ``limit``) and the next ``since`` to use."""
        return self._log.events(since, limit)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the HTTP API on ``host:port`` (port 0 -> a free port, see :attr:`port`)."""
        app = web.Application(middlewares=[self._errors], client_max_size=MAX_BODY)
        app.on_response_prepare.append(_stamp)
        for method, path, handler in self._routes():
            app.router.add_route(method, path, handler)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        try:
            self._listener = await serve(self._runner, self.host, self.port, self.header_timeout)
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise ProxyError(f"embedded toxiproxy could not bind its API on {self.host}:{self.port}: "
                             f"{exc.strerror or exc}; choose another --port or use 0") from exc
        self.port = self._listener.sockets[0].getsockname()[1]

    def _routes(self) -> list[tuple[str, str, Callable[[web.Request], Any]]]:
        """The API: Toxiproxy v2 (``POST`` on a proxy or toxic is the deprecated form of ``PATCH``)
        and the ``/events`` extension."""
        proxy, toxic = "/proxies/{proxy}", "/proxies/{proxy}/toxics/{toxic}"
        return [("GET", "/version", self._version), ("GET", "/proxies", self._list_proxies),
                ("POST", "/proxies", self._create_proxy), ("POST", "/populate", self._populate),
                ("POST", "/reset", self._reset), ("GET", "/events", self._events_handler),
                ("GET", proxy, self._get_proxy), ("PATCH", proxy, self._update_proxy),
                ("POST", proxy, self._update_proxy), ("DELETE", proxy, self._delete_proxy),
                ("GET", f"{proxy}/toxics", self._list_toxics), ("POST", f"{proxy}/toxics", self._add_toxic),
                ("GET", toxic, self._get_toxic), ("PATCH", toxic, self._update_toxic),
                ("POST", toxic, self._update_toxic), ("DELETE", toxic, self._delete_toxic)]

    async def stop(self) -> None:
        """Close every proxy and connection, then the HTTP API."""
        for proxy in list(self.proxies.values()):
            proxy.stop("server stopped")
        self.proxies.clear()
        if self._listener is not None:
            self._listener.close()  # no new connections; the runner's cleanup closes the open ones
            self._listener = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- HTTP handlers -------------------------------------------------------------------------
    @web.middleware
    async def _errors(self, request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return error_reply(exc.status, exc.message)
        except web.HTTPNotFound:
            return not_found_reply()
        except web.HTTPMethodNotAllowed:
            return web.Response(status=405)
        except web.HTTPRequestEntityTooLarge:
            return error_reply(413, f"request body too large; the limit is {MAX_BODY} bytes")
        except web.HTTPException:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug is a logged one-line 500, never a traceback
            log.exception("%s %s failed", request.method, request.path)
            return error_reply(500, f"internal error: {type(exc).__name__} (see the server log)")

    def _proxy(self, request: web.Request) -> ProxyState:
        proxy = self.proxies.get(request.match_info["proxy"])
        if proxy is None:
            raise ApiError(404, "proxy not found")
        return proxy

    async def _version(self, request: web.Request) -> web.Response:
        return json_reply({"version": VERSION, "server": "failover-harness embedded"},
                          content_type="application/json;charset=utf-8")

    async def _list_proxies(self, request: web.Request) -> web.Response:
        return json_reply({name: p.to_json() for name, p in self.proxies.items()})

    async def _add_proxy(self, spec: dict[str, Any]) -> ProxyState:
        proxy = ProxyState(self, spec["name"], spec["listen"], spec["upstream"], spec["node"])
        self.proxies[proxy.name] = proxy  # reserve the name before awaiting the bind
        if spec["enabled"]:
            try:
                await proxy.start()
            except BaseException:
                if self.proxies.get(proxy.name) is proxy:
                    del self.proxies[proxy.name]
                raise
        return proxy

    async def _create_proxy(self, request: web.Request) -> web.Response:
        spec = proxy_spec(await read_body(request))
        if spec["name"] in self.proxies:
            raise ApiError(409, "proxy already exists")
        proxy = await self._add_proxy(spec)
        return json_reply(proxy.to_json(), status=201)

    async def _populate(self, request: web.Request) -> web.Response:
        try:
            body = await read_body(request)
            if body is None:
                body = []
            if not isinstance(body, list):
                raise ApiError(400, "bad request body: expected a JSON array of proxies")
            specs = []
            for i, item in enumerate(body, 1):
                try:
                    specs.append(proxy_spec(item))
                except ApiError as exc:
                    raise ApiError(exc.status, f"{exc.message} at proxy {i}") from None
        except ApiError as exc:
            return populate_error(exc.status, exc.message, None)
        done: list[ProxyState] = []
        for spec in specs:
            existing = self.proxies.get(spec["name"])
            if existing is not None and existing.listen == spec["listen"] \
                    and existing.upstream == spec["upstream"]:
                done.append(existing)
                continue
            if existing is not None:
                existing.stop("proxy replaced")
                del self.proxies[existing.name]
            try:
                done.append(await self._add_proxy(spec))
            except ApiError as exc:
                return populate_error(exc.status, exc.message, [p.to_json() for p in done] or None)
        return json_reply({"proxies": [p.to_json() for p in done] or None}, status=201)

    async def _reset(self, request: web.Request) -> web.Response:
        for proxy in self.proxies.values():
            removed = list(proxy.toxics.values())
            proxy.toxics.clear()
            for toxic in removed:
                proxy.toxics_changed(toxic)
            if not proxy.enabled:
                await proxy.start()
        return web.Response(status=204)

    async def _events_handler(self, request: web.Request) -> web.Response:
        since = query_int(request.query.get("since"), "since", 0, 0, INT64_MAX)
        limit = query_int(request.query.get("limit"), "limit", 10_000, 1, EVENTS_KEPT)
        events, next_seq = self.events(since, limit)
        return json_reply({"events": [e.to_json() for e in events], "next": next_seq})

    async def _get_proxy(self, request: web.Request) -> web.Response:
        return json_reply(self._proxy(request).to_json())

    async def _update_proxy(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        body = require_obj(await read_body(request))
        check_proxy_fields(body)
        if "node" in body:
            proxy.node = body["node"]
        listen = body.get("listen") or proxy.listen
        upstream = body.get("upstream") or proxy.upstream
        enabled = body.get("enabled", proxy.enabled)
        if listen != proxy.listen or upstream != proxy.upstream:
            proxy.stop("proxy restarted (listen or upstream changed)")
            proxy.listen, proxy.upstream = listen, upstream
        if enabled and not proxy.enabled:
            await proxy.start()
        elif not enabled and proxy.enabled:
            proxy.stop("proxy disabled")
        return json_reply(proxy.to_json())

    async def _delete_proxy(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        proxy.stop("proxy deleted")
        del self.proxies[proxy.name]
        return web.Response(status=204)

    async def _list_toxics(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        return json_reply([t.to_json() for s in STREAMS for t in proxy.chain(s)])

    async def _add_toxic(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        body = require_obj(await read_body(request))
        stream = body.get("stream", "downstream")
        if stream not in STREAMS:
            raise ApiError(400, "stream was invalid, can be either upstream or downstream")
        type_ = body.get("type")
        if type_ not in TOXIC_TYPES:
            raise ApiError(400, "invalid toxic type")
        name = validate_name(body.get("name") or f"{type_}_{stream}", "toxic")
        if name in proxy.toxics:
            raise ApiError(409, "toxic already exists")
        toxicity = validate_toxicity(body.get("toxicity", 1.0))
        attributes = validate_attributes(type_, body.get("attributes"))
        toxic = ToxicState(name, type_, stream, toxicity, attributes)
        proxy.toxics[name] = toxic
        proxy.toxics_changed()
        return json_reply(toxic.to_json())

    def _toxic(self, proxy: ProxyState, request: web.Request) -> ToxicState:
        toxic = proxy.toxics.get(request.match_info["toxic"])
        if toxic is None:
            raise ApiError(404, "toxic not found")
        return toxic

    async def _get_toxic(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        return json_reply(self._toxic(proxy, request).to_json())

    async def _update_toxic(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        toxic = self._toxic(proxy, request)
        body = require_obj(await read_body(request))
        attributes = validate_attributes(toxic.type, body.get("attributes"), toxic.attributes)
        toxicity = validate_toxicity(body.get("toxicity", toxic.toxicity))
        toxic.attributes = attributes
        toxic.toxicity = toxicity
        toxic.touch()
        proxy.toxics_changed()
        return json_reply(toxic.to_json())

    async def _delete_toxic(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        toxic = self._toxic(proxy, request)
        del proxy.toxics[toxic.name]
        proxy.toxics_changed(toxic)
        return web.Response(status=204)


async def _stamp(request: web.Request, response: web.StreamResponse) -> None:
    """Every reply carries a request id, as on the real server, and no ``Server`` header."""
    response.headers["X-Toxiproxy-Request-Id"] = request_id()
    response.headers.popall("Server", None)
