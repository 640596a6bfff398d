"""Raw PostgreSQL frontend sessions for the persistent proxy's hardening and fuzz tests: log in over
a plain socket, send arbitrary bytes, read until the proxy closes; and a logging handler that
collects tracebacks and errors the proxy logs (bad input never makes a traceback)."""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass

from harness.persistproxy import protocol as pq


def login(address: tuple[str, int], user: str, password: str | None = None, database: str = "app",
          timeout: float = 5.0) -> socket.socket:
    """Log in to the proxy (trust, or cleartext ``password``) and return the socket once
    ReadyForQuery arrived."""
    s = socket.create_connection(address, timeout=timeout)
    try:
        s.sendall(pq.startup_message({"user": user, "database": database}))
        buf = b""
        while not buf.endswith(pq.ready_for_query(b"I")):
            chunk = s.recv(65536)
            if not chunk:
                raise AssertionError(f"the proxy closed the login: {buf[:300]!r}")
            buf += chunk
            if buf.startswith(pq.auth_request(3)) and password is not None:
                s.sendall(pq.msg(b"p", pq.cstr(password)))
                buf = buf[len(pq.auth_request(3)):]
    except BaseException:
        s.close()
        raise
    return s


def read_until_closed(s: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the peer sends until it closes; AssertionError if it neither closes nor stops
    within ``timeout`` (a hang)."""
    out = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"the proxy neither answered nor closed within {timeout} s: {out[:300]!r}")
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return out
        except TimeoutError:
            continue
        if not chunk:
            return out
        out += chunk


def send_and_close(address: tuple[str, int], user: str, data: bytes, timeout: float = 5.0) -> bytes:
    """Log in, send ``data``, end the sending side, return what the proxy answered before closing."""
    s = login(address, user)
    try:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy already closed: read what it said
        return read_until_closed(s, timeout)
    finally:
        s.close()


def errors_in(reply: bytes) -> list[pq.ErrorFields]:
    """The ErrorResponse messages in a backend byte stream (framing errors stop the scan)."""
    out = []
    pos = 0
    while len(reply) - pos >= 5:
        length = int.from_bytes(reply[pos + 1:pos + 5], "big")
        end = pos + 1 + length
        if length < 4 or end > len(reply):
            break
        if reply[pos:pos + 1] == b"E":
            out.append(pq.parse_error(reply[pos:end]))
        pos = end
    return out


@dataclass
class LogRecordInfo:
    """What a collected log record says."""

    logger: str
    level: str
    message: str
    traceback: bool


class TracebackCollector(logging.Handler):
    """Collects every record at ERROR or above, or with exception info, from any thread."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[LogRecordInfo] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(LogRecordInfo(record.name, record.levelname, record.getMessage(),
                                              bool(record.exc_info)))

    def __enter__(self) -> TracebackCollector:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)
