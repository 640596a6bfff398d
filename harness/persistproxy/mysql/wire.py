"""MySQL client/server protocol pieces the reference MySQL proxy needs (the MariaDB profile, PER-1/2): packets,
length-encoded integers and strings, the protocol-10 handshake, ``mysql_native_password``, and
OK / ERR / EOF packets with the session-state tracking of the OK packet."""

from __future__ import annotations

import hashlib
import socket
import struct
from dataclasses import dataclass, field

# capability flags
LONG_PASSWORD = 1  # CLIENT_MYSQL on MariaDB: set = no MariaDB extended capabilities
FOUND_ROWS = 2
LONG_FLAG = 4
CONNECT_WITH_DB = 8
COMPRESS = 0x20
LOCAL_FILES = 0x80
PROTOCOL_41 = 0x200
INTERACTIVE = 0x400
SSL = 0x800
TRANSACTIONS = 0x2000
SECURE_CONNECTION = 0x8000
MULTI_STATEMENTS = 0x10000
MULTI_RESULTS = 0x20000
PS_MULTI_RESULTS = 0x40000
PLUGIN_AUTH = 0x80000
CONNECT_ATTRS = 0x100000
PLUGIN_AUTH_LENENC = 0x200000
SESSION_TRACK = 0x800000
DEPRECATE_EOF = 0x1000000

#: What the proxy offers its clients (no TLS, no compression, no LOAD DATA LOCAL).
PROXY_CAPABILITIES = (LONG_PASSWORD | FOUND_ROWS | LONG_FLAG | CONNECT_WITH_DB | PROTOCOL_41 | INTERACTIVE
                      | TRANSACTIONS | SECURE_CONNECTION | MULTI_STATEMENTS | MULTI_RESULTS | PS_MULTI_RESULTS
                      | PLUGIN_AUTH | CONNECT_ATTRS | PLUGIN_AUTH_LENENC | SESSION_TRACK | DEPRECATE_EOF)
#: Flags that only shape the handshake response (not carried to the server as the client sent them).
HANDSHAKE_ONLY = CONNECT_ATTRS | PLUGIN_AUTH_LENENC | CONNECT_WITH_DB

# server status flags
IN_TRANS = 0x0001
AUTOCOMMIT = 0x0002
MORE_RESULTS = 0x0008
CURSOR_EXISTS = 0x0040
LAST_ROW_SENT = 0x0080
SESSION_STATE_CHANGED = 0x4000

# commands
COM_QUIT, COM_INIT_DB, COM_QUERY, COM_FIELD_LIST = 0x01, 0x02, 0x03, 0x04
COM_STATISTICS, COM_PING, COM_CHANGE_USER = 0x09, 0x0E, 0x11
COM_STMT_PREPARE, COM_STMT_EXECUTE, COM_STMT_SEND_LONG_DATA = 0x16, 0x17, 0x18
COM_STMT_CLOSE, COM_STMT_RESET, COM_SET_OPTION, COM_STMT_FETCH = 0x19, 0x1A, 0x1B, 0x1C
COM_RESET_CONNECTION = 0x1F

NATIVE = "mysql_native_password"
MAX_PACKET = 0xFFFFFF


class WireError(Exception):
    """The peer closed the connection or sent something this proxy cannot read."""


# ---------------------------------------------------------------------------------------- packets

def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise WireError("connection closed by peer")
        buf += chunk
    return bytes(buf)


def read_packet(sock: socket.socket) -> tuple[int, bytes]:
    """One logical packet ``(sequence id of its last part, payload)`` (16 MB continuations joined)."""
    payload = bytearray()
    while True:
        head = _recv_exact(sock, 4)
        length = head[0] | head[1] << 8 | head[2] << 16
        seq = head[3]
        payload += _recv_exact(sock, length) if length else b""
        if length < MAX_PACKET:
            return seq, bytes(payload)


def frame(seq: int, payload: bytes) -> bytes:
    """``payload`` as wire packets from sequence id ``seq`` (split at 16 MB)."""
    out = bytearray()
    while True:
        part, payload = payload[:MAX_PACKET], payload[MAX_PACKET:]
        out += struct.pack("<I", len(part))[:3] + bytes([seq & 0xFF]) + part
        seq += 1
        if len(part) < MAX_PACKET:
            return bytes(out)


def write_packet(sock: socket.socket, seq: int, payload: bytes) -> None:
    """Send one logical packet."""
    sock.sendall(frame(seq, payload))


# ---------------------------------------------------------------------------------------- encodings

def lenenc_int(data: bytes, pos: int) -> tuple[int | None, int]:
    """A length-encoded integer at ``pos``: ``(value or None for NULL, next position)``."""
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    if first == 0xFB:
        return None, pos + 1
    if first == 0xFC:
        return struct.unpack_from("<H", data, pos + 1)[0], pos + 3
    if first == 0xFD:
        return int.from_bytes(data[pos + 1:pos + 4], "little"), pos + 4
    return struct.unpack_from("<Q", data, pos + 1)[0], pos + 9


def lenenc_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """A length-encoded string at ``pos``: ``(bytes or None for NULL, next position)``."""
    n, pos = lenenc_int(data, pos)
    if n is None:
        return None, pos
    return data[pos:pos + n], pos + n


def enc_lenenc_int(n: int) -> bytes:
    """Encode a length-encoded integer."""
    if n < 0xFB:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + struct.pack("<Q", n)


def enc_lenenc_bytes(b: bytes) -> bytes:
    """Encode a length-encoded string."""
    return enc_lenenc_int(len(b)) + b


def nul_str(data: bytes, pos: int) -> tuple[bytes, int]:
    """A NUL-terminated string at ``pos``."""
    end = data.index(b"\0", pos)
    return data[pos:end], end + 1


# ---------------------------------------------------------------------------------------- auth

def native_token(password: str, scramble: bytes) -> bytes:
    """``mysql_native_password``: SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw)))."""
    if not password:
        return b""
    h1 = hashlib.sha1(password.encode()).digest()
    h2 = hashlib.sha1(h1).digest()
    h3 = hashlib.sha1(scramble[:20] + h2).digest()
    return bytes(a ^ b for a, b in zip(h1, h3, strict=True))


@dataclass
class Handshake:
    """A server's protocol-10 greeting."""

    version: str
    connection_id: int
    scramble: bytes
    capabilities: int
    charset: int
    status: int
    plugin: str


def parse_handshake(p: bytes) -> Handshake:
    """Read a server greeting (WireError on anything but protocol 10; ERR packets included)."""
    if p[:1] == b"\xff":
        raise WireError(f"server refused the connection: {parse_err(p)[1]}")
    if p[0] != 10:
        raise WireError(f"unsupported protocol version {p[0]}")
    ver, pos = nul_str(p, 1)
    conn_id = struct.unpack_from("<I", p, pos)[0]
    part1 = p[pos + 4:pos + 12]
    pos += 13
    cap_lo = struct.unpack_from("<H", p, pos)[0]
    charset = p[pos + 2]
    status = struct.unpack_from("<H", p, pos + 3)[0]
    cap_hi = struct.unpack_from("<H", p, pos + 5)[0]
    auth_len = p[pos + 7]
    pos += 8 + 10
    part2_len = max(13, auth_len - 8)
    part2 = p[pos:pos + part2_len].rstrip(b"\0")
    pos += part2_len
    plugin = nul_str(p, pos)[0].decode() if pos < len(p) else NATIVE
    return Handshake(ver.decode(errors="replace"), conn_id, part1 + part2, cap_lo | cap_hi << 16, charset, status,
                     plugin)


def build_handshake(version: str, connection_id: int, scramble: bytes, charset: int = 45) -> bytes:
    """The proxy's own greeting to a client (``mysql_native_password``, :data:`PROXY_CAPABILITIES`)."""
    caps = PROXY_CAPABILITIES
    return (b"\x0a" + version.encode() + b"\0" + struct.pack("<I", connection_id) + scramble[:8] + b"\0"
            + struct.pack("<H", caps & 0xFFFF) + bytes([charset]) + struct.pack("<H", AUTOCOMMIT)
            + struct.pack("<H", caps >> 16) + bytes([21]) + b"\0" * 10 + scramble[8:20] + b"\0"
            + NATIVE.encode() + b"\0")


@dataclass
class HandshakeResponse:
    """A client's answer to the greeting."""

    capabilities: int
    max_packet: int
    charset: int
    user: str
    auth: bytes
    database: str | None
    plugin: str
    attrs: bytes = field(default=b"", repr=False)


def parse_handshake_response(p: bytes) -> HandshakeResponse:
    """Read a HandshakeResponse41 (WireError for pre-4.1 clients or an SSL request)."""
    caps, max_packet, charset = struct.unpack_from("<IIB", p, 0)
    if not caps & PROTOCOL_41:
        raise WireError("client does not speak protocol 4.1")
    if caps & SSL and len(p) <= 32:
        raise WireError("client asked for TLS, which this proxy does not offer")
    user, pos = nul_str(p, 32)
    if caps & PLUGIN_AUTH_LENENC:
        auth, pos = lenenc_bytes(p, pos)
    elif caps & SECURE_CONNECTION:
        n = p[pos]
        auth, pos = p[pos + 1:pos + 1 + n], pos + 1 + n
    else:
        auth, pos = nul_str(p, pos)
    db = None
    if caps & CONNECT_WITH_DB and pos < len(p):
        raw, pos = nul_str(p, pos)
        db = raw.decode() or None
    plugin = NATIVE
    if caps & PLUGIN_AUTH and pos < len(p):
        raw, pos = nul_str(p, pos)
        plugin = raw.decode() or NATIVE
    attrs = p[pos:] if caps & CONNECT_ATTRS else b""
    return HandshakeResponse(caps, max_packet, charset, user.decode(), auth or b"", db, plugin, attrs)


def build_handshake_response(caps: int, charset: int, user: str, token: bytes, database: str | None,
                             plugin: str = NATIVE) -> bytes:
    """A HandshakeResponse41 toward a server."""
    caps = (caps | PROTOCOL_41 | SECURE_CONNECTION | PLUGIN_AUTH) & ~(SSL | COMPRESS | CONNECT_ATTRS)
    caps &= ~PLUGIN_AUTH_LENENC
    if database:
        caps |= CONNECT_WITH_DB
    else:
        caps &= ~CONNECT_WITH_DB
    out = struct.pack("<IIB", caps, MAX_PACKET, charset) + b"\0" * 23 + user.encode() + b"\0"
    out += bytes([len(token)]) + token
    if database:
        out += database.encode() + b"\0"
    return out + plugin.encode() + b"\0"


# ---------------------------------------------------------------------------------------- OK / ERR

def is_err(p: bytes) -> bool:
    """An ERR packet."""
    return p[:1] == b"\xff"


def is_eof(p: bytes) -> bool:
    """An EOF packet, or an OK packet in EOF's place under DEPRECATE_EOF (0xFE header; a row never
    starts with 0xFE short of a 16 MB value)."""
    return p[:1] == b"\xfe" and len(p) < MAX_PACKET


def parse_err(p: bytes) -> tuple[int, str]:
    """``(error code, message)`` of an ERR packet."""
    code = struct.unpack_from("<H", p, 1)[0]
    msg = p[9:] if p[3:4] == b"#" else p[3:]
    return code, msg.decode(errors="replace")


def build_err(code: int, sqlstate: str, message: str) -> bytes:
    """An ERR packet."""
    return b"\xff" + struct.pack("<H", code) + b"#" + sqlstate.encode()[:5] + message.encode()


def build_ok(status: int = AUTOCOMMIT, affected: int = 0, insert_id: int = 0, warnings: int = 0) -> bytes:
    """A plain OK packet."""
    return b"\x00" + enc_lenenc_int(affected) + enc_lenenc_int(insert_id) + struct.pack("<HH", status, warnings)


@dataclass
class Ok:
    """What the proxy reads of an OK (or EOF) packet: status flags and tracked session state."""

    status: int
    variables: dict[str, str] = field(default_factory=dict)
    schema: str | None = None
    state_changed: bool = False


def parse_ok(p: bytes, caps: int) -> Ok:
    """Status flags and session-state tracking (``SESSION_TRACK_*``) of an OK packet; an old-style
    EOF packet gives its status flags only."""
    if p[:1] == b"\xfe" and len(p) < 9:
        status = struct.unpack_from("<H", p, 3)[0] if len(p) >= 5 else 0
        return Ok(status)
    _, pos = lenenc_int(p, 1)
    _, pos = lenenc_int(p, pos)
    status, _warnings = struct.unpack_from("<HH", p, pos)
    pos += 4
    ok = Ok(status)
    if caps & SESSION_TRACK and pos < len(p):
        _info, pos = lenenc_bytes(p, pos)
        if status & SESSION_STATE_CHANGED and pos < len(p):
            block, pos = lenenc_bytes(p, pos)
            _parse_state(block or b"", ok)
    return ok


def _parse_state(block: bytes, ok: Ok) -> None:
    pos = 0
    while pos < len(block):
        kind = block[pos]
        data, pos = lenenc_bytes(block, pos + 1)
        data = data or b""
        if kind == 0:  # SESSION_TRACK_SYSTEM_VARIABLES
            name, q = lenenc_bytes(data, 0)
            value, _ = lenenc_bytes(data, q)
            ok.variables[(name or b"").decode()] = (value or b"").decode(errors="replace")
        elif kind == 1:  # SESSION_TRACK_SCHEMA
            ok.schema = (lenenc_bytes(data, 0)[0] or b"").decode()
        elif kind == 2:  # SESSION_TRACK_STATE_CHANGE
            ok.state_changed = True
