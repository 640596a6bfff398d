"""What the embedded server accepts: request bodies, toxic attributes, listen addresses, queries.

Every check raises :class:`ApiError` (an HTTP status and a one-line message naming what is wrong)
instead of letting a bad value reach the data path. The limits are the ones real Toxiproxy 2.12's
own Go types imply (docs/toxiproxy.md, "What the embedded server accepts"): durations are int64
milliseconds (or microseconds) that must also fit Go's ``time.Duration`` (int64 nanoseconds),
sizes are int64, toxicity is a float32. Where real 2.12 accepts a value and then crashes or
misbehaves (negative durations and rates, ``slicer average_size 0``), the embedded server answers
400 instead - a deliberate difference. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from dataclasses import dataclass
from typing import Any

INT64_MAX = 2**63 - 1
MAX_MS = INT64_MAX // 1_000_000  # the longest time.Duration, in milliseconds (about 292 years)
MAX_US = INT64_MAX // 1_000  # ... in microseconds
FLOAT32_MAX = 3.4028234663852886e38
MAX_BODY = 1024 * 1024  # bytes of a request body
MAX_DEPTH = 32  # nesting of arrays/objects in a request body (a populate body needs 2)
EVENTS_LIMIT_MAX = 100_000  # the most events one GET /events answers (= events kept)


class ApiError(Exception):
    """An HTTP error answer: ``{"error": message, "status": status}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Attr:
    """One integer attribute of a toxic type: its unit and the range the embedded server accepts."""

    name: str
    unit: str
    minimum: int
    maximum: int
    note: str = ""  # what real 2.12 does with a value out of range


def _ms(name: str) -> Attr:
    return Attr(name, "ms", 0, MAX_MS, "real 2.12 accepts negative values")


# Attributes of each toxic type (all integers, default 0), with their limits.
TOXIC_ATTRIBUTES: dict[str, tuple[Attr, ...]] = {
    "latency": (_ms("latency"), _ms("jitter")),
    # rate KB/s: Go computes rate*100 bytes per 100 ms slice (int64); 0 stalls the link, as on real
    "bandwidth": (Attr("rate", "KB/s", 0, INT64_MAX // 100, "real 2.12 panics on a negative rate"),),
    "slow_close": (_ms("delay"),),
    "timeout": (_ms("timeout"),),
    "reset_peer": (_ms("timeout"),),
    "slicer": (Attr("average_size", "bytes", 1, INT64_MAX, "real 2.12 crashes on 0"),
               Attr("size_variation", "bytes", 0, INT64_MAX), Attr("delay", "µs", 0, MAX_US)),
    "limit_data": (Attr("bytes", "bytes", 0, INT64_MAX),),
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value ({name} is not JSON)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nesting_depth(raw: bytes, stop_at: int = MAX_DEPTH) -> int:
    """How deeply arrays/objects nest in a JSON text (strings skipped); stops counting past ``stop_at``."""
    depth = deepest = 0
    for ch in _STRINGS.sub(b'""', raw).translate(None, _NOT_BRACKETS):
        depth += 1 if ch in b"[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > stop_at:
                break
    return deepest


def parse_body(raw: bytes) -> Any:
    """A request body as JSON, strictly (no NaN/Infinity, numbers in range, bounded nesting)."""
    if len(raw) > MAX_BODY:
        raise ApiError(413, f"request body too large: {len(raw)} bytes; the limit is {MAX_BODY}")
    if not raw.strip():
        raise ApiError(400, "bad request body: EOF")
    if nesting_depth(raw) > MAX_DEPTH:
        raise ApiError(400, f"bad request body: nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError too
        raise ApiError(400, f"bad request body: {exc}") from exc


def _int_value(type_: str, attr: Attr, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"bad request body: attribute {attr.name!r} of a {type_} toxic must be an "
                            f"integer ({attr.unit}), got {json.dumps(value)[:60]}")
    if not attr.minimum <= value <= attr.maximum:
        bound = f">= {attr.minimum}" if value < attr.minimum else f"<= {attr.maximum}"
        shown = str(value) if len(str(value)) <= 30 else f"a {len(str(value))}-digit number"
        note = f"; {attr.note}" if attr.note and value < attr.minimum else ""
        raise ApiError(400, f"invalid attribute: {attr.name!r} of a {type_} toxic must be {bound} "
                            f"({attr.unit}), got {shown}{note}")
    return value


def validate_attributes(type_: str, raw: Any, base: dict[str, int] | None = None) -> dict[str, int]:
    """Merge ``raw`` over ``base`` (or zero defaults) and check every value; raises ApiError 400.

    Unknown keys are ignored, as on the real server."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ApiError(400, "bad request body: attributes must be a JSON object")
    spec = TOXIC_ATTRIBUTES[type_]
    out = dict(base) if base is not None else {a.name: 0 for a in spec}
    for attr in spec:
        if attr.name in raw:
            out[attr.name] = _int_value(type_, attr, raw[attr.name])
        elif out[attr.name] < attr.minimum:  # a default the type does not allow (slicer average_size)
            out[attr.name] = _int_value(type_, attr, out[attr.name])
    if type_ == "slicer":
        if out["size_variation"] >= out["average_size"]:
            raise ApiError(400, "invalid attribute: 'size_variation' of a slicer toxic must be less than "
                                f"'average_size' ({out['average_size']}), got {out['size_variation']}")
    return out


def validate_toxicity(value: Any) -> float:
    """A toxicity: a number within 0 … 1, the probability that the toxic acts on a connection;
    raises ApiError 400. Real 2.12 stores any float32 (5 and -1 answered 200, measured) and its draw
    makes anything above 1 act like 1 and below 0 like 0: the embedded server refuses such values
    instead (a deliberate difference, docs/toxiproxy.md)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, f"bad request body: toxicity must be a number, got {json.dumps(value)[:60]}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or abs(number) > FLOAT32_MAX:
        raise ApiError(400, "bad request body: toxicity is out of range for a float32")
    if not 0.0 <= number <= 1.0:
        raise ApiError(400, f"invalid toxicity: {json.dumps(value)[:40]} is not within 0 to 1 (a probability)")
    return number


#: Characters no proxy or toxic name may hold: '/' (real 2.12's routes cannot address such a name
#: afterwards: 404 or a 301 redirect, so the proxy can never be read or deleted) and control characters.
_BAD_NAME = re.compile(r"[/\x00-\x1f\x7f]")
MAX_NAME = 256  # characters of a proxy or toxic name


def validate_name(value: Any, what: str = "proxy") -> str:
    """A proxy or toxic name the API can address afterwards (``/proxies/{name}``); raises ApiError
    400 naming the problem. Real 2.12 creates a proxy named ``../../../tmp/x`` (201, a listener) that
    no request can then reach - GET and DELETE answer 301 or 404 (measured); the embedded server
    refuses such names: a ``/``, ``.`` or ``..``, control characters, more than :data:`MAX_NAME`
    characters (docs/toxiproxy.md, "Deliberate differences")."""
    if not isinstance(value, str):
        raise ApiError(400, f"bad request body: {what} name must be a string")
    if value in (".", "..") or _BAD_NAME.search(value) or len(value) > MAX_NAME:
        shown = json.dumps(value)[:60]
        raise ApiError(400, f"invalid {what} name {shown}: a name must not be '.' or '..', hold '/' or control "
                            f"characters, or be longer than {MAX_NAME} characters")
    return value


def json_number(value: float) -> float | int:
    """How Go prints a float: ``1`` rather than ``1.0`` for whole numbers."""
    return int(value) if value.is_integer() else value


def _split(address: str, what: str) -> tuple[str, str]:
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ApiError(400, f"{what} tcp: address {address}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def _port(address: str, port: str, what: str, lowest: int) -> int:
    if not port.isdigit() or not port.isascii() or len(port) > 5 or not lowest <= int(port) <= 65535:
        raise ApiError(400, f"{what} tcp: address {address}: invalid port (use {lowest}..65535)")
    return int(port)


def parse_listen(address: str) -> tuple[str, int]:
    """The (host, port) to bind for a proxy's ``listen``; raises ApiError 400 if malformed.

    An empty host (``":8080"``) binds loopback, never all interfaces (real Toxiproxy binds ``[::]``);
    ``localhost`` is 127.0.0.1; any other host must be an IP address (no name is resolved)."""
    host, port_text = _split(address, "listen")
    port = _port(address, port_text, "listen", 0)
    if host in ("", "localhost"):
        return "127.0.0.1", port
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ApiError(400, f"listen tcp: address {address}: the host must be an IP address or localhost "
                            "(the embedded server resolves no names)") from None
    return host, port


def check_upstream(address: str) -> None:
    """An ``upstream`` must be ``host:port`` with a port 1..65535; raises ApiError 400."""
    host, port_text = _split(address, "upstream")
    _port(address, port_text, "upstream", 1)
    if not host:
        raise ApiError(400, f"upstream tcp: address {address}: missing host (e.g. 127.0.0.1:{port_text})")


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def query_int(value: str | None, name: str, default: int, lowest: int, highest: int) -> int:
    """An integer query parameter within ``lowest..highest``; raises ApiError 400 naming it."""
    if value is None:
        return default
    text = value.strip()
    if not (text.lstrip("-").isdigit() and text.isascii() and len(text) <= 20):
        raise ApiError(400, f"bad request: {name} must be an integer, got {value[:40]!r}")
    number = int(text)
    if not lowest <= number <= highest:
        raise ApiError(400, f"bad request: {name} must be within {lowest}..{highest}, got {number}")
    return number
