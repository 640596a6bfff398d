"""The ACR ``pgjdbc`` adapter without a server (RULEBOOK ACR-6/ACR-9 plumbing): the multi-host URL
lists the members then the group-wide address, only pgjdbc's own options are set, a refused host list
is the outcome class *communication-error* (SQL30081N, never a harness error), and the generic JDBC
helper's ``cancel`` answers for a connection with no running statement. Real JVM, real sockets (closed
ports on 127.0.0.1)."""

from __future__ import annotations

import socket

import pytest

from harness.clients.acr import ACR_CLIENTS, outcome_class
from harness.clients.acr.pgjdbc import PgjdbcAcrClient
from harness.errors import Sql30081N
from harness.topology.acr import AcrSpec, Member


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_group_is_a_communication_error() -> None:
    members = tuple(Member(f"m{i}", "primary", "127.0.0.1", closed_port(), 50, f"m{i}") for i in (1, 2))
    group = Member("group", "primary", "127.0.0.1", closed_port(), 0, "group")
    spec = AcrSpec(members=members, group_address=group, dbname="app", user="app", password="s3cret-pw",
                   application_name="app")
    client = ACR_CLIENTS["pgjdbc"](connect_timeout=1.0, receive_timeout=1.5, max_acr_retries=1)
    assert isinstance(client, PgjdbcAcrClient)
    try:
        url = client.url(spec)
        assert url == (f"jdbc:postgresql://127.0.0.1:{members[0].port},127.0.0.1:{members[1].port},"
                       f"127.0.0.1:{group.port}/app")
        props = client.properties(spec)
        assert props["targetServerType"] == "any" and props["connectTimeout"] == "1" and "loginTimeout" not in props
        assert props["socketTimeout"] == "2" and client.ignored == ["max_acr_retries"]
        with pytest.raises(Sql30081N) as err:
            client.connect(spec)
        assert outcome_class(err.value) == "communication-error"
        assert "s3cret-pw" not in str(err.value)
        reply = client.helper.call("cancel", conn=99)
        assert reply["ok"] is True and reply["cancelled"] is False, reply
    finally:
        client.shutdown()
    assert client.helper.proc.poll() is not None
