"""Every error class of the harness, in one place. Two kinds of failure are kept apart on purpose
(RULEBOOK OBS-1):

* A client breaking a documented rule is a :class:`RuleViolation` - an ``AssertionError`` whose
  message starts with the rule ID (Allure: *failed*).
* The harness itself failing (a node that did not start, a proxy that did not answer, bad input)
  is a :class:`HarnessError` (Allure: *broken*). It never derives from ``AssertionError``.
* A verdict the harness could not observe is :class:`VerdictUnknown` (a harness error, never a pass
  and never a violation).

Errors a *client under test* raises to its application (:class:`MirroringClientError` and its
subclasses) are neither: they are outcomes of a scenario, judged by the checkers. The persistent
proxy's protocol errors (:class:`ProtocolError`, :class:`BackendError`, :class:`ScramError`) are what
that proxy answers its own peers with. The modules that raised these classes before they were
gathered here re-export them, so older imports keep working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.redact import redact

if TYPE_CHECKING:
    from harness.rules.verdict import Verdict


def _redacted(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(redact(a) if isinstance(a, str) else a for a in args)


class HarnessError(Exception):
    """Base of every failure of the harness itself (never a rule violation, OBS-1). Its message
    never holds a password (every error message goes through :func:`harness.redact.redact`)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*_redacted(args))


class ConfigError(HarnessError, ValueError):
    """Bad input from a user or a caller: the message names what is wrong and how to fix it."""


class MissingDependencyError(HarnessError):
    """A binary or package the harness needs is not installed; the message says how to get it."""


class TopologyError(HarnessError):
    """A database node or topology failed to do what was asked (start, stop, promote, replicate)."""


class NodeStartError(TopologyError):
    """A database server did not come up; the message carries the tail of its log."""


class PortInUseError(NodeStartError):
    """A server could not bind its listen port (EADDRINUSE: something else took it); the owner
    starts it again on another port (bounded) before this reaches a test. Carries ``port``."""

    def __init__(self, message: str, port: int | None = None) -> None:
        super().__init__(message)
        self.port = port


class InvalidOperation(TopologyError):
    """A role operation that makes no sense in the current state (the message names the state)."""


class UnknownNodeError(InvalidOperation, KeyError):
    """A node name that the topology does not have."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown node"


class ProxyError(HarnessError):
    """The fault proxy (Toxiproxy or the embedded server) failed or answered with an error."""


class RuleViolation(AssertionError):
    """A client broke a documented rule. ``str()`` starts with the rule ID (e.g. ``MIR-5: ...``)."""

    def __init__(self, rule_id: str, message: str) -> None:
        self.rule_id = rule_id
        super().__init__(redact(f"{rule_id}: {message}"))


# ---- configuration and registries --------------------------------------------------------------


class UnknownClientError(ConfigError):
    """``--client`` names no registered client; the message lists the known ones."""


class UnknownRuleError(ConfigError, KeyError):
    """A rule ID with no registered checker; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown rule"


class ConnectionStringError(ConfigError):
    """A connection string the mirroring client refuses; the message names the problem and the fix
    (MIR-2 for a missing database)."""


# ---- harness components ------------------------------------------------------------------------


class ToxiproxyAPIError(ProxyError):
    """The server answered with an HTTP error; carries ``status`` and the server's ``message``."""

    def __init__(self, method: str, url: str, status: int, message: str) -> None:
        self.method = method
        self.url = url
        self.status = status
        self.message = message
        super().__init__(f"Toxiproxy {method} {url} failed with HTTP {status}: {message}")


class ToxiproxyUnreachableError(ProxyError):
    """The Toxiproxy API at ``url`` did not answer (refused, reset, or timed out)."""

    def __init__(self, url: str, detail: str) -> None:
        self.url = url
        super().__init__(
            f"Toxiproxy API at {url} did not answer ({detail}); is the server running there? "
            "Start one (failover-harness toxiproxy-server) or fix TOXIPROXY_URL.")


class CoordinationError(HarnessError):
    """A coordinating client's ``before_switchover`` / ``after_switchover`` hook failed."""


class ProxyWorkerError(HarnessError):
    """A worker process of the persistent proxy (``persistent-proxy --workers N``) did not start."""


class ClientStartError(HarnessError):
    """A client under test could not be started (a harness problem, never a rule verdict)."""


class CaptureUnavailable(HarnessError):
    """The refused-connect packet capture cannot run here (not Linux, not root, no socket); the
    message says why. Never raised into a test: the topology records it as ``harness.capture``
    (``available: false``) and the checkers that need the capture answer *unknown* (OBS-1)."""


# ---- verdicts ----------------------------------------------------------------------------------


class VerdictUnknown(HarnessError):
    """A checker could not decide (the history lacks the events it needs). Reported, never passed."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        super().__init__(f"{verdict.rule_id}: verdict unknown - {verdict.observed or verdict.summary}")


# ---- raised by clients under test to their application (outcomes, not harness errors) ----------


class MirroringClientError(Exception):
    """Base of the errors a mirroring client raises to the application (not harness errors: an
    application sees them; a test decides whether they are expected). Messages are redacted."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*_redacted(args))


class ConnectionOpenError(MirroringClientError):
    """An open failed. ``reason``: ``timeout`` (login timeout expired), ``error`` (a non-retryable
    answer, e.g. an unknown database or a bad password), ``refused``/``reset``/``inactive`` (the
    only partner failed, MIR-3) or ``aborted``; ``attempts``: what the client tried."""

    def __init__(self, message: str, *, reason: str, attempts: Sequence[Any] = ()) -> None:
        self.reason = reason
        self.attempts: tuple[Any, ...] = tuple(attempts)
        tried = "; ".join(f"#{a.n} {a.target} {a.address} {a.outcome} {a.duration:.3f}s"
                          for a in self.attempts[-6:])
        more = f" (last of {len(self.attempts)})" if len(self.attempts) > 6 else ""
        super().__init__(f"{message} [{reason}; attempts{more}: {tried or 'none'}]")


class ConnectionLostError(MirroringClientError):
    """An established connection broke (MIR-11: the application sees it; no automatic reconnect)."""


# ---- what an ACR client (DB2 automatic client reroute, RULEBOOK ACR-1…9) tells its application ---


class AcrClientError(Exception):
    """Base of the errors an ACR client raises to the application (outcomes judged by the ACR checkers,
    not harness errors). ``sqlstate`` / ``sqlcode`` as DB2 returns them; messages are redacted."""

    sqlstate = ""
    sqlcode = 0

    def __init__(self, *args: Any) -> None:
        super().__init__(*_redacted(args))


class Sql30108N(AcrClientError):
    """SQL30108N (SQLSTATE 08506, SQLCODE -30108): the connection failed, the transaction was rolled
    back and the client rerouted (ACR-3, ACR-8, ACR-9). ``reason_code`` 2: a member of the current
    group failed; 4: every member of the primary group failed, the alternate group is next (ACR-8).
    ``failure_code`` 1 send, 2 receive (also a receive timeout), 3 connection ended / query timeout
    after the connection failed, 4 interrupted (``error_code`` 1 query timeout, 2 cancel; ACR-9).
    ``host`` / ``port``: the member the connection was re-established to (or will be, when lazy)."""

    sqlstate = "08506"
    sqlcode = -30108

    def __init__(self, reason_code: int, failure_code: int, host: str, port: int | str,
                 error_code: int | None = None, underlying: str = "") -> None:
        self.reason_code, self.failure_code, self.error_code = reason_code, failure_code, error_code
        self.host, self.port, self.underlying = host, str(port), underlying
        super().__init__(
            f'SQL30108N A connection failed in an automatic client reroute environment. The transaction was '
            f'rolled back. Host name or IP address: "{host}". Service name or port number: "{port}". Reason '
            f'code: "{reason_code}". Connection failure code: "{failure_code}". Underlying error: '
            f'"{underlying or error_code or ""}". SQLSTATE=08506')


class Sql30081N(AcrClientError):
    """SQL30081N (SQLSTATE 08001, SQLCODE -30081): a communication error; the client could not
    reconnect, or the transport could not be reused (ACR-4, ACR-6). The application must reconnect,
    re-establish its state and retry. Tokens as DB2 prints them: protocol, API, location, function,
    protocol-specific error codes."""

    sqlstate = "08001"
    sqlcode = -30081

    def __init__(self, location: str, function: str = "recv", codes: tuple[str, str, str] = ("*", "*", "0"),
                 protocol: str = "TCP/IP", api: str = "SOCKETS", reason: str = "") -> None:
        self.location, self.function, self.codes, self.reason = location, function, codes, reason
        super().__init__(
            f'SQL30081N A communication error has been detected. Communication protocol being used: '
            f'"{protocol}". Communication API being used: "{api}". Location where the error was detected: '
            f'"{location}". Communication function detecting the error: "{function}". Protocol specific '
            f'error code(s): "{codes[0]}", "{codes[1]}", "{codes[2]}". SQLSTATE=08001'
            + (f" ({reason})" if reason else ""))


# ---- the persistent proxy's wire-level errors (answered to its peers) --------------------------


class ProtocolError(Exception):
    """The peer sent bytes that are not valid protocol for this state (message names the problem)."""


class BackendError(Exception):
    """The principal could not be reached or refused the proxy's login / replay."""

    def __init__(self, message: str, code: str = "08006") -> None:
        super().__init__(message)
        self.code = code


class ScramError(Exception):
    """A SCRAM exchange failed (bad proof, bad nonce, malformed message)."""

