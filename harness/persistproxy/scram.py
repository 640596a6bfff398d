"""SCRAM-SHA-256 (RFC 5802 / RFC 7677) as PostgreSQL uses it, both sides, with hashlib/hmac only:
the proxy authenticates its front clients (server side) and logs in to the principal (client side)
so that sessions can be re-attached to a new principal (PER-1). No channel binding (the proxy
answers 'N' to SSLRequest); passwords are used as UTF-8 without SASLprep (ASCII passwords)."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

from harness.errors import ScramError as ScramError  # re-exported

MECHANISM = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 4096


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def _attrs(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) >= 2 and part[1] == "=":
            out.setdefault(part[0], part[2:])
    return out


@functools.lru_cache(maxsize=64)
def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, i)`` of RFC 5802 (PBKDF2-HMAC-SHA-256). Cached: a role's salt and
    iteration count are fixed on the server, so the re-attach of every kept session after a
    switchover (PER-1) costs one PBKDF2 (4096 rounds, milliseconds of the event loop), not one each."""
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)


class ScramClient:
    """Client side of one SCRAM-SHA-256 exchange (the proxy logging in to the principal, PER-1)."""

    def __init__(self, password: str) -> None:
        self.password = password
        self.nonce = _b64(secrets.token_bytes(18))
        self.first_bare = f"n=,r={self.nonce}"
        self._auth_message = b""
        self._server_key = b""

    def first_message(self) -> bytes:
        """client-first-message (gs2 header ``n,,``: no channel binding)."""
        return ("n,," + self.first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        """client-final-message for the server-first-message."""
        text = server_first.decode()
        attrs = _attrs(text)
        nonce, salt, iters = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self.nonce) or not salt or not iters.isdigit():
            raise ScramError(f"malformed SCRAM server-first-message: {text!r}")
        salted = salted_password(self.password, base64.b64decode(salt), int(iters))
        client_key = _hmac(salted, b"Client Key")
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        self._auth_message = f"{self.first_bare},{text},{without_proof}".encode()
        signature = _hmac(stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_key = _hmac(salted, b"Server Key")
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's signature (the server knows the password too)."""
        attrs = _attrs(server_final.decode())
        if "e" in attrs:
            raise ScramError(f"server rejected SCRAM authentication: {attrs['e']}")
        expected = _b64(_hmac(self._server_key, self._auth_message))
        if not hmac.compare_digest(attrs.get("v", ""), expected):
            raise ScramError("SCRAM server signature does not match")


class ScramVerifier:
    """Stored SCRAM secret of one password (salt, iterations, StoredKey, ServerKey)."""

    def __init__(self, password: str, iterations: int = DEFAULT_ITERATIONS) -> None:
        self.salt = secrets.token_bytes(16)
        self.iterations = iterations
        salted = salted_password(password, self.salt, iterations)
        self.stored_key = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
        self.server_key = _hmac(salted, b"Server Key")


class ScramServer:
    """Server side of one SCRAM-SHA-256 exchange (authenticating a front client)."""

    def __init__(self, verifier: ScramVerifier) -> None:
        self.verifier = verifier
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    def server_first(self, client_first: bytes) -> bytes:
        """Answer the client-first-message."""
        text = client_first.decode("utf-8", "replace")
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or parts[1]:
            raise ScramError("unsupported SCRAM client-first-message (channel binding is not offered)")
        self._gs2 = f"{parts[0]},,"
        self._first_bare = parts[2]
        cnonce = _attrs(self._first_bare).get("r", "")
        if not cnonce:
            raise ScramError("SCRAM client-first-message without nonce")
        self._nonce = cnonce + _b64(secrets.token_bytes(18))
        self._server_first = f"r={self._nonce},s={_b64(self.verifier.salt)},i={self.verifier.iterations}"
        return self._server_first.encode()

    def server_final(self, client_final: bytes) -> bytes:
        """Check the client's proof; return the server-final-message or raise :class:`ScramError`."""
        text = client_final.decode("utf-8", "replace")
        if ",p=" not in text:
            raise ScramError("SCRAM client-final-message without proof")
        without_proof, proof_b64 = text.rsplit(",p=", 1)
        attrs = _attrs(without_proof)
        if attrs.get("r") != self._nonce or attrs.get("c") != _b64(self._gs2.encode()):
            raise ScramError("SCRAM nonce or channel-binding mismatch")
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.verifier.stored_key, auth_message)
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError as exc:
            raise ScramError("SCRAM proof is not base64") from exc
        if len(proof) != len(signature):
            raise ScramError("SCRAM proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.verifier.stored_key):
            raise ScramError("password authentication failed")
        return f"v={_b64(_hmac(self.verifier.server_key, auth_message))}".encode()
