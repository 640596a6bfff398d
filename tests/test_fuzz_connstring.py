"""Property-based fuzzing of the user-facing connection-string parser and of the
redaction: random and mutated valid strings give a ConnectionSpec or a ConnectionStringError, nothing
else; a generated password never survives :func:`harness.redact.redact`, in any of the forms it is
written in, and never appears in what a mirroring client records of a refused string."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.clients.mirroring.reference import ReferenceMirroringClient
from harness.history.core import History
from harness.redact import KNOWN_KEYS, redact
from harness.rules.connstring import (
    ConnectionSpec,
    ConnectionStringError,
    format_connection_string,
    parse_address,
    parse_connection_string,
)
from tests.test_connstring import _specs

FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# What connection strings are made of, to mutate valid ones into near-valid ones.
_PIECES = st.sampled_from([";", "=", ",", '"', "'", "\\", ":", "[", "]", " ", "\t", "\n", "0", "65535", "65536",
                           "²", "٣", "9" * 30, "tcp:", "np:", "Server", "Database", "Password", "Failover Partner",
                           "Connect Timeout", "nan", "inf", "-1", "1e400", "\x00", "é", "\ud7ff"])


# Port-like text: ASCII and other Unicode digits ('²' passes str.isdigit() but not int()), huge numbers.
_PORTISH = st.one_of(
    st.integers(-10, 70000).map(str),
    st.text(st.characters(categories=["Nd", "No", "Nl"]) | st.sampled_from("0123456789"), min_size=1, max_size=6),
    st.integers(4290, 5100).map(lambda n: "9" * n),
    _PIECES,
)


def _parse_outcome(text: str) -> ConnectionSpec | None:
    try:
        return parse_connection_string(text)
    except ConnectionStringError as exc:
        assert str(exc) and "\n" not in str(exc), f"not one line: {exc}"  # a one-line error, never a traceback
        return None


@FUZZ
@given(st.text(max_size=200))
def test_random_text_parses_or_is_a_connection_string_error(text: str) -> None:
    spec = _parse_outcome(text)
    assert spec is None or isinstance(spec, ConnectionSpec)


@st.composite
def _mutated(draw: st.DrawFn) -> str:
    text = format_connection_string(draw(_specs))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "duplicate", "digits", "digits"]))
        piece = draw(_PIECES | st.text(max_size=4))
        if op == "insert":
            text = text[:i] + piece + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 8)):]
        elif op == "replace":
            text = text[:i] + piece + text[i + len(piece):]
        elif op == "digits":  # a number (port, timeout) becomes port-like text
            runs = list(re.finditer(r"[0-9]+", text))
            if runs:
                run = runs[draw(st.integers(0, len(runs) - 1))]
                text = text[: run.start()] + draw(_PORTISH) + text[run.end():]
        else:
            j = draw(st.integers(i, len(text)))
            text = text[:j] + text[i:j] + text[j:]
    return text


@FUZZ
@given(_mutated())
def test_mutated_valid_strings_parse_or_are_connection_string_errors(text: str) -> None:
    spec = _parse_outcome(text)
    if spec is not None:  # what parses is consistent: it formats back to an equal spec
        assert parse_connection_string(format_connection_string(spec)) == spec


@FUZZ
@given(st.text(max_size=40) | st.builds(lambda h, p: f"{h},{p}", st.sampled_from(["h", "127.0.0.1", "[::1]", "h\\i"])
                                        | st.text(max_size=10), _PORTISH))
def test_server_values_parse_or_are_connection_string_errors(value: str) -> None:
    try:
        address = parse_address(value)
    except ConnectionStringError:
        return
    # what parses has a port in range, and it is exactly the ASCII digits written after the comma
    assert 1 <= address.port <= 65535
    written = value.rpartition(",")[2].strip()
    if "," in value and written.isascii() and written.isdigit():
        assert address.port == int(written)


# ------------------------------------------------------------------------------------------ redaction

_ALPHABET = st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from(list(";=\"' \\@:&,%/#?"))
_passwords = st.text(_ALPHABET, min_size=6, max_size=30)
_NEUTRAL = "\ue000\ue001\ue002\ue003\ue004\ue005"  # a stand-in password no template contains
_NEXT_PAIR = re.compile(r"(?i)[;&\s]\s*(?:" + "|".join(re.escape(k).replace(r"\ ", r"\s+") for k in KNOWN_KEYS)
                        + r"|[a-z0-9_]*(?:password|passwd|pwd))\s*=")


def _sqlserver_quoted(pw: str) -> str:
    return 'Server=h,1; Database=app; Password="' + pw.replace('"', '""') + '"; Network=dbmssocn'


def _libpq_quoted(pw: str) -> str:
    escaped = pw.replace("\\", "\\\\").replace("'", "\\'")
    return f"host=127.0.0.1 port=5432 user=app password='{escaped}' dbname=app"


def _uri(pw: str) -> str:
    return f"postgresql://app:{quote(pw, safe='')}@127.0.0.1:5432/app?sslmode=disable"


def _json(pw: str) -> str:
    return json.dumps({"user": "app", "password": pw, "host": "h"})


def _sqlserver_unquoted(pw: str) -> str:
    return f"Server=h,1;Password={pw};Database=app"


def _sqlserver_unclosed(pw: str) -> str:
    return f'Server=h,1;Database=app;Password="{pw}'


def _libpq_unquoted(pw: str) -> str:
    return f"host=h port=1 user=app password={pw}"


_WELL_FORMED = [_sqlserver_quoted, _libpq_quoted, _uri, _json]
_MALFORMED = [_sqlserver_unquoted, _sqlserver_unclosed, _libpq_unquoted]


def _ambiguous(pw: str) -> bool:
    """A raw (unquoted) password that itself starts the next key=value pair, or holds a line break or
    a quote first: no grammar can tell where it ends (the module docstring of harness.redact)."""
    return bool(_NEXT_PAIR.search(pw)) or "\n" in pw or "\r" in pw or pw[:1] in "\"'" or pw.startswith("***")


def _encodings(pw: str) -> set[str]:
    return {pw, quote(pw, safe=""), json.dumps(pw)[1:-1]}


@FUZZ
@given(_passwords, st.sampled_from(_WELL_FORMED))
def test_redaction_never_leaks_a_well_formed_password(pw: str, form) -> None:  # type: ignore[no-untyped-def]
    neutral = redact(form(_NEUTRAL))
    assume(not any(e in neutral for e in _encodings(pw)))  # the password is not part of the template
    out = redact(form(pw))
    assert not [e for e in _encodings(pw) if e in out], out


@FUZZ
@given(_passwords, st.sampled_from(_MALFORMED))
def test_redaction_never_leaks_a_malformed_password(pw: str, form) -> None:  # type: ignore[no-untyped-def]
    """Not the password, and not a piece of it either (the old redaction stopped at its first ';')."""
    assume(not _ambiguous(pw))
    pieces = {pw} | {p for p in re.split(r"[;\s]", pw) if len(p) >= 4}
    neutral = redact(form(_NEUTRAL))
    assume(not any(p in neutral for p in pieces))
    out = redact(form(pw))
    assert not [p for p in pieces if p in out], out


@settings(max_examples=150, deadline=None, database=None)
@given(_passwords, st.sampled_from([_sqlserver_unquoted, _sqlserver_unclosed, _sqlserver_quoted]))
def test_a_refused_open_records_no_password(pw: str, form) -> None:  # type: ignore[no-untyped-def]
    """No Database: every one of these strings is refused before any attempt (MIR-2); the recorded
    ``connstring``, the ``error`` and the raised message hold no trace of the password."""
    assume(not _ambiguous(pw))
    text = form(pw).replace("Database=app;", "").replace("; Database=app", "").replace(";Database=app", "")
    assume(pw not in text.replace(pw, ""))
    h = History()
    try:
        ReferenceMirroringClient(history=h, process="p").open(text)
    except ConnectionStringError as exc:
        message = str(exc)
    else:  # pragma: no cover - a refused string is the only outcome
        raise AssertionError(f"{text!r} was not refused")
    recorded = json.dumps([e.fields for e in h.events()], ensure_ascii=False)
    assert [e.type for e in h.events()] == ["op.invoke", "op.fail"]
    assert pw not in recorded and pw not in message, (recorded, message)
