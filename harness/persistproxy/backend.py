"""The proxy's back connections: log in to the current principal with the configured credentials
(SCRAM-SHA-256, MD5, cleartext or trust, whichever the server asks), run the proxy's own queries,
find the principal by probing candidates (``SELECT pg_is_in_recovery()``) and replay a session's
state on a fresh connection (PER-1, PER-2)."""

from __future__ import annotations

import asyncio
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.errors import BackendError as BackendError  # re-exported

from . import protocol as pq
from .scram import MECHANISM, ScramClient

#: ``(host, port)`` (the proxy has its own alias: it depends on nothing of the harness but its errors).
Address = tuple[str, int]

@dataclass
class BackConn:
    """One logged-in connection to a server."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    address: Address
    pid: int = 0
    secret: int = 0
    params: dict[str, str] = field(default_factory=dict)
    buf: bytearray = field(default_factory=bytearray)
    closed: bool = False
    #: protocol-level statements the session has but this connection has not been sent yet (lazy
    #: re-prepare: each is sent just before the client's first message that names it)
    missing: set[str] = field(default_factory=set)

    async def read_message(self) -> tuple[bytes, bytes]:
        """Read one whole message ``(type, bytes)``."""
        while True:
            if len(self.buf) >= 5:
                length = struct.unpack_from("!i", self.buf, 1)[0]
                if length < 4:
                    raise BackendError(f"backend sent an invalid message length {length}")
                if len(self.buf) >= length + 1:
                    out = bytes(self.buf[:length + 1])
                    del self.buf[:length + 1]
                    return out[:1], out
            chunk = await self.reader.read(65536)
            if not chunk:
                raise BackendError("back connection closed by the server")
            self.buf += chunk

    def close(self) -> None:
        """Close without waiting (sends Terminate when possible)."""
        if self.closed:
            return
        self.closed = True
        try:
            if not self.writer.is_closing():
                self.writer.write(pq.TERMINATE)
            self.writer.close()
        except (OSError, RuntimeError):
            pass

    async def simple_query(self, sql: str, codec: str = "utf-8") -> list[list[list[str | None]]]:
        """Run ``sql`` (may hold several statements) and return rows per result; ParameterStatus
        changes are recorded in ``params``. Raises :class:`BackendError` on an ErrorResponse."""
        self.writer.write(pq.query(sql, codec))
        await self.writer.drain()
        results: list[list[list[str | None]]] = []
        rows: list[list[str | None]] = []
        error: pq.ErrorFields | None = None
        while True:
            kind, message = await self.read_message()
            if kind == b"D":
                rows.append(_data_row(message, codec))
            elif kind == b"C":
                results.append(rows)
                rows = []
            elif kind == b"E":
                error = pq.parse_error(message)
            elif kind == b"S":
                name, value = pq.parse_parameter_status(message)
                self.params[name] = value
            elif kind == b"Z":
                if error is not None:
                    raise BackendError(f"{error}", error.code or "08006")
                return results


def _data_row(message: bytes, codec: str = "utf-8") -> list[str | None]:
    data = pq.payload(message)
    count = struct.unpack_from("!h", data, 0)[0]
    pos = 2
    out: list[str | None] = []
    for _ in range(count):
        n = struct.unpack_from("!i", data, pos)[0]
        pos += 4
        if n < 0:
            out.append(None)
        else:
            out.append(data[pos:pos + n].decode(codec, "surrogateescape"))
            pos += n
    return out


async def connect_backend(address: Address, user: str, password: str | None, params: dict[str, str],
                          timeout: float = 5.0) -> BackConn:
    """Open a TCP connection to ``address`` and log in as ``user`` with the startup ``params``
    (database, application_name, client_encoding...). Serves PER-1 (re-attach to a new principal)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*address), timeout)
    except (TimeoutError, OSError) as exc:
        raise BackendError(f"cannot connect to {address[0]}:{address[1]}: {exc or 'timeout'}") from exc
    conn = BackConn(reader, writer, address)
    try:
        await asyncio.wait_for(_login(conn, user, password, params), timeout)
    except TimeoutError as exc:
        conn.close()
        raise BackendError(f"login to {address[0]}:{address[1]} timed out") from exc
    except BackendError:
        conn.close()
        raise
    except (OSError, ValueError, struct.error, pq.ProtocolError) as exc:
        conn.close()
        raise BackendError(f"login to {address[0]}:{address[1]} failed: {exc}") from exc
    return conn


async def _login(conn: BackConn, user: str, password: str | None, params: dict[str, str]) -> None:
    startup = {"user": user, **{k: v for k, v in params.items() if k != "user"}}
    conn.writer.write(pq.startup_message(startup))
    await conn.writer.drain()
    scram: ScramClient | None = None
    while True:
        kind, message = await conn.read_message()
        data = pq.payload(message)
        if kind == b"R":
            code = struct.unpack_from("!i", data, 0)[0]
            if code == 0:
                continue
            if password is None and code != 0:
                raise BackendError("the server asks for a password but none is configured", "28P01")
            if code == 3:
                conn.writer.write(pq.msg(b"p", pq.cstr(password or "")))
            elif code == 5:
                salt = data[4:8]
                inner = hashlib.md5((password or "").encode() + user.encode()).hexdigest()
                outer = "md5" + hashlib.md5(inner.encode() + salt).hexdigest()
                conn.writer.write(pq.msg(b"p", pq.cstr(outer)))
            elif code == 10:
                mechanisms = [m for m in data[4:].split(b"\0") if m]
                if MECHANISM.encode() not in mechanisms:
                    raise BackendError(f"server offers no supported SASL mechanism: {mechanisms}", "28000")
                scram = ScramClient(password or "")
                first = scram.first_message()
                conn.writer.write(pq.msg(b"p", pq.cstr(MECHANISM) + struct.pack("!i", len(first)) + first))
            elif code == 11 and scram is not None:
                conn.writer.write(pq.msg(b"p", scram.final_message(data[4:])))
            elif code == 12 and scram is not None:
                scram.verify_server_final(data[4:])
                continue
            else:
                raise BackendError(f"unsupported authentication request {code} from the server", "28000")
            await conn.writer.drain()
        elif kind == b"E":
            err = pq.parse_error(message)
            raise BackendError(f"server refused login: {err}", err.code or "08006")
        elif kind == b"S":
            name, value = pq.parse_parameter_status(message)
            conn.params[name] = value
        elif kind == b"K":
            conn.pid, conn.secret = struct.unpack_from("!ii", data, 0)
        elif kind == b"Z":
            return
        # NoticeResponse / NegotiateProtocolVersion: ignore


async def probe_candidates(candidates: Sequence[Address], user: str, password: str | None,
                           database: str, timeout: float = 2.0) -> Address:
    """Fallback resolver: the first candidate that accepts a login and answers
    ``SELECT pg_is_in_recovery()`` with false is the principal (PER-1, PER-3)."""
    errors = []
    for address in candidates:
        try:
            conn = await connect_backend(address, user, password,
                                         {"database": database, "application_name": "persistent-probe"},
                                         timeout)
        except BackendError as exc:
            errors.append(str(exc))
            continue
        try:
            rows = await asyncio.wait_for(conn.simple_query("SELECT pg_catalog.pg_is_in_recovery()"), timeout)
            if rows and rows[0] and rows[0][0][0] == "f":
                return address
            errors.append(f"{address[0]}:{address[1]} is in recovery")
        except (TimeoutError, BackendError, OSError) as exc:
            errors.append(str(exc))
        finally:
            conn.close()
    raise BackendError("no principal among candidates: " + "; ".join(errors))


async def send_cancel(address: Address, pid: int, secret: int) -> None:
    """Send a CancelRequest for a back connection's real key."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(*address), 2.0)
    except (TimeoutError, OSError):
        return
    try:
        writer.write(pq.cancel_request(pid, secret))
        await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()
