"""SQL Server keyword connection strings for the mirroring profile (RULEBOOK MIR-2, MIR-3, MIR-8).

``Server=A; Failover Partner=B; Database=D; Network=dbmssocn; Connect Timeout=15`` is parsed into a
frozen :class:`ConnectionSpec`. The grammar (ADO.NET / ODBC keyword form, as far as the mirroring
documents use it):

* ``key=value`` pairs separated by ``;``; empty segments (a trailing ``;``) are ignored.
* Keys are case-insensitive; surrounding whitespace is ignored and runs of inner whitespace count as
  one space (``Failover   Partner`` = ``failover partner``).
* A value may be quoted with ``"..."`` or ``'...'``; inside, the quote character is written twice
  (``"a""b"`` is ``a"b``). Quoted values keep their inner whitespace and may contain ``;``.
  Unquoted values are stripped.
* Synonyms: server = ``Server`` / ``Data Source`` / ``Address`` / ``Addr`` / ``Network Address``;
  failover partner = ``Failover Partner`` / ``Failover_Partner`` / ``FailoverPartner``;
  database = ``Database`` / ``Initial Catalog``; login timeout = ``Connect Timeout`` /
  ``Connection Timeout`` / ``Login Timeout`` / ``Timeout``; user = ``User ID`` / ``UID`` / ``User``;
  password = ``Password`` / ``PWD``; network = ``Network`` / ``Network Library`` / ``Net``.
  Giving the same setting twice (even under two synonyms) is an error.
* Server values: ``host``, ``host,port``, ``tcp:host,port``, ``[v6addr],port``, ``host\\instance``
  and ``host\\instance,port``. Only TCP is supported: another protocol prefix (``np:``, ``lpc:``) or
  ``Network=dbnmpntw`` is an error.
* **Instance → port rule (documented choice):** a named instance has no fixed port (SQL Server asks
  the SQL Server Browser). An explicit ``,port`` always wins; otherwise the instance is looked up in
  the ``instance_ports`` mapping given to :func:`parse_connection_string` (case-insensitive); an
  instance found in neither is a :class:`ConnectionStringError` that names both fixes.
* A host without a port gets ``default_port`` (5432: PostgreSQL stands in for SQL Server).
* Login timeout: absent → 15 s (the documented default); ``0`` → ``None`` = no timeout (MIR-8);
  fractions are allowed (suites run with short timeouts); negative or non-numeric → error.
* MIR-2: a missing or empty database is refused by the client with a :class:`ConnectionStringError`.

Every other key is kept, lower-cased, in ``ConnectionSpec.extra``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.errors import ConnectionStringError

DEFAULT_PORT = 5432
DEFAULT_LOGIN_TIMEOUT = 15.0

_SERVER_KEYS = ("server", "data source", "address", "addr", "network address")
_FAILOVER_KEYS = ("failover partner", "failover_partner", "failoverpartner")
_DATABASE_KEYS = ("database", "initial catalog")
_TIMEOUT_KEYS = ("connect timeout", "connection timeout", "login timeout", "timeout")
_USER_KEYS = ("user id", "uid", "user", "userid")
_PASSWORD_KEYS = ("password", "pwd")
_NETWORK_KEYS = ("network", "network library", "net")

_CANONICAL: dict[str, str] = {}
for _name, _keys in (
    ("server", _SERVER_KEYS),
    ("failover partner", _FAILOVER_KEYS),
    ("database", _DATABASE_KEYS),
    ("login timeout", _TIMEOUT_KEYS),
    ("user id", _USER_KEYS),
    ("password", _PASSWORD_KEYS),
    ("network", _NETWORK_KEYS),
):
    for _k in _keys:
        _CANONICAL[_k] = _name

_TCP_NETWORK_VALUES = ("dbmssocn", "tcp", "tcp/ip")
_PORT_RE = re.compile(r"[0-9]{1,5}")  # ASCII digits only: int() also takes '²' (ValueError) and '٣'
_SHOW = 40
_HOST_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_V6_RE = re.compile(r"[0-9A-Fa-f:.]+")


def _show(value: object) -> str:
    """``repr(value)`` cut to a readable length for an error message (a 5,000-digit port stays one line)."""
    text = repr(value)
    return text if len(text) <= _SHOW else f"{text[:_SHOW]}… ({len(str(value))} characters)"


def _is_secret_key(raw: str) -> bool:
    return " ".join(raw.split()).lower() in _PASSWORD_KEYS


def _port(value: object) -> int | None:
    """A valid TCP port 1..65535 from an int or an ASCII-digit string, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return int(value) if _PORT_RE.fullmatch(value) and 1 <= int(value) <= 65535 else None
    return value if isinstance(value, int) and 1 <= value <= 65535 else None


@dataclass(frozen=True)
class Address:
    """One partner's TCP address. ``instance`` keeps a ``host\\instance`` name for display only."""

    host: str
    port: int = DEFAULT_PORT
    instance: str | None = None

    def __post_init__(self) -> None:
        if not self.host or not isinstance(self.host, str):
            raise ConnectionStringError("empty host name; write Server=<host>[,<port>]")
        if _port(self.port) is None or not isinstance(self.port, int):
            raise ConnectionStringError(f"port {_show(self.port)} is out of range; use a number 1..65535")
        if not (_HOST_RE.fullmatch(self.host) or (":" in self.host and _V6_RE.fullmatch(self.host))):
            raise ConnectionStringError(
                f"{_show(self.host)} is not a host name or IP address (letters, digits, '.', '-', '_'; "
                "IPv6 in brackets)"
            )
        if self.instance is not None and not _HOST_RE.fullmatch(self.instance):
            raise ConnectionStringError(
                f"instance name {_show(self.instance)} may only hold letters, digits, '.', '-', '_'"
            )

    @property
    def hostport(self) -> str:
        """``host:port`` (IPv6 hosts in brackets) - the form libpq and the history use."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def to_server_value(self) -> str:
        """The SQL Server form ``host[\\instance],port`` (what :func:`format_connection_string` writes)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        inst = f"\\{self.instance}" if self.instance else ""
        return f"{host}{inst},{self.port}"

    def __str__(self) -> str:
        return self.to_server_value()


@dataclass(frozen=True)
class ConnectionSpec:
    """A parsed mirroring connection string.

    ``login_timeout`` is seconds, or ``None`` for no timeout (MIR-8). ``extra`` holds every other key
    as sorted ``(lower-case key, value)`` pairs (a tuple, so the spec stays hashable)."""

    initial: Address
    failover: Address | None
    database: str
    login_timeout: float | None = DEFAULT_LOGIN_TIMEOUT
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.database, str) or not self.database.strip():
            raise ConnectionStringError(
                "MIR-2: no database name: a mirroring connection string must name the database "
                "(failover is impossible without it); add Database=<name>"
            )
        if self.login_timeout is not None:
            try:
                lt = float(self.login_timeout)
            except (TypeError, ValueError, OverflowError):
                lt = math.nan
            if not math.isfinite(lt) or lt <= 0:
                raise ConnectionStringError(
                    f"login timeout {_show(self.login_timeout)} must be a positive number of seconds, "
                    "or None for no timeout (MIR-8; Connect Timeout=0 in a string)"
                )
            object.__setattr__(self, "login_timeout", lt)
        extra = tuple(sorted((_norm_key(str(k)), str(v)) for k, v in dict(self.extra).items()))
        for key, _ in extra:
            if any(c in key for c in "=;\"'") or (key in _CANONICAL and key != "network"):
                raise ConnectionStringError(
                    f"extra key {key!r} cannot be written in a connection string (it contains '=', ';' or "
                    "a quote, or it is a known keyword); use the ConnectionSpec field instead"
                )
        object.__setattr__(self, "extra", extra)

    @property
    def extra_dict(self) -> dict[str, str]:
        """``extra`` as a dict."""
        return dict(self.extra)

    def to_connection_string(self) -> str:
        """The keyword form; :func:`parse_connection_string` reads it back to an equal spec."""
        return format_connection_string(self)


# --------------------------------------------------------------------------------------------- parse


def _split_pairs(text: str) -> list[tuple[str, str, bool]]:
    """Split into ``(raw key, value, quoted)``; raises on a missing ``=`` or an unbalanced quote."""
    pairs: list[tuple[str, str, bool]] = []
    i, n = 0, len(text)
    after_secret = False  # the previous value was an unquoted password: do not echo what follows
    while i < n:
        # skip separators and whitespace before a key
        while i < n and (text[i].isspace() or text[i] == ";"):
            i += 1
        if i >= n:
            break
        start = i
        while i < n and text[i] not in "=;":
            i += 1
        if i >= n or text[i] == ";":
            if after_secret:
                raise ConnectionStringError(
                    f"text without '=' at position {start} follows the password value; a password holding "
                    "';' must be written in double quotes (with each double quote inside it doubled)"
                )
            segment = text[start:i].strip()
            raise ConnectionStringError(
                f"segment {_show(segment)} at position {start} has no '='; write key=value pairs separated "
                "by ';' (quote a value containing ';' as \"...\")"
            )
        key = text[start:i]
        secret = _is_secret_key(key)
        i += 1  # past '='
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i < n and text[i] in "\"'":
            quote, qstart = text[i], i
            i += 1
            buf: list[str] = []
            while True:
                if i >= n:
                    raise ConnectionStringError(
                        f"unbalanced {quote} quote in the value of {_show(key.strip())} (opened at position "
                        f"{qstart}); close it, and write a {quote} inside the value as {quote}{quote}"
                    )
                ch = text[i]
                if ch == quote:
                    if i + 1 < n and text[i + 1] == quote:
                        buf.append(quote)
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(ch)
                i += 1
            while i < n and text[i] in " \t\r\n":
                i += 1
            if i < n and text[i] != ";":
                shown = "" if secret else f" {_show(text[i : i + 10])}"
                raise ConnectionStringError(
                    f"unexpected text{shown} after the quoted value of {_show(key.strip())} at "
                    f"position {i}; put ';' after the closing quote"
                )
            pairs.append((key, "".join(buf), True))
            after_secret = False
        else:
            vstart = i
            while i < n and text[i] != ";":
                i += 1
            value = text[vstart:i].strip()
            pairs.append((key, value, False))
            after_secret = secret
    return pairs


def _norm_key(raw: str) -> str:
    key = " ".join(raw.split()).lower()
    if not key:
        raise ConnectionStringError("empty key before '='; write key=value")
    if any(c in key for c in "\"'"):
        raise ConnectionStringError(
            f"key {_show(raw.strip())} contains a quote; keys are written bare (only values may be quoted)"
        )
    return key


def parse_address(
    value: str,
    *,
    what: str = "Server",
    default_port: int = DEFAULT_PORT,
    instance_ports: Mapping[str, int] | None = None,
) -> Address:
    """Parse one server value (``host``, ``host,port``, ``tcp:host,port``, ``host\\instance[,port]``,
    ``[v6],port``) into an :class:`Address` (MIR-1/MIR-4 partner names)."""
    text = value.strip()
    if not text:
        raise ConnectionStringError(f"{what} is empty; write {what}=<host>[,<port>]")
    if ":" in text.split(",")[0] and not text.startswith("["):
        prefix, _, rest = text.partition(":")
        if prefix.lower() == "tcp":
            text = rest.strip()
        elif _HOST_RE.fullmatch(prefix) and prefix.lower() in ("np", "lpc", "admin", "via"):
            raise ConnectionStringError(
                f"{what}={_show(value)} asks for protocol {prefix!r}; only TCP is supported: use "
                "tcp:<host>,<port> or <host>,<port>"
            )
        else:
            raise ConnectionStringError(
                f"{what}={_show(value)}: write the port after a comma (<host>,<port>), not a colon; IPv6 "
                "addresses go in brackets: [::1],5432"
            )
    port: int | None = None
    if "," in text:
        host_part, _, port_text = text.rpartition(",")
        port_text = port_text.strip()
        port = _port(port_text)
        if port is None:
            raise ConnectionStringError(
                f"{what}={_show(value)} has a bad port {_show(port_text)}; the port after ',' must be a number "
                "1..65535"
            )
        text = host_part.strip()
    instance: str | None = None
    if "\\" in text:
        text, _, instance = text.partition("\\")
        text, instance = text.strip(), instance.strip()
        if not instance or "\\" in instance:
            raise ConnectionStringError(f"{what}={_show(value)}: bad instance name; write <host>\\<instance>")
    if text.startswith("["):
        if not text.endswith("]"):
            raise ConnectionStringError(f"{what}={_show(value)}: unclosed '[' around an IPv6 address")
        host = text[1:-1]
        if not host or not re.fullmatch(r"[0-9A-Fa-f:.]+", host):
            raise ConnectionStringError(f"{what}={_show(value)}: {_show(host)} is not an IPv6 address")
    else:
        host = text
        if host == ".":
            host = "localhost"
        if not host or not _HOST_RE.fullmatch(host):
            raise ConnectionStringError(
                f"{what}={_show(value)}: {_show(host)} is not a host name or IP address (letters, digits, '.', "
                "'-', '_')"
            )
    if port is None and instance is not None:
        table = {k.lower(): v for k, v in (instance_ports or {}).items()}
        if instance.lower() not in table:
            raise ConnectionStringError(
                f"{what}={_show(value)} names instance {_show(instance)} but no port: the harness has no SQL Server "
                f"Browser; write {host}\\{instance},<port>, or pass instance_ports={{{instance!r}: <port>}}"
            )
        port = _port(table[instance.lower()])
        if port is None:
            raise ConnectionStringError(
                f"instance_ports[{_show(instance)}] = {_show(table[instance.lower()])} is not a port; give 1..65535"
            )
    return Address(host, default_port if port is None else port, instance)


def _parse_timeout(value: str) -> float | None:
    try:
        seconds = float(value)
    except ValueError:
        raise ConnectionStringError(
            f"Connect Timeout={_show(value)} is not a number; give seconds (e.g. 15, 2.5; 0 = no timeout)"
        ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ConnectionStringError(f"Connect Timeout={_show(value)} must be >= 0 seconds (0 = no timeout, MIR-8)")
    return None if seconds == 0 else seconds


def parse_connection_string(
    text: str, *, default_port: int = DEFAULT_PORT, instance_ports: Mapping[str, int] | None = None
) -> ConnectionSpec:
    """Parse a SQL Server keyword connection string into a :class:`ConnectionSpec` (MIR-2: a missing
    database is refused; MIR-3: no failover partner gives ``failover=None``; MIR-8: ``Connect
    Timeout=0`` gives ``login_timeout=None``). Raises :class:`ConnectionStringError`."""
    if not isinstance(text, str):
        raise ConnectionStringError(f"a connection string must be a str, not {type(text).__name__}")
    seen: dict[str, tuple[str, str]] = {}
    extra: dict[str, str] = {}
    after_secret = False
    for raw_key, value, quoted in _split_pairs(text):
        try:
            key = _norm_key(raw_key)
            canon = _CANONICAL.get(key, key)
            if canon in seen or (canon not in _CANONICAL.values() and canon in extra):
                first = seen[canon][0] if canon in seen else canon
                raise ConnectionStringError(
                    f"duplicate key: {_show(raw_key.strip())} sets the same setting as {_show(first)} earlier; "
                    "keep one"
                )
        except ConnectionStringError:
            if not after_secret:
                raise
            raise ConnectionStringError(  # the key may be the tail of a password: do not echo it
                "bad key after the password value; a password holding ';', '=' or a quote must be written "
                "in double quotes (with each double quote inside it doubled)"
            ) from None
        after_secret = canon == "password" and not quoted
        if canon in _CANONICAL.values():
            seen[canon] = (raw_key.strip(), value)
        else:
            extra[canon] = value
    if "server" not in seen or not seen["server"][1].strip():
        raise ConnectionStringError(
            "no Server: name the initial partner with Server=<host>[,<port>] (or Data Source=...)"
        )
    initial = parse_address(
        seen["server"][1], what=seen["server"][0], default_port=default_port, instance_ports=instance_ports
    )
    failover = None
    if "failover partner" in seen and seen["failover partner"][1].strip():
        failover = parse_address(
            seen["failover partner"][1],
            what=seen["failover partner"][0],
            default_port=default_port,
            instance_ports=instance_ports,
        )
    if "network" in seen:
        net = seen["network"][1].strip()
        if net.lower() not in _TCP_NETWORK_VALUES:
            raise ConnectionStringError(
                f"Network={_show(net)} is not supported; only TCP/IP is: write Network=dbmssocn or leave it out"
            )
        extra["network"] = net
    database = seen.get("database", ("", ""))[1]
    if not database.strip():
        raise ConnectionStringError(
            "MIR-2: no database name: a mirroring connection string must name the database "
            "(failover is impossible without it); add Database=<name> (or Initial Catalog=<name>)"
        )
    login_timeout: float | None = DEFAULT_LOGIN_TIMEOUT
    if "login timeout" in seen:
        login_timeout = _parse_timeout(seen["login timeout"][1].strip())
    user = seen["user id"][1] if "user id" in seen else None
    password = seen["password"][1] if "password" in seen else None
    return ConnectionSpec(
        initial=initial,
        failover=failover,
        database=database,
        login_timeout=login_timeout,
        user=user,
        password=password,
        extra=tuple(extra.items()),
    )


# -------------------------------------------------------------------------------------------- format


def _quote(value: str) -> str:
    if value == "" or value != value.strip() or any(c in value for c in ";\"'") or "\n" in value:
        return '"' + value.replace('"', '""') + '"'
    return value


def _format_timeout(lt: float | None) -> str:
    if lt is None:
        return "0"
    return repr(float(lt)) if not float(lt).is_integer() else str(int(lt))


def format_connection_string(spec: ConnectionSpec) -> str:
    """Write ``spec`` in the keyword form (inverse of :func:`parse_connection_string`)."""
    parts = [f"Server={spec.initial.to_server_value()}"]
    if spec.failover is not None:
        parts.append(f"Failover Partner={spec.failover.to_server_value()}")
    parts.append(f"Database={_quote(spec.database)}")
    parts.append(f"Connect Timeout={_format_timeout(spec.login_timeout)}")
    if spec.user is not None:
        parts.append(f"User ID={_quote(spec.user)}")
    if spec.password is not None:
        parts.append(f"Password={_quote(spec.password)}")
    for key, value in spec.extra:
        parts.append(f"{key}={_quote(value)}")
    return "; ".join(parts)
