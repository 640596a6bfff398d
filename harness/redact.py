"""One redaction function for every writer of the harness (no secret in any output).

Histories on disk, Allure results and attachments, the SVG timeline, error messages and log lines
all pass their text through :func:`redact` (or :func:`redact_data` for JSON-shaped values) before
it leaves the process. It removes passwords by their *syntax*, whatever the text around them:

* libpq key/value strings: ``password=secret`` or ``password='se cret'``;
* URIs: ``postgresql://user:secret@host/db`` (and a ``?password=`` query parameter);
* SQL Server keyword strings: ``Password=secret;``, ``Pwd="a;b"``, ``PWD = 'it''s'``;
* anything else spelling a key that ends in ``password`` / ``passwd`` / ``pwd``
  (``PGPASSWORD=…``, ``sslpassword=…``, ``"password": "…"``, ``password: …``), also when a repr
  was cut in the middle of the key (``'host=h user=...rd=secret'``).

Malformed strings are redacted *more*, never less: an unquoted value runs to the end of its segment,
which is the next separator (``;``, ``&``, white space) followed by a *known* keyword and ``=``, or
the end of the line - so ``Password=ab;cd;Database=x`` loses ``ab;cd``, not only ``ab``. A quoted
value whose quote never closes, or that is followed by stray text (``Password="ab"cd``), is redacted
to the end of the text. An unquoted password that itself contains ``;Database=`` (a known keyword)
cannot be told from the next pair by any parser; its tail after that point is not a password for
the connection string's own grammar either.

Besides the syntax, every secret the harness knows by value (:func:`remember`, e.g. the topology's
test password) is replaced wherever it appears. The mask is ``***``; redacting twice changes
nothing.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

MASK = "***"

# A key whose value is a secret: a word that ends in password / passwd / pwd, then '=' or ':' - or
# what is left of such a key after an ellipsis ("...rd=x": pytest cuts long reprs in the middle).
_SUFFIXES = sorted({w[i:] for w in ("password", "passwd", "pwd") for i in range(len(w))}, key=len, reverse=True)
_KEY = re.compile(r"""(?i)(?:(?<![A-Za-z0-9])[A-Za-z0-9_]*?(?:password|passwd|pwd)|(?:\.\.\.|…)(?:"""
                  + "|".join(_SUFFIXES) + r"""))(?:\s*=\s*|["']?\s*:\s*)""")

# Keywords that can follow a password in a connection string (SQL Server / ADO.NET / ODBC, libpq,
# URI query parameters): an unquoted password ends only where one of these starts the next pair.
KNOWN_KEYS: tuple[str, ...] = (
    # SQL Server / ADO.NET / ODBC
    "server", "data source", "address", "addr", "network address", "failover partner", "failover_partner",
    "failoverpartner", "database", "initial catalog", "connect timeout", "connection timeout", "login timeout",
    "timeout", "user id", "uid", "user", "userid", "network", "network library", "net", "encrypt",
    "trustservercertificate", "trust server certificate", "application name", "app", "workstation id", "wsid",
    "integrated security", "trusted_connection", "multisubnetfailover", "pooling", "max pool size",
    "min pool size", "packet size", "persist security info", "driver", "dsn", "attachdbfilename",
    "applicationintent", "connectretrycount", "connectretryinterval",
    # libpq
    "host", "hostaddr", "port", "dbname", "passfile", "channel_binding", "connect_timeout", "client_encoding",
    "options", "application_name", "fallback_application_name", "keepalives", "keepalives_idle",
    "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
    "requiressl", "sslcompression", "sslcert", "sslkey", "sslrootcert", "sslcrl", "sslcrldir", "sslsni",
    "requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib",
    "gssdelegation", "service", "target_session_attrs", "load_balance_hosts", "require_auth",
)
_KEYS_ALT = "|".join(sorted((re.escape(k).replace(r"\ ", r"\s+") for k in KNOWN_KEYS), key=len, reverse=True))
# Where an unquoted secret ends: a line break, or a separator that starts the next known pair.
_UNQUOTED_END = re.compile(rf"(?i)[\r\n]|[;&\s]\s*(?:{_KEYS_ALT}|[A-Za-z0-9_]*(?:password|passwd|pwd))\s*=")
# After a properly closed quote, a value ends; anything else is broken quoting.
_AFTER_QUOTE = frozenset(" \t\r\n;,&)]}<>")
# URI user info: scheme://user:secret@ (the secret runs to the last '@' before white space).
_URI = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/?#@]*:)(\S*)@")
# Field names whose value is a secret whatever it looks like (redact_data).
SECRET_FIELD = re.compile(r"(?i)^(?:.*[_\-. ])?(?:password|passwd|pwd|secret|token)$")

_known: tuple[str, ...] = ()
_known_lock = threading.Lock()


def remember(secret: str) -> None:
    """Add ``secret`` to the values :func:`redact` removes wherever they appear (no secret in any output:
    the topology's test password never reaches an output, whatever the text around it). Values
    shorter than 6 characters are not remembered: they would mangle ordinary words."""
    if not isinstance(secret, str) or len(secret) < 6:
        return
    global _known
    with _known_lock:
        forms = {secret, quote(secret, safe=""), secret.replace("\\", "\\\\").replace('"', '\\"')}
        _known = tuple(sorted(set(_known) | forms, key=len, reverse=True))


def _value_span(text: str, i: int) -> tuple[int, int, int]:
    """``(mask_from, mask_to, resume_at)`` for the secret value that starts at ``i``."""
    n = len(text)
    if text.startswith(MASK, i):  # already redacted: idempotent
        return i, i + len(MASK), i + len(MASK)
    if i < n and text[i] in "\"'":
        q, j = text[i], i + 1
        while j < n:
            c = text[j]
            if c == "\\":
                j += 2
                continue
            if c == q:
                if j + 1 < n and text[j + 1] == q:  # doubled quote inside the value
                    j += 2
                    continue
                if j + 1 >= n or text[j + 1] in _AFTER_QUOTE:
                    return i + 1, j, j
                break  # text glued to the closing quote: broken quoting
            j += 1
        return i, n, n  # unterminated or broken: the rest of the text
    end = _UNQUOTED_END.search(text, i)
    stop = end.start() if end else n
    return i, stop, stop


def _redact_keys(text: str) -> str:
    out: list[str] = []
    pos = 0
    for m in _KEY.finditer(text):
        if m.start() < pos:
            continue  # inside a value already masked
        start, stop, resume = _value_span(text, m.end())
        out.append(text[pos:start])
        out.append(MASK)
        pos = resume
    out.append(text[pos:])
    return "".join(out)


def redact(text: str) -> str:
    """``text`` with every password removed (the one redaction, used by every writer:
    history files, Allure results, the timeline, log lines, error messages). See the module
    docstring for what counts as a password; non-strings are returned as they are."""
    if not isinstance(text, str) or not text:
        return text
    for secret in _known:
        if secret in text:
            text = text.replace(secret, MASK)
    lowered = text.lower()
    if "://" in text:
        text = _URI.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    if "pass" in lowered or "pwd" in lowered or "..." in text or "…" in text:
        text = _redact_keys(text)
    return text


def redact_data(value: Any) -> Any:
    """A JSON-shaped value (dicts, lists, tuples, strings) with :func:`redact` applied to every
    string, and the value of every field named like a secret (``password``, ``pwd``, ``*_token`` …)
    replaced by the mask - what the history store and the Allure attachments write."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: (MASK if isinstance(k, str) and SECRET_FIELD.match(k) and v not in (None, "")
                    else redact_data(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v) for v in value]
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message and exception text before any handler
    formats it (log lines hold no password)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record in place; never drops it."""
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def protect_logger(logger: logging.Logger) -> logging.Logger:
    """Attach one :class:`RedactingFilter` to ``logger`` (idempotent) and return it."""
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
    return logger


def write_private_file(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600 from the first byte, then
    renamed into place): how a password reaches another process (a 0600 file or the environment,
    never a command line). Returns ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
