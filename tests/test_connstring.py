"""Connection-string parsing for the mirroring profile (MIR-2, MIR-3, MIR-8 at the client level)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import ConfigError
from harness.rules.connstring import (
    DEFAULT_LOGIN_TIMEOUT,
    DEFAULT_PORT,
    Address,
    ConnectionSpec,
    ConnectionStringError,
    format_connection_string,
    parse_connection_string,
)


def test_documented_example_with_failover_partner() -> None:
    spec = parse_connection_string(
        "Server=Partner_A; Failover_Partner=Partner_B; Database=AdventureWorks; Network=dbmssocn"
    )
    assert spec.initial == Address("Partner_A", DEFAULT_PORT)
    assert spec.failover == Address("Partner_B", DEFAULT_PORT)
    assert spec.database == "AdventureWorks"
    assert spec.login_timeout == DEFAULT_LOGIN_TIMEOUT
    assert spec.extra_dict == {"network": "dbmssocn"}


def test_ip_port_tcp_prefix_synonyms_and_case() -> None:
    spec = parse_connection_string(
        "  data source = tcp:250.65.43.21,4734 ;FAILOVER PARTNER=10.0.0.2, 1444;"
        " INITIAL   CATALOG = Db_1 ; Login Timeout=2.5; User ID=app; PWD=s3cret;"
    )
    assert spec.initial == Address("250.65.43.21", 4734)
    assert spec.failover == Address("10.0.0.2", 1444)
    assert spec.database == "Db_1"
    assert spec.login_timeout == 2.5
    assert (spec.user, spec.password) == ("app", "s3cret")


@pytest.mark.parametrize("key", ["Connect Timeout", "Connection Timeout", "Login Timeout", "timeout"])
def test_timeout_synonyms(key: str) -> None:
    assert parse_connection_string(f"Server=a;Database=d;{key}=7").login_timeout == 7.0


def test_zero_timeout_means_none_mir8() -> None:
    spec = parse_connection_string("Server=a,1;Failover Partner=b,2;Database=d;Connect Timeout=0")
    assert spec.login_timeout is None


def test_no_failover_partner_mir3() -> None:
    assert parse_connection_string("Server=a;Database=d").failover is None
    assert parse_connection_string("Server=a;Failover Partner=;Database=d").failover is None


def test_quoted_values_with_doubled_quotes_and_semicolons() -> None:
    spec = parse_connection_string('Server=a;Database="my;db ""x""";Password=\'it\'\'s; ok\';User ID=it\'s')
    assert spec.database == 'my;db "x"'
    assert spec.password == "it's; ok"
    assert spec.user == "it's"  # a quote inside an unquoted value is literal


def test_instance_names() -> None:
    assert parse_connection_string("Server=h\\inst,1500;Database=d").initial == Address("h", 1500, "inst")
    spec = parse_connection_string("Server=h\\Inst_2;Database=d", instance_ports={"inst_2": 1600})
    assert spec.initial == Address("h", 1600, "Inst_2")
    with pytest.raises(ConnectionStringError, match=r"instance 'Inst_2' but no port.*instance_ports"):
        parse_connection_string("Server=h\\Inst_2;Database=d")


def test_ipv6_in_brackets() -> None:
    spec = parse_connection_string("Server=[::1],5433;Database=d")
    assert spec.initial == Address("::1", 5433)
    assert spec.initial.hostport == "[::1]:5433"


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ('Server=a;Database=d;Password="abc', r"unbalanced \" quote.*Password"),
        ("Server=a;Database='d", r"unbalanced ' quote"),
        ("Server=a;Database;x=1", r"'Database'.*has no '='"),
        ("Server=a;Database=d;Server=b", r"duplicate key.*'Server'"),
        ("Server=a;Data Source=b;Database=d", r"duplicate key: 'Data Source'.*'Server'"),
        ("Server=a;Database=d;Initial Catalog=e", r"duplicate key"),
        ("Server=a;Database=d;foo=1;FOO=2", r"duplicate key"),
        ("Server=a,99999;Database=d", r"bad port '99999'"),
        ("Server=a,x;Database=d", r"bad port 'x'"),
        ("Server=a:5432;Database=d", r"port after a comma"),
        ("Server=np:a;Database=d", r"only TCP"),
        ("Server=a;Database=d;Network=dbnmpntw", r"only TCP/IP"),
        ("Server=a;Database=d;Connect Timeout=-1", r">= 0 seconds"),
        ("Server=a;Database=d;Connect Timeout=soon", r"not a number"),
        ('Server=a;Database="d" x', r"unexpected text"),
        ("Database=d", r"no Server"),
        ("Server=a b;Database=d", r"not a host name"),
        ("=x;Server=a;Database=d", r"empty key"),
    ("\"Server\"=a;Database=d", r"contains a quote"),
    ],
)
def test_malformed_strings_raise_clear_config_errors(text: str, pattern: str) -> None:
    with pytest.raises(ConnectionStringError, match=pattern) as info:
        parse_connection_string(text)
    assert isinstance(info.value, ConfigError)


@pytest.mark.parametrize(
    "text",
    [
        "Server=a;Failover Partner=b",
        "Server=a;Failover Partner=b;Database=",
        'Server=a;Failover Partner=b;Database="  "',
    ],
)
def test_missing_database_is_refused_mir2(text: str) -> None:
    with pytest.raises(ConnectionStringError, match=r"MIR-2: no database name.*Database=<name>"):
        parse_connection_string(text)


def test_spec_itself_refuses_missing_database_mir2() -> None:
    with pytest.raises(ConnectionStringError, match="MIR-2"):
        ConnectionSpec(Address("a"), None, "")


# ------------------------------------------------------------------------------- round trip

_label = st.from_regex(r"[A-Za-z0-9_]([A-Za-z0-9_\-]{0,10})", fullmatch=True)
_hosts = st.one_of(
    st.builds(lambda parts: ".".join(parts), st.lists(_label, min_size=1, max_size=3)),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
)
_addresses = st.builds(Address, host=_hosts, port=st.integers(1, 65535), instance=st.none() | _label)
_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20)
_database = _text.filter(lambda s: s.strip() != "")
_timeouts = (
    st.none() | st.floats(min_value=0.001, max_value=1e6, allow_nan=False) | st.integers(1, 600).map(float)
)
_extra_keys = st.from_regex(r"[a-z][a-z0-9 ]{0,12}[a-z0-9]", fullmatch=True).filter(
    lambda k: (
        "  " not in k
        and k
        not in {
            "server",
            "address",
            "addr",
            "database",
            "timeout",
            "user",
            "uid",
            "pwd",
            "password",
            "net",
            "network",
            "userid",
            "data source",
            "initial catalog",
            "connect timeout",
            "login timeout",
            "connection timeout",
            "user id",
            "failover partner",
            "failoverpartner",
            "network address",
            "network library",
        }
    )
)
_specs = st.builds(
    ConnectionSpec,
    initial=_addresses,
    failover=st.none() | _addresses,
    database=_database,
    login_timeout=_timeouts,
    user=st.none() | _text,
    password=st.none() | _text,
    extra=st.dictionaries(_extra_keys, _text, max_size=3).map(lambda d: tuple(d.items())),
)


@settings(max_examples=120, deadline=None)
@given(_specs)
def test_round_trip_spec_string_spec(spec: ConnectionSpec) -> None:
    text = format_connection_string(spec)
    assert parse_connection_string(text) == spec


@settings(max_examples=100, deadline=None)
@given(_specs, st.sampled_from([str.upper, str.lower, str.title]))
def test_round_trip_survives_key_case(spec: ConnectionSpec, case: object) -> None:
    text = format_connection_string(spec)
    # change the case of the keys only (values keep theirs)
    parts = []
    for key in ("Server=", "Failover Partner=", "Database=", "Connect Timeout=", "User ID=", "Password="):
        text = text.replace(key, f"\x00{key}")
    for chunk in text.split("\x00"):
        k, sep, rest = chunk.partition("=")
        parts.append(
            case(k) + sep + rest
            if sep
            and k in {"Server", "Failover Partner", "Database", "Connect Timeout", "User ID", "Password"}
            else chunk
        )
    assert parse_connection_string("".join(parts)) == spec
