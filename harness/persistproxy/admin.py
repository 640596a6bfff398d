"""Admin interface of the persistent proxy: HTTP/JSON on 127.0.0.1 via aiohttp.

* ``GET  /status``  -> :meth:`PersistentProxy.status`
* ``POST /drain``   body ``{"timeout": seconds}`` (optional) -> :meth:`PersistentProxy.drain` (PER-4)
* ``POST /resume``  body ``{"host": h, "port": p}`` (optional) -> :meth:`PersistentProxy.resume`
  (PER-1, PER-3)

Errors are answered as ``{"error": text}`` with status 400.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .proxy import PersistentProxy


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        data = await request.json()
    except (json.JSONDecodeError, ValueError) as exc:
        raise web.HTTPBadRequest(text=json.dumps({"error": f"body is not JSON: {exc}"}),
                                 content_type="application/json") from exc
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(text=json.dumps({"error": "body must be a JSON object"}),
                                 content_type="application/json")
    return data


def build_app(proxy: PersistentProxy) -> web.Application:
    """The aiohttp application serving ``/status``, ``/drain`` and ``/resume`` (PER-1..PER-4)."""

    async def status(_request: web.Request) -> web.Response:
        return web.json_response(proxy.status())

    async def drain(request: web.Request) -> web.Response:
        body = await _body(request)
        timeout = body.get("timeout")
        try:
            result = await proxy.drain(None if timeout is None else float(timeout))
        except (TypeError, ValueError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(result)

    async def resume(request: web.Request) -> web.Response:
        body = await _body(request)
        address = None
        if "host" in body or "port" in body:
            try:
                address = (str(body["host"]), int(body["port"]))
            except (KeyError, TypeError, ValueError):
                return web.json_response({"error": "resume needs both host and port (or neither)"},
                                         status=400)
        return web.json_response(await proxy.resume(address))

    app = web.Application()
    app.router.add_get("/status", status)
    app.router.add_post("/drain", drain)
    app.router.add_post("/resume", resume)
    return app


class AdminServer:
    """Runs :func:`build_app` on ``host:port`` (loopback only)."""

    def __init__(self, proxy: PersistentProxy, host: str = "127.0.0.1", port: int = 0) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the admin interface binds to the loopback only, not {host!r}")
        self.proxy = proxy
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self.address: tuple[str, int] | None = None

    async def start(self) -> tuple[str, int]:
        """Start serving; returns the bound address."""
        self._runner = web.AppRunner(build_app(self.proxy), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        assert server is not None
        sock = server.sockets[0].getsockname()  # type: ignore[union-attr]
        self.address = (sock[0], sock[1])
        return self.address

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
