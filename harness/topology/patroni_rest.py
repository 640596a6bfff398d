"""Patroni's REST API as the harness uses it (HAM-5 observations and the role operations):
``GET /primary`` answers 200 only on the leader, ``GET /replica`` 200 on a healthy replica;
``POST /switchover``, ``POST /failover``, ``PATCH /config`` (maintenance mode). Plain HTTP on
127.0.0.1 with short timeouts; an unreachable API is ``None``, never an exception."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any

from harness.errors import TopologyError


def status(address: str, path: str, timeout: float = 1.0) -> int | None:
    """The HTTP status of ``GET http://address/path`` (None when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError, http.client.HTTPException):
        return None


def get_json(address: str, path: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The JSON body of ``GET http://address/path`` whatever its status (None when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return json.loads(exc.read() or b"{}")
        except ValueError:
            return None
    except (OSError, ValueError, http.client.HTTPException):
        return None


def send(address: str, method: str, path: str, body: dict[str, Any], timeout: float = 60.0) -> tuple[int, str]:
    """``method http://address/path`` with a JSON body; (status, text). TopologyError when the API
    cannot be reached at all."""
    req = urllib.request.Request(f"http://{address}{path}", data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as exc:
        raise TopologyError(f"Patroni's REST API at {address} did not answer {method} {path}: {exc}") from None
