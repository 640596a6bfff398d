"""The ICM workload: a browser-like HTTP(S) client (RULEBOOK ICM-1..7) that opens a database through
the router under test and records what it got - status, redirect target, the server that answered,
errors - as ``icm.client.*`` events (docs/icm.md).

Like a browser it follows one redirect (302 + ``Location``), answers a ``401`` challenge with the
user's Basic credentials, keeps each server's session cookie for the rest of its session, and keeps
connections alive per origin (so a client is *connected* to a server when that server fails, ICM-7).
Every request of one open carries the same ``X-Request-Id``, which the servers record (``icm.served``)
and routers that proxy pass on."""

from __future__ import annotations

import contextlib
import itertools
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

#: What a failed request raises (connection refused or dropped, a timeout, a TLS failure).
HTTP_ERRORS = (httpx.HTTPError, OSError)


@dataclass
class OpenResult:
    """The outcome of one :meth:`IcmBrowser.open`."""

    request_id: str
    status: int | None  # the final HTTP status (None: no answer)
    served_by: str | None = None  # the X-ICM-Server of the final answer
    location: str | None = None  # the redirect target, if the router redirected
    error: str | None = None
    logins: int = 0  # Basic logins sent (a 401 answered)
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """A 200 with a database's data."""
        return self.status == 200


class IcmBrowser:
    """One user's browser session against an ICM cluster (``cluster``: the stand-in, for the user's
    password and the CA certificate). ``process`` names it in the history."""

    def __init__(self, cluster: Any, history: Any, process: str = "app", user: str = "alice",
                 timeout: float = 4.0) -> None:
        self.cluster = cluster
        self.history = history
        self.process = process
        self.user = user
        self.timeout = timeout
        self._clients: dict[str, httpx.Client] = {}
        self._cookies: dict[str, dict[str, str]] = {}  # origin -> cookie name -> value
        self._ids = itertools.count(1)
        self.last_url: str | None = None  # the server URL the last open ended on (a bookmark)

    def _client(self, origin: str) -> httpx.Client:
        if origin not in self._clients:
            self._clients[origin] = httpx.Client(verify=ssl.create_default_context(cafile=str(self.cluster.ca_path)),
                                                 timeout=self.timeout,
                                                 trust_env=False, follow_redirects=False)
        return self._clients[origin]

    def _record(self, type_: str, **fields: Any) -> None:
        if self.history is not None:
            self.history.record(type_, process=self.process, user=self.user, **fields)

    def open(self, url: str, database: str, *, target: str = "router") -> OpenResult:
        """Open ``url`` (a router URL, or a server URL bookmarked earlier: ``target="server"``), following
        one redirect and answering one authentication challenge per server; records
        ``icm.client.request`` and ``icm.client.result`` (and ``icm.client.redirect``)."""
        rid = f"{self.process}-{next(self._ids)}"
        scheme = urlsplit(url).scheme
        self._record("icm.client.request", request_id=rid, url=url, scheme=scheme, database=database, target=target)
        result = OpenResult(rid, None)
        try:
            resp = self._get(url, rid, result)
            if resp.status_code in (301, 302, 303, 307) and "location" in resp.headers:
                result.location = resp.headers["location"]
                port = urlsplit(result.location).port
                self._record("icm.client.redirect", request_id=rid, location=result.location,
                             server=self.cluster.server_of_port(port) if port else None)
                resp = self._get(result.location, rid, result)
            result.status = resp.status_code
            result.served_by = resp.headers.get("x-icm-server")
            with contextlib.suppress(ValueError):
                result.body = resp.json()
            if result.ok:
                self.last_url = result.location or url
        except HTTP_ERRORS as exc:
            result.error = f"{type(exc).__name__}: {exc}"[:200] or type(exc).__name__
        self._record("icm.client.result", request_id=rid, status=result.status, served_by=result.served_by,
                     location=result.location, error=result.error, logins=result.logins)
        return result

    def _get(self, url: str, rid: str, result: OpenResult) -> httpx.Response:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        jar = self._cookies.setdefault(origin, {})
        headers = {"X-Request-Id": rid, "User-Agent": f"fh-icm-browser/{self.process}"}
        resp = self._send(origin, url, headers, jar)
        if resp.status_code == 401:
            self._record("icm.client.challenge", request_id=rid, url=url, served_by=resp.headers.get("x-icm-server"))
            result.logins += 1
            resp = self._send(origin, url, headers, jar, auth=(self.user, self.cluster.password(self.user)))
        return resp

    def _send(self, origin: str, url: str, headers: dict[str, str], jar: dict[str, str],
              auth: tuple[str, str] | None = None) -> httpx.Response:
        cookie = "; ".join(f"{k}={v}" for k, v in jar.items())
        resp = self._client(origin).get(url, headers={**headers, **({"Cookie": cookie} if cookie else {})},
                                        auth=auth)
        for header in resp.headers.get_list("set-cookie"):
            key, _, rest = header.partition("=")
            jar[key.strip()] = rest.split(";", 1)[0]
        return resp

    def close(self) -> None:
        """Close every kept-alive connection."""
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
