"""How the persistent proxy closes a session (PER-1 … PER-8): the SQLSTATEs it sends the client and
:class:`SessionClosed`, raised once the client has been told why."""

from __future__ import annotations

# SQLSTATEs used when the proxy closes a session
ADMIN_SHUTDOWN = "57P01"
CONNECTION_FAILURE = "08006"
CANNOT_CONNECT_NOW = "57P03"  # the server is starting up or refuses logins during recovery
PROTOCOL_VIOLATION = "08P01"


class SessionClosed(Exception):
    """The session was closed by the proxy (reason already sent to the client)."""
