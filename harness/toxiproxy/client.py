"""Typed client for the Toxiproxy HTTP API v2 (real toxiproxy-server or the embedded server)."""

from __future__ import annotations

from typing import Any

import httpx

from harness.errors import ProxyError, ToxiproxyAPIError, ToxiproxyUnreachableError
from harness.toxiproxy.models import ConnEvent, Proxy, Toxic

DEFAULT_URL = "http://127.0.0.1:8474"


class ToxiproxyClient:
    """Client for one Toxiproxy server. Every request has a timeout (``timeout`` seconds).

    Use as a context manager or call :meth:`close`."""

    def __init__(self, url: str = DEFAULT_URL, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(base_url=self.url, timeout=timeout, trust_env=False)
        #: node annotations this client sent (proxy name -> node); used to label log-derived
        #: events of a real server, which ignores the ``node`` key.
        self.nodes: dict[str, str] = {}
        #: bound listen address of every proxy this client has seen in an answer (proxy name ->
        #: ``host:port``); a real server's log names only the configured ``127.0.0.1:0``.
        self.listens: dict[str, str] = {}

    # -- plumbing -------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the underlying HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> ToxiproxyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, json: Any = None, params: dict[str, Any] | None = None,
                 ok: tuple[int, ...] = (200,)) -> Any:
        full = f"{self.url}{path}"
        if self._http.is_closed:
            raise ProxyError(f"the Toxiproxy client for {self.url} is closed; create a new one")
        try:
            resp = self._http.request(method, path, json=json, params=params)
        except httpx.TimeoutException as exc:
            raise ToxiproxyUnreachableError(full, f"no answer within {self.timeout} s: "
                                            f"{type(exc).__name__}") from exc
        except httpx.TransportError as exc:
            raise ToxiproxyUnreachableError(full, f"{type(exc).__name__}: {exc}") from exc
        if resp.status_code not in ok:
            message = resp.text.strip()
            try:
                body = resp.json()
                if isinstance(body, dict) and "error" in body:
                    message = str(body["error"])
            except ValueError:
                pass
            raise ToxiproxyAPIError(method, full, resp.status_code, message or resp.reason_phrase)
        if resp.status_code == 204 or not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            return resp.text

    # -- server ---------------------------------------------------------------------------------
    def version(self) -> str:
        """The server's version string (``GET /version``; JSON or plain text both accepted)."""
        body = self._request("GET", "/version")
        if isinstance(body, dict):
            return str(body.get("version", ""))
        return str(body).strip()

    def reset(self) -> None:
        """Enable every proxy and remove every toxic (``POST /reset``)."""
        self._request("POST", "/reset", ok=(204, 200))

    def is_available(self) -> bool:
        """True if the API answers ``GET /version``."""
        try:
            self.version()
        except ProxyError:
            return False
        return True

    def metrics(self) -> str:
        """The Prometheus text of ``GET /metrics`` (a real server started with ``-proxy-metrics``)."""
        return str(self._request("GET", "/metrics") or "")

    # -- proxies --------------------------------------------------------------------------------
    def _seen(self, data: Any) -> Proxy:
        proxy = Proxy.from_json(data)
        if proxy.name and proxy.listen:
            self.listens[proxy.name] = proxy.listen
        return proxy

    def proxies(self) -> dict[str, Proxy]:
        """Every proxy, keyed by name."""
        body = self._request("GET", "/proxies") or {}
        return {name: self._seen(p) for name, p in body.items()}

    def create_proxy(self, name: str, upstream: str, listen: str = "127.0.0.1:0", enabled: bool = True,
                     node: str | None = None) -> Proxy:
        """Create a proxy; ``listen`` port 0 is bound and reported back with the real port.

        ``node`` annotates connection events (embedded server only; a real server ignores it)."""
        body: dict[str, Any] = {"name": name, "upstream": upstream, "listen": listen, "enabled": enabled}
        if node is not None:
            body["node"] = node
        proxy = self._seen(self._request("POST", "/proxies", json=body, ok=(201, 200)))
        if node is not None:
            self.nodes[name] = node
        return proxy

    def get_proxy(self, name: str) -> Proxy:
        """One proxy (404 -> :class:`ToxiproxyAPIError` with status 404)."""
        return self._seen(self._request("GET", f"/proxies/{name}"))

    def populate(self, proxies: list[Proxy | dict[str, Any]]) -> list[Proxy]:
        """Create or replace several proxies at once (``POST /populate``)."""
        body = [p.to_json() if isinstance(p, Proxy) else p for p in proxies]
        result = self._request("POST", "/populate", json=body, ok=(201, 200))
        for item in body:
            if item.get("node") is not None:
                self.nodes[str(item["name"])] = str(item["node"])
        return [self._seen(p) for p in (result or {}).get("proxies") or []]  # null when empty, as on real

    def update_proxy(self, name: str, *, enabled: bool | None = None, listen: str | None = None,
                     upstream: str | None = None, node: str | None = None) -> Proxy:
        """PATCH a proxy; omitted fields keep their values. Changing listen/upstream drops connections."""
        body: dict[str, Any] = {}
        for key, value in (("enabled", enabled), ("listen", listen), ("upstream", upstream),
                           ("node", node)):
            if value is not None:
                body[key] = value
        proxy = self._seen(self._request("PATCH", f"/proxies/{name}", json=body))
        if node is not None:
            self.nodes[name] = node
        return proxy

    def enable_proxy(self, name: str) -> Proxy:
        """Start listening again (on the same port)."""
        return self.update_proxy(name, enabled=True)

    def disable_proxy(self, name: str) -> Proxy:
        """Close the listener and every connection of the proxy (toxics are kept)."""
        return self.update_proxy(name, enabled=False)

    def delete_proxy(self, name: str) -> None:
        """Delete a proxy and drop its connections."""
        self._request("DELETE", f"/proxies/{name}", ok=(204, 200))
        self.listens.pop(name, None)

    # -- toxics ---------------------------------------------------------------------------------
    def toxics(self, proxy: str) -> list[Toxic]:
        """The proxy's toxics (upstream chain first)."""
        return [Toxic.from_json(t) for t in self._request("GET", f"/proxies/{proxy}/toxics") or []]

    def add_toxic(self, proxy: str, type: str, *, name: str | None = None, stream: str = "downstream",
                  toxicity: float = 1.0, attributes: dict[str, Any] | None = None) -> Toxic:
        """Add a toxic; the name defaults to ``<type>_<stream>``."""
        body = {"name": name or f"{type}_{stream}", "type": type, "stream": stream,
                "toxicity": toxicity, "attributes": dict(attributes or {})}
        return Toxic.from_json(self._request("POST", f"/proxies/{proxy}/toxics", json=body,
                                             ok=(200, 201)))

    def get_toxic(self, proxy: str, name: str) -> Toxic:
        """One toxic."""
        return Toxic.from_json(self._request("GET", f"/proxies/{proxy}/toxics/{name}"))

    def update_toxic(self, proxy: str, name: str, *, attributes: dict[str, Any] | None = None,
                     toxicity: float | None = None) -> Toxic:
        """PATCH a toxic: ``attributes`` are merged, ``toxicity`` replaced when given."""
        body: dict[str, Any] = {}
        if attributes is not None:
            body["attributes"] = attributes
        if toxicity is not None:
            body["toxicity"] = toxicity
        return Toxic.from_json(self._request("PATCH", f"/proxies/{proxy}/toxics/{name}", json=body))

    def delete_toxic(self, proxy: str, name: str) -> None:
        """Remove a toxic (a removed timeout toxic closes the connections it was holding)."""
        self._request("DELETE", f"/proxies/{proxy}/toxics/{name}", ok=(204, 200))

    # -- events extension -----------------------------------------------------------------------
    def events(self, since: int = 0) -> tuple[list[ConnEvent], int]:
        """Connection events with ``seq >= since`` and the ``since`` to use next (embedded only)."""
        body = self._request("GET", "/events", params={"since": since})
        return [ConnEvent.from_json(e) for e in body.get("events", [])], int(body.get("next", since))
