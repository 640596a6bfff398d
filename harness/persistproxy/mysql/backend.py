"""One server connection of the reference MySQL proxy: connect and log in (``mysql_native_password``,
auth switch), run the proxy's own statements (state snapshot and replay, PER-2), and re-prepare
statements (PER-2: prepared statements survive, ids mapped)."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

from harness.persistproxy.mysql import wire

Address = tuple[str, int]

# column types of the text protocol whose values are written unquoted when replayed
NUMERIC_TYPES = {0, 1, 2, 3, 4, 5, 8, 9, 13, 246}
BINARY_CHARSET = 63


class BackendError(Exception):
    """The server could not be reached, refused the login, or broke the connection."""


@dataclass
class Column:
    """What a replay needs of one result column."""

    name: str
    type: int
    charset: int


class Backend:
    """A logged-in connection to one server, speaking with the capabilities the client negotiated."""

    def __init__(self, address: Address, user: str, password: str, caps: int, charset: int,
                 database: str | None, timeout: float = 5.0) -> None:
        self.address = address
        try:
            self.sock = socket.create_connection(address, timeout=timeout)
        except OSError as exc:
            raise BackendError(f"cannot connect to {address[0]}:{address[1]}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._login(user, password, caps, charset, database)
        except (OSError, wire.WireError, struct.error, IndexError, ValueError) as exc:
            self.close()
            raise BackendError(f"login at {address[0]}:{address[1]} failed: {exc}") from None
        self.sock.settimeout(None)

    def _login(self, user: str, password: str, caps: int, charset: int, database: str | None) -> None:
        _, greeting = wire.read_packet(self.sock)
        hs = wire.parse_handshake(greeting)
        self.server_version = hs.version
        self.connection_id = hs.connection_id
        self.caps = (caps & hs.capabilities) | wire.PROTOCOL_41
        wire.write_packet(self.sock, 1, wire.build_handshake_response(
            self.caps, charset, user, wire.native_token(password, hs.scramble), database))
        seq, reply = wire.read_packet(self.sock)
        if reply[:1] == b"\xfe":  # auth switch request
            plugin, pos = wire.nul_str(reply, 1)
            if plugin.decode() != wire.NATIVE:
                raise wire.WireError(f"server asks for auth plugin {plugin.decode()!r}, not {wire.NATIVE}")
            wire.write_packet(self.sock, seq + 1, wire.native_token(password, reply[pos:].rstrip(b"\0")))
            seq, reply = wire.read_packet(self.sock)
        if wire.is_err(reply):
            code, msg = wire.parse_err(reply)
            raise wire.WireError(f"error {code}: {msg}")
        self.status = wire.parse_ok(reply, self.caps).status

    @property
    def deprecate_eof(self) -> bool:
        """Result sets end with an OK packet instead of EOF packets."""
        return bool(self.caps & wire.DEPRECATE_EOF)

    def send(self, payload: bytes) -> None:
        """Send one command (sequence id 0)."""
        wire.write_packet(self.sock, 0, payload)

    def read(self) -> tuple[int, bytes]:
        """Read one packet."""
        return wire.read_packet(self.sock)

    def query(self, sql: str) -> tuple[list[Column], list[list[bytes | None]]]:
        """Run one statement of the proxy's own (text protocol); BackendError on an ERR answer."""
        self.send(bytes([wire.COM_QUERY]) + sql.encode())
        cols: list[Column] = []
        rows: list[list[bytes | None]] = []
        _, first = self.read()
        if wire.is_err(first):
            code, msg = wire.parse_err(first)
            raise BackendError(f"error {code}: {msg}")
        if first[:1] == b"\x00":
            self.status = wire.parse_ok(first, self.caps).status
            return cols, rows
        n, _ = wire.lenenc_int(first, 0)
        for _ in range(n or 0):
            cols.append(_column(self.read()[1]))
        if not self.deprecate_eof:
            self.read()
        while True:
            _, p = self.read()
            if wire.is_err(p):
                raise BackendError(f"error {wire.parse_err(p)[0]}: {wire.parse_err(p)[1]}")
            if p[:1] == b"\xfe" and len(p) < wire.MAX_PACKET:
                self.status = wire.parse_ok(p, self.caps).status
                return cols, rows
            row, pos = [], 0
            for _ in cols:
                v, pos = wire.lenenc_bytes(p, pos)
                row.append(v)
            rows.append(row)

    def prepare_many(self, sqls: list[bytes]) -> list[int]:
        """COM_STMT_PREPARE of every statement, pipelined (all sent, then all answers read); the new
        statement ids in order (BackendError on the first ERR)."""
        if not sqls:
            return []
        self.sock.sendall(b"".join(wire.frame(0, bytes([wire.COM_STMT_PREPARE]) + q) for q in sqls))
        ids, error = [], None
        for _ in sqls:
            _, first = self.read()
            if wire.is_err(first):
                error = error or "error {}: {}".format(*wire.parse_err(first))
                ids.append(-1)
                continue
            stmt_id, ncols, nparams = struct.unpack_from("<IHH", first, 1)
            for count in (nparams, ncols):
                for _ in range(count):
                    self.read()
                if count and not self.deprecate_eof:
                    self.read()
            ids.append(stmt_id)
        if error:
            raise BackendError(f"re-prepare failed: {error}")
        return ids

    def prepare(self, sql: bytes) -> tuple[int, int, int]:
        """COM_STMT_PREPARE; ``(statement id, columns, params)`` (BackendError on ERR)."""
        self.send(bytes([wire.COM_STMT_PREPARE]) + sql)
        _, first = self.read()
        if wire.is_err(first):
            code, msg = wire.parse_err(first)
            raise BackendError(f"re-prepare failed: error {code}: {msg}")
        stmt_id, ncols, nparams = struct.unpack_from("<IHH", first, 1)
        for count in (nparams, ncols):
            for _ in range(count):
                self.read()
            if count and not self.deprecate_eof:
                self.read()
        return stmt_id, ncols, nparams

    def close(self, quit_: bool = True) -> None:
        """Say COM_QUIT (best effort) and close."""
        try:
            if quit_:
                wire.write_packet(self.sock, 0, bytes([wire.COM_QUIT]))
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def _column(p: bytes) -> Column:
    pos = 0
    parts = []
    for _ in range(6):  # catalog, schema, table, org_table, name, org_name
        v, pos = wire.lenenc_bytes(p, pos)
        parts.append(v)
    _, pos = wire.lenenc_int(p, pos)  # length of fixed fields (0x0c)
    charset = struct.unpack_from("<H", p, pos)[0]
    ctype = p[pos + 6]
    return Column((parts[4] or b"").decode(errors="replace"), ctype, charset)


def literal(value: bytes | None, col: Column) -> str:
    """A SQL literal that gives back ``value`` as the server returned it (numbers unquoted, binary
    strings as hex, text quoted) - what replaying a variable sets (PER-2)."""
    if value is None:
        return "NULL"
    if col.type in NUMERIC_TYPES:
        return value.decode()
    if col.charset == BINARY_CHARSET:
        return "X'" + value.hex() + "'" if value else "''"
    return "_utf8mb4 X'" + value.hex() + "'" if value else "''"


def probe_version(address: Address, timeout: float = 3.0) -> str | None:
    """The server's version string from its greeting (None when it does not answer)."""
    try:
        with socket.create_connection(address, timeout=timeout) as s:
            return wire.parse_handshake(wire.read_packet(s)[1]).version
    except (OSError, wire.WireError, ValueError, IndexError, struct.error):
        return None


def describe(value: Any) -> str:
    """One line for an event."""
    return str(value).strip().splitlines()[0][:300] if str(value).strip() else repr(value)
