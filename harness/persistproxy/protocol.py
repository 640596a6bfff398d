"""PostgreSQL frontend/backend protocol v3 framing: message builders and parsers used by the
persistent-connection proxy (PER-1, PER-2). Only what the proxy needs; no third-party code.

A regular message is ``type (1 byte) | int32 length (including itself) | payload``. The startup
packet, SSLRequest, GSSENCRequest and CancelRequest have no type byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from harness.errors import ProtocolError as ProtocolError  # re-exported

PROTOCOL_V3 = 196608  # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

MAX_STARTUP_LEN = 10_000
MAX_MESSAGE_LEN = 1 << 30  # PostgreSQL's own limit for one message
DEFAULT_MAX_MESSAGE_SIZE = 64 << 20  # the proxy's default limit for one frontend message (64 MiB)

#: frontend message type byte -> name, for error messages
FRONT_NAMES = {
    ord("Q"): "Query", ord("P"): "Parse", ord("B"): "Bind", ord("E"): "Execute", ord("D"): "Describe",
    ord("C"): "Close", ord("S"): "Sync", ord("H"): "Flush", ord("F"): "FunctionCall", ord("X"): "Terminate",
    ord("d"): "CopyData", ord("c"): "CopyDone", ord("f"): "CopyFail", ord("p"): "PasswordMessage",
}

_I32 = struct.Struct("!i")

def msg(kind: bytes, payload: bytes = b"") -> bytes:
    """Encode one typed message."""
    return kind + _I32.pack(len(payload) + 4) + payload


def cstr(s: str | bytes, encoding: str = "utf-8") -> bytes:
    """A NUL-terminated string (undecodable bytes kept through ``surrogateescape``)."""
    return (s.encode(encoding, "surrogateescape") if isinstance(s, str) else s) + b"\0"


_PG_CODECS = {
    "UTF8": "utf-8", "UNICODE": "utf-8", "SQL_ASCII": "latin-1", "LATIN1": "latin-1",
    "LATIN2": "iso8859-2", "LATIN3": "iso8859-3", "LATIN4": "iso8859-4", "LATIN5": "iso8859-9",
    "LATIN6": "iso8859-10", "LATIN7": "iso8859-13", "LATIN8": "iso8859-14", "LATIN9": "iso8859-15",
    "LATIN10": "iso8859-16", "WIN1250": "cp1250", "WIN1251": "cp1251", "WIN1252": "cp1252",
    "WIN1253": "cp1253", "WIN1254": "cp1254", "WIN1255": "cp1255", "WIN1256": "cp1256",
    "WIN1257": "cp1257", "WIN1258": "cp1258", "WIN866": "cp866", "WIN874": "cp874", "KOI8R": "koi8-r",
    "KOI8U": "koi8-u", "EUC_JP": "euc_jp", "EUC_KR": "euc_kr", "EUC_CN": "gb2312", "SJIS": "shift_jis",
    "BIG5": "big5", "GBK": "gbk", "GB18030": "gb18030", "UHC": "cp949", "JOHAB": "johab",
    "ISO_8859_5": "iso8859-5", "ISO_8859_6": "iso8859-6", "ISO_8859_7": "iso8859-7",
    "ISO_8859_8": "iso8859-8",
}


def python_codec(pg_encoding: str) -> str:
    """The Python codec of a PostgreSQL client encoding name (``latin-1`` when unknown: byte-exact)."""
    return _PG_CODECS.get(pg_encoding.upper().replace("-", "_"), "latin-1")


def split_messages(buf: bytearray, max_len: int = MAX_MESSAGE_LEN) -> list[tuple[bytes, bytes]]:
    """Remove every complete message from ``buf`` and return ``[(type, whole_message_bytes)]``.
    Raises :class:`ProtocolError` on an impossible length (bad framing never crashes the proxy)."""
    out: list[tuple[bytes, bytes]] = []
    pos = 0
    n = len(buf)
    while n - pos >= 5:
        length = _I32.unpack_from(buf, pos + 1)[0]
        if length < 4 or length > max_len:
            raise ProtocolError(f"invalid message length {length} for message type {bytes(buf[pos:pos+1])!r}")
        end = pos + 1 + length
        if end > n:
            break
        out.append((bytes(buf[pos:pos + 1]), bytes(buf[pos:end])))
        pos = end
    if pos:
        del buf[:pos]
    return out


def payload(message: bytes) -> bytes:
    """The payload of a whole encoded message."""
    return message[5:]


def read_cstr(data: bytes, pos: int, encoding: str = "utf-8") -> tuple[str, int]:
    """Read a NUL-terminated string at ``pos``; return it and the position after the NUL.
    Undecodable bytes are kept (``surrogateescape``) so that re-encoding gives them back.
    Raises :class:`ProtocolError` when no NUL follows ``pos`` (a malformed message, never a crash)."""
    end = data.find(b"\0", pos)
    if end < 0:
        raise ProtocolError("a string field is not NUL-terminated")
    return data[pos:end].decode(encoding, "surrogateescape"), end + 1


# ---------------------------------------------------------------------------------------------
# Backend messages (built by the proxy when it plays the server towards the front client)

def error_response(severity: str, code: str, message: str, detail: str | None = None,
                   hint: str | None = None) -> bytes:
    """An ErrorResponse ('E') with severity, SQLSTATE, message and optional detail/hint."""
    fields = b"S" + cstr(severity) + b"V" + cstr(severity) + b"C" + cstr(code) + b"M" + cstr(message)
    if detail:
        fields += b"D" + cstr(detail)
    if hint:
        fields += b"H" + cstr(hint)
    return msg(b"E", fields + b"\0")


def parameter_status(name: str, value: str) -> bytes:
    """A ParameterStatus ('S') message."""
    return msg(b"S", cstr(name) + cstr(value))


def backend_key_data(pid: int, secret: int) -> bytes:
    """A BackendKeyData ('K') message with 32-bit process id and secret key."""
    return msg(b"K", struct.pack("!ii", pid, secret))


def ready_for_query(status: bytes = b"I") -> bytes:
    """A ReadyForQuery ('Z') message."""
    return msg(b"Z", status)


def auth_request(code: int, extra: bytes = b"") -> bytes:
    """An Authentication* ('R') message."""
    return msg(b"R", _I32.pack(code) + extra)


def negotiate_protocol_version(minor: int, unsupported: list[str]) -> bytes:
    """A NegotiateProtocolVersion ('v') message offering protocol 3.``minor``. The server (and
    libpq) put the full version number ``3 << 16 | minor`` in the field."""
    body = _I32.pack(3 << 16 | minor) + _I32.pack(len(unsupported)) + b"".join(cstr(o) for o in unsupported)
    return msg(b"v", body)


# ---------------------------------------------------------------------------------------------
# Frontend messages (built by the proxy when it plays the client towards the principal)

def startup_message(params: dict[str, str]) -> bytes:
    """A v3.0 StartupMessage with the given parameters."""
    body = _I32.pack(PROTOCOL_V3) + b"".join(cstr(k) + cstr(v) for k, v in params.items()) + b"\0"
    return _I32.pack(len(body) + 4) + body


def cancel_request(pid: int, secret: int) -> bytes:
    """A CancelRequest packet."""
    return struct.pack("!iiii", 16, CANCEL_REQUEST, pid, secret)


def query(sql: str, encoding: str = "utf-8") -> bytes:
    """A simple Query ('Q') message."""
    return msg(b"Q", cstr(sql, encoding))


SYNC = msg(b"S")
TERMINATE = msg(b"X")


# ---------------------------------------------------------------------------------------------
# Parsers

@dataclass
class ErrorFields:
    """The interesting fields of an ErrorResponse or NoticeResponse."""

    severity: str
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity} {self.code}: {self.message}"


def parse_error(message: bytes) -> ErrorFields:
    """Parse an ErrorResponse / NoticeResponse message."""
    data = payload(message)
    fields: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        key = chr(data[pos])
        value, pos = read_cstr(data, pos + 1)
        fields[key] = value
    return ErrorFields(fields.get("V", fields.get("S", "ERROR")), fields.get("C", ""), fields.get("M", ""))


def parse_parameter_status(message: bytes, encoding: str = "utf-8") -> tuple[str, str]:
    """Parse a ParameterStatus message into ``(name, value)``."""
    data = payload(message)
    name, pos = read_cstr(data, 0, encoding)
    value, _ = read_cstr(data, pos, encoding)
    return name, value


def parse_startup(body: bytes) -> tuple[int, dict[str, str]]:
    """Parse a startup packet body (after the length): ``(protocol code, parameters)``."""
    if len(body) < 4:
        raise ProtocolError("startup packet too short")
    code = _I32.unpack_from(body, 0)[0]
    params: dict[str, str] = {}
    pos = 4
    try:
        while pos < len(body) and body[pos] != 0:
            key, pos = read_cstr(body, pos)
            value, pos = read_cstr(body, pos)
            params[key] = value
    except ProtocolError as exc:
        raise ProtocolError("startup packet: unterminated parameter string") from exc
    return code, params


def parse_parse(message: bytes, encoding: str = "utf-8") -> tuple[str, str]:
    """Parse a Parse ('P') message into ``(statement name, query text)``."""
    data = payload(message)
    name, pos = read_cstr(data, 0, encoding)
    sql, _ = read_cstr(data, pos, encoding)
    return name, sql


def parse_bind(message: bytes) -> tuple[str, str]:
    """The ``(portal, statement)`` names of a Bind ('B') message."""
    data = payload(message)
    portal, pos = read_cstr(data, 0)
    stmt, _ = read_cstr(data, pos)
    return portal, stmt


def parse_close_or_describe(message: bytes) -> tuple[str, str]:
    """The ``(kind 'S'|'P', name)`` of a Close ('C') or Describe ('D') message."""
    data = payload(message)
    kind = chr(data[0]) if data else "?"
    name, _ = read_cstr(data, 1)
    return kind, name


def parse_execute_portal(message: bytes) -> str:
    """The portal name of an Execute ('E') message."""
    return read_cstr(payload(message), 0)[0]


def parse_command_tag(message: bytes) -> str:
    """The command tag of a CommandComplete ('C') message."""
    return read_cstr(payload(message), 0)[0]
