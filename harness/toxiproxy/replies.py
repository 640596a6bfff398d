"""HTTP replies and request bodies of the embedded server, shaped like real Toxiproxy 2.12's.

Real 2.12 answers success with ``Content-Type: application/json`` (``/version``:
``application/json;charset=utf-8``), errors with ``text/plain; charset=utf-8`` and
``X-Content-Type-Options: nosniff`` around the JSON ``{"error", "status"}`` (``/populate`` errors
are ``application/json`` and carry ``"proxies"``), unknown routes with ``404 page not found``,
a wrong method with an empty 405, and an ``X-Toxiproxy-Request-Id`` on every reply.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from aiohttp import web

from harness.toxiproxy.limits import MAX_BODY, ApiError, check_upstream, parse_body, parse_listen, validate_name

JSON = "application/json"


def request_id() -> str:
    """A 20-character id like the real server's (xid-style base32hex)."""
    return base64.b32hexencode(os.urandom(12)).decode().rstrip("=").lower()


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def json_reply(obj: Any, status: int = 200, content_type: str = JSON) -> web.Response:
    """A success answer: compact JSON, as Go's encoder writes it."""
    return web.Response(body=_dumps(obj), status=status, headers={"Content-Type": content_type})


def error_reply(status: int, message: str) -> web.Response:
    """An error answer: ``{"error", "status"}`` as ``text/plain`` (Go's ``http.Error``)."""
    return web.Response(body=_dumps({"error": message, "status": status}) + b"\n", status=status,
                        headers={"Content-Type": "text/plain; charset=utf-8",
                                 "X-Content-Type-Options": "nosniff"})


def populate_error(status: int, message: str, proxies: list[dict[str, Any]] | None) -> web.Response:
    """A ``/populate`` error: JSON with the proxies applied so far (null when none was)."""
    return json_reply({"error": message, "status": status, "proxies": proxies}, status=status)


def not_found_reply() -> web.Response:
    """An unknown route, as Go's router answers it."""
    return web.Response(body=b"404 page not found\n", status=404,
                        headers={"Content-Type": "text/plain; charset=utf-8",
                                 "X-Content-Type-Options": "nosniff"})


async def read_body(request: web.Request) -> Any:
    """The request body as JSON (size, nesting and number limits: :func:`limits.parse_body`)."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise ApiError(413, f"request body too large: {request.content_length} bytes; the limit is {MAX_BODY}")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise ApiError(413, f"request body too large; the limit is {MAX_BODY} bytes") from exc
    return parse_body(raw)


def require_obj(body: Any, what: str = "") -> dict[str, Any]:
    """The body as an object (JSON ``null`` counts as an empty one, as in Go); raises ApiError 400."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ApiError(400, f"bad request body: expected a JSON object{what}")
    return body


def check_proxy_fields(body: dict[str, Any]) -> None:
    """Types of a proxy body's fields, and well-formed ``listen`` / ``upstream`` addresses."""
    for key in ("name", "listen", "upstream", "node"):
        if key in body and body[key] is not None and not isinstance(body[key], str):
            raise ApiError(400, f"bad request body: {key} must be a string")
    if "enabled" in body and not isinstance(body["enabled"], bool):
        raise ApiError(400, "bad request body: enabled must be a boolean")
    if body.get("listen"):
        parse_listen(body["listen"])
    if body.get("upstream"):
        check_upstream(body["upstream"])


def proxy_spec(body: Any) -> dict[str, Any]:
    """A new proxy from a ``POST /proxies`` or ``/populate`` item; raises ApiError 400."""
    body = require_obj(body)
    check_proxy_fields(body)
    if not body.get("name"):
        raise ApiError(400, "missing required field: name")
    if not body.get("upstream"):
        raise ApiError(400, "missing required field: upstream")
    validate_name(body["name"])
    return {"name": body["name"], "listen": body.get("listen") or "127.0.0.1:0",
            "upstream": body["upstream"], "enabled": body.get("enabled", True), "node": body.get("node")}
