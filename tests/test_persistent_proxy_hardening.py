"""Hardening of the persistent proxy: the admin API lets no one else in (token, JSON only, /resume
allow-list, loopback unless explicitly exposed), the CLI keeps the password out of argv and the
token out of its output, frontend messages above ``max_message_size`` or malformed ones get 08P01
for that session only (no traceback), and large messages are relayed as a stream - against a real
PostgreSQL 15 server (``LocalServer``) and the real proxy, no mocks."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import select
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from harness.errors import ConfigError
from harness.persistproxy import AdminServer, PersistentProxy, ProxyConfig, ThreadedPersistentProxy
from harness.persistproxy import protocol as pq
from tests.support import rawpg
from tests.support.pgserver import LocalServer

pytestmark = pytest.mark.rule("PER-1", "PER-3", "PER-4")

TOKEN_HEADER = "X-Failover-Harness-Token"
ROLE = "hardened"
ROLE_PASSWORD = "pw-" + secrets.token_hex(12)  # distinctive: grep-able in argv and outputs


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    s = LocalServer("hard")
    try:
        s.start()
        s.psql(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{ROLE_PASSWORD}'; GRANT ALL ON items TO {ROLE}")
        yield s
    finally:
        s.stop(remove=True)


@pytest.fixture
def proxy(server: LocalServer) -> Iterator[ThreadedPersistentProxy]:
    """A proxy (trust on both sides) with its admin API, whose principal is ``server``."""
    config = ProxyConfig(user="apptrust", front_auth="trust", front_users={"apptrust": ""},
                         candidates=[server.server_address], drain_window=1.0, recovery_window=5.0)
    with ThreadedPersistentProxy(config, admin=("127.0.0.1", 0)) as p:
        yield p


def _post(address: tuple[str, int], path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    """POST with exactly these headers (http.client adds no Content-Type of its own)."""
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


class FakeListener:
    """A TCP listener on 127.0.0.1 standing in for the attacker's server: it only records whether
    anyone connected."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.address: tuple[str, int] = self.sock.getsockname()

    def accepted_anything(self, wait: float = 0.3) -> bool:
        ready, _, _ = select.select([self.sock], [], [], wait)
        return bool(ready)

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------------------------- admin API


def test_admin_attack_from_the_issue_fails(proxy: ThreadedPersistentProxy, server: LocalServer) -> None:
    """The admin-API attack - ``POST /drain`` then ``POST /resume`` naming a listener of the
    caller's choice - fails at every step (415 text/plain, 401 without or with a wrong token, 403 for
    an address outside the allow-list even with the token) and the fake listener receives nothing;
    the proxy never drains for the attacker and its session keeps its principal."""
    admin = proxy.admin_address
    assert admin is not None and admin[0] == "127.0.0.1"
    fake = FakeListener()
    session = psycopg.connect(host=proxy.address[0], port=proxy.address[1], user="apptrust", dbname="app",
                              autocommit=True)
    try:
        target = _json({"host": fake.address[0], "port": fake.address[1]})
        plain = {"Content-Type": "text/plain"}
        as_json = {"Content-Type": "application/json"}
        attempts = [
            ("/drain", b"{}", plain, 415),
            ("/resume", target, plain, 415),
            ("/drain", b"{}", as_json, 401),
            ("/resume", target, as_json, 401),
            ("/drain", b"{}", {**as_json, TOKEN_HEADER: "x" * 43}, 401),
            ("/resume", target, {**as_json, "Authorization": "Bearer " + "y" * 43}, 401),
        ]
        for path, body, headers, expected in attempts:
            status, answer = _post(admin, path, body, headers)
            assert (path, status) == (path, expected), answer
            assert "error" in answer
        assert proxy.status()["draining"] is False and proxy.status()["counters"]["drains"] == 0
        # even the token holder cannot send the proxy (and its password) elsewhere
        token = {**as_json, TOKEN_HEADER: proxy.admin_token or ""}
        assert _post(admin, "/drain", b"{}", token)[0] == 200
        status, answer = _post(admin, "/resume", target, token)
        assert status == 403 and f"{fake.address[0]}:{fake.address[1]}" in answer["error"]
        assert not fake.accepted_anything()
        # the allowed principal (a --backend / candidate) is accepted, with either header form
        bearer = {**as_json, "Authorization": f"Bearer {proxy.admin_token}"}
        status, answer = _post(admin, "/resume", _json({"host": "127.0.0.1", "port": server.port}), bearer)
        assert status == 200 and answer["principal"] == f"127.0.0.1:{server.port}"
        assert session.execute("SELECT inet_server_port()").fetchone()[0] == server.port  # type: ignore[index]
    finally:
        session.close()
        fake.close()


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_simple_cross_origin_post_is_refused(proxy: ThreadedPersistentProxy, content_type: str | None) -> None:
    """What a web page can send without a CORS preflight (a "simple" POST: text/plain, form
    encodings, or no content type), even carrying the right token, is refused with 415."""
    admin = proxy.admin_address
    assert admin is not None
    headers = {"Origin": "http://evil.example", TOKEN_HEADER: proxy.admin_token or ""}
    if content_type is not None:
        headers["Content-Type"] = content_type
    status, answer = _post(admin, "/drain", b'{"timeout": 0}', headers)
    assert status == 415 and "application/json" in answer["error"]
    assert proxy.status()["counters"]["drains"] == 0


def test_admin_bad_bodies_are_400(proxy: ThreadedPersistentProxy) -> None:
    """With the token, malformed bodies are one-line 400s (no traceback, no state change): not
    JSON, not an object, nested absurdly deep, a bad timeout or port."""
    admin = proxy.admin_address
    assert admin is not None
    headers = {"Content-Type": "application/json", TOKEN_HEADER: proxy.admin_token or ""}
    for path, body in [("/drain", b"{nope"), ("/drain", b"[1]"), ("/drain", b"[" * 20000 + b"]" * 20000),
                       ("/drain", _json({"timeout": "NaN"})), ("/drain", _json({"timeout": -1})),
                       ("/resume", _json({"host": "127.0.0.1"})), ("/resume", _json({"host": "h", "port": 70000})),
                       ("/resume", _json({"host": "h", "port": True}))]:
        status, answer = _post(admin, path, body, headers)
        assert status == 400 and "\n" not in answer["error"], (path, body[:40], answer)
    assert proxy.status()["counters"]["drains"] == 0


def test_admin_token_is_per_proxy(server: LocalServer) -> None:
    """Two proxies get two different random tokens; one proxy's token does not open the other."""
    config = ProxyConfig(user="apptrust", front_auth="trust", candidates=[server.server_address])
    with ThreadedPersistentProxy(config, admin=("127.0.0.1", 0)) as one, \
            ThreadedPersistentProxy(config, admin=("127.0.0.1", 0)) as two:
        assert one.admin_token and two.admin_token and one.admin_token != two.admin_token
        assert len(one.admin_token) >= 32
        headers = {"Content-Type": "application/json", TOKEN_HEADER: one.admin_token}
        assert _post(two.admin_address, "/drain", b"{}", headers)[0] == 401  # type: ignore[arg-type]
    assert ThreadedPersistentProxy(config).admin_token is None  # no admin API, no token


def test_reference_client_admin_allows_only_the_pairs_nodes(server: LocalServer) -> None:
    """The PER reference client's admin API (``admin=``): the token comes from the object, and
    ``/resume`` accepts the nodes of the topology it fronts and nothing else."""
    from types import SimpleNamespace

    from harness.clients.persistent import ReferenceClient

    fake = FakeListener()
    node = SimpleNamespace(client_address=server.server_address)
    pair = SimpleNamespace(principal=node, nodes=[node, SimpleNamespace(client_address=("127.0.0.1", 9))])
    client = ReferenceClient(pair, drain_window=1.0, admin=("127.0.0.1", 0), database="app", user="app",
                             password="app")  # the stand-in server's own login
    try:
        client.start()
        assert client.proxy.proxy.allowed_principals() == [server.server_address, ("127.0.0.1", 9)]
        pair.nodes = pair.nodes[:1]  # the allow-list is the topology's nodes as they are now
        assert client.proxy.proxy.allowed_principals() == [server.server_address]
        admin, token = client.admin_address, client.admin_token
        assert admin is not None and token
        headers = {"Content-Type": "application/json", TOKEN_HEADER: token}
        assert _post(admin, "/drain", b"{}", headers)[0] == 200
        assert _post(admin, "/resume", _json({"host": fake.address[0], "port": fake.address[1]}), headers)[0] == 403
        assert not fake.accepted_anything()
        status, answer = _post(admin, "/resume", _json({"host": "127.0.0.1", "port": server.port}), headers)
        assert status == 200 and answer["principal"] == f"127.0.0.1:{server.port}"
    finally:
        client.stop()
        fake.close()


def test_admin_non_loopback_needs_explicit_flag(server: LocalServer) -> None:
    """Binding the admin API beyond the loopback is a ConfigError unless explicitly allowed."""
    config = ProxyConfig(user="apptrust", candidates=[server.server_address])
    with pytest.raises(ConfigError, match="allow_remote"):
        AdminServer(PersistentProxy(config), "0.0.0.0", 0)
    with pytest.raises(ConfigError, match="loopback"):
        ThreadedPersistentProxy(config, admin=("0.0.0.0", 0))
    assert AdminServer(PersistentProxy(config), "::1", 0).token  # loopback literals are fine
    with pytest.raises(ConfigError, match="16 characters"):
        AdminServer(PersistentProxy(config), token="short")


# --------------------------------------------------------------------------------------------- CLI


def _start_cli(server: LocalServer, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "persistent-proxy", "--listen", "127.0.0.1:0",
         "--backend", f"127.0.0.1:{server.port}", "--user", ROLE, "--probe-database", "app", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})})


def _stop_cli(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.terminate()
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    return out, err


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run ``persistent-proxy ARGS`` in-process (the error paths stop before serving)."""
    from harness.cli import main

    code = main(["persistent-proxy", *args])
    return code, capsys.readouterr().err


def test_cli_password_and_token_stay_out_of_argv_and_output(server: LocalServer, tmp_path: Path) -> None:
    """``persistent-proxy`` takes the password from $PGPASSWORD: it is not in /proc/PID/cmdline; the
    admin token is written to a 0600 file whose path is printed (the token itself appears in no
    output), works on /drain, and the file is removed when the proxy stops."""
    proc = _start_cli(server, "--admin", "127.0.0.1:0", env={"PGPASSWORD": ROLE_PASSWORD})
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert ROLE_PASSWORD.encode() not in cmdline and b"--password" not in cmdline
        host, port = info["listen"].rsplit(":", 1)
        with psycopg.connect(host=host, port=int(port), user=ROLE, password=ROLE_PASSWORD, dbname="app") as c:
            assert c.execute("SELECT current_user").fetchone()[0] == ROLE  # type: ignore[index]
        token_file = Path(info["token_file"])
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and token_file.stat().st_uid == os.getuid()
        token = token_file.read_text().strip()
        ahost, aport = info["admin"].rsplit(":", 1)
        admin = (ahost, int(aport))
        assert _post(admin, "/drain", b"{}", {"Content-Type": "application/json"})[0] == 401
        status, answer = _post(admin, "/drain", b"{}", {"Content-Type": "application/json", TOKEN_HEADER: token})
        assert status == 200 and answer["kept"] == []
    finally:
        out, err = _stop_cli(proc)
    assert token not in out + err and ROLE_PASSWORD not in out + err
    assert not token_file.exists()
    # the same from a 0600 file
    secret = tmp_path / "pw"
    secret.write_text(ROLE_PASSWORD + "\n")
    secret.chmod(0o600)
    proc = _start_cli(server, "--password-file", str(secret))
    try:
        assert proc.stdout is not None
        host, port = json.loads(proc.stdout.readline())["listen"].rsplit(":", 1)
        with psycopg.connect(host=host, port=int(port), user=ROLE, password=ROLE_PASSWORD, dbname="app") as c:
            assert c.execute("SELECT 1").fetchone()[0] == 1  # type: ignore[index]
        assert ROLE_PASSWORD.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    finally:
        _stop_cli(proc)


def test_cli_refuses_secrets_and_exposure_with_one_line(server: LocalServer, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--password`` on the command line, a password file others can read or missing, a
    non-loopback ``--admin`` without ``--admin-allow-remote``, a too small ``--max-message-size`` and
    a ``--release-after-logins`` out of range are one-line usage errors (exit 2) naming the fix, and
    never echo the password."""
    monkeypatch.setenv("PGPASSWORD", ROLE_PASSWORD)
    backend = ["--backend", f"127.0.0.1:{server.port}", "--user", ROLE]
    loose = tmp_path / "pw"
    loose.write_text(ROLE_PASSWORD)
    loose.chmod(0o644)
    cases = [
        (["--password", ROLE_PASSWORD], "PGPASSWORD or in a mode-0600 file given with --password-file"),
        (["--password-file", str(loose)], f"chmod 600 {loose}"),
        (["--password-file", str(tmp_path / "missing")], "cannot read --password-file"),
        (["--admin", "0.0.0.0:0"], "--admin-allow-remote"),
        (["--allow-principal", "h:99999"], "--allow-principal must be HOST:PORT"),
        (["--max-message-size", "5"], "max_message_size must be"),
        (["--release-after-logins", "-1"], "give 0 to 60 seconds"),
        (["--release-after-logins", "nan"], "give 0 to 60 seconds"),
    ]
    for extra, words in cases:
        code, err = _cli(capsys, *backend, *extra)
        assert code == 2 and words in err, (extra, err)
        assert len(err.strip().splitlines()) == 1 and ROLE_PASSWORD not in err, err


def test_cli_remote_admin_warns_who_can_reach_it(server: LocalServer) -> None:
    """With ``--admin-allow-remote`` the admin API may bind a non-loopback address, and the proxy
    prints a warning naming the address and who can then reach it."""
    proc = _start_cli(server, "--admin", "0.0.0.0:0", "--admin-allow-remote", env={"PGPASSWORD": ROLE_PASSWORD})
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["admin"].startswith("0.0.0.0:")
    finally:
        _, err = _stop_cli(proc)
    assert f"listens on {info['admin']}" in err and "every host that can reach" in err


# --------------------------------------------------------------------------------------------- frontend messages


def _framed(kind: bytes, payload: bytes, length: int | None = None) -> bytes:
    return kind + struct.pack("!i", len(payload) + 4 if length is None else length) + payload


#: malformed frontend messages after a valid login: (what, bytes, words the 08P01 must contain)
MALFORMED = [
    ("Query without its NUL terminator", _framed(b"Q", b"SELECT 1"), "malformed Query"),
    ("Parse without the query's NUL", _framed(b"P", b"s1\0SELECT 1"), "malformed Parse"),
    ("Parse with an empty body", _framed(b"P", b""), "malformed Parse"),
    ("Bind with one name only", _framed(b"B", b"portal"), "malformed Bind"),
    ("Execute without NUL", _framed(b"E", b"portal"), "malformed Execute"),
    ("Close with an empty body", _framed(b"C", b""), "malformed Close"),
    ("negative length", _framed(b"Q", b"", -1), "invalid length -1"),
    ("length 0", _framed(b"Q", b"", 0), "invalid length 0"),
    ("length 3", _framed(b"S", b"", 3), "invalid length 3"),
    ("unknown type", _framed(b"!", b"junk"), "unexpected message type"),
    ("a PasswordMessage after login", _framed(b"p", b"pw\0"), "unexpected message type"),
    ("1 GiB announced", _framed(b"Q", b"SELECT", 1 << 30), "limit of 67108864 bytes"),
    ("64 MiB + 1 announced", _framed(b"d", b"", (64 << 20) + 1), "limit of 67108864 bytes"),
    ("2 GiB - 1 announced", _framed(b"B", b"", 0x7FFFFFFF), "limit of 67108864 bytes"),
]


def test_malformed_frontend_messages_get_08P01_without_traceback(proxy: ThreadedPersistentProxy) -> None:
    """Each malformed or oversized message (table above) is answered with one FATAL 08P01 naming
    the problem, the session is closed, nothing is logged with a traceback, and a concurrent session
    keeps working."""
    good = psycopg.connect(host=proxy.address[0], port=proxy.address[1], user="apptrust", dbname="app",
                           autocommit=True)
    try:
        with rawpg.TracebackCollector() as logs:
            for what, data, words in MALFORMED:
                reply = rawpg.send_and_close(proxy.address, "apptrust", data)  # type: ignore[arg-type]
                errors = rawpg.errors_in(reply)
                assert [e.code for e in errors] == ["08P01"], (what, reply[:200])
                assert words in errors[0].message and errors[0].severity == "FATAL", (what, errors[0])
                assert good.execute("SELECT 1").fetchone()[0] == 1  # type: ignore[index]
        assert logs.records == [], logs.records
    finally:
        good.close()
    time.sleep(0.1)
    assert proxy.status()["sessions"] == []


def test_malformed_message_the_proxy_only_relays_gets_the_servers_answer(proxy: ThreadedPersistentProxy) -> None:
    """A malformed message the proxy does not need to parse (Describe without its NUL) is relayed:
    the server answers it with its own 08P01 ERROR and the session goes on (the proxy does not close
    a session the server keeps)."""
    s = rawpg.login(proxy.address, "apptrust")  # type: ignore[arg-type]
    try:
        s.sendall(_framed(b"D", b"Sname") + pq.SYNC + pq.query("SELECT 41 + 1"))
        reply = b""
        while reply.count(pq.ready_for_query(b"I")) < 2:
            got = s.recv(65536)
            assert got, reply
            reply += got
        assert [e.code for e in rawpg.errors_in(reply)] == ["08P01"] and b"42" in reply
    finally:
        s.close()


def test_message_size_limit_is_configurable(server: LocalServer) -> None:
    """``max_message_size`` (here 128 KiB): a Query within it works, one above it gets 08P01
    naming the limit; bad limits are a ConfigError."""
    config = ProxyConfig(user="apptrust", front_auth="trust", candidates=[server.server_address],
                         max_message_size=128 << 10)
    with ThreadedPersistentProxy(config) as p:
        with psycopg.connect(host=p.address[0], port=p.address[1], user="apptrust", dbname="app") as c:
            text = "x" * (100 << 10)
            assert c.execute(f"SELECT length('{text}')").fetchone()[0] == len(text)  # type: ignore[index]
            with pytest.raises(psycopg.OperationalError, match="limit of 131072 bytes"):
                c.execute(f"SELECT length('{text * 2}')")
    for bad in (0, 1000, (1 << 30) + 1, 2.5, True):
        with pytest.raises(ConfigError, match="max_message_size"):
            ProxyConfig(user="u", candidates=[("127.0.0.1", 1)], max_message_size=bad)  # type: ignore[arg-type]


def _vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _warmed_up(proc: subprocess.Popen[str]) -> tuple[str, int]:
    """The CLI proxy's listen address, after one query through it (its code paths loaded, so that
    a peak-RSS measurement afterwards sees only what the test sends)."""
    assert proc.stdout is not None
    host, port = json.loads(proc.stdout.readline())["listen"].rsplit(":", 1)
    with psycopg.connect(host=host, port=int(port), user=ROLE, password=ROLE_PASSWORD, dbname="app",
                         autocommit=True) as c:
        c.execute("SELECT 1")
    return host, int(port)


def test_large_copy_and_bind_are_streamed(server: LocalServer) -> None:
    """A 48 MiB CopyData message and a 24 MiB Bind parameter pass through the proxy intact (the
    server sees every byte) while the proxy's peak resident memory grows by less than 16 MiB: they
    are relayed as a stream, not buffered (bounded memory)."""
    proc = _start_cli(server, "--front-auth", "password", env={"PGPASSWORD": ROLE_PASSWORD})
    try:
        address = _warmed_up(proc)
        host, port = address
        before = _vm_kib(proc.pid, "VmHWM")
        s = rawpg.login(address, ROLE, ROLE_PASSWORD)
        try:
            s.sendall(pq.query("CREATE TEMP TABLE big (v text); COPY big FROM STDIN"))
            reply = b""
            while b"G\x00\x00\x00" not in reply:  # CopyInResponse
                got = s.recv(65536)
                assert got, reply
                reply += got
            size = 48 << 20
            s.sendall(b"d" + struct.pack("!i", size + 4))
            chunk = b"a" * (1 << 20)
            for _ in range(size // len(chunk) - 1):
                s.sendall(chunk)
            s.sendall(chunk[:-1] + b"\n" + pq.msg(b"c") + pq.query("SELECT length(v) FROM big"))
            reply = b""
            while reply.count(pq.ready_for_query(b"I")) < 2:  # after the COPY and after the SELECT
                got = s.recv(65536)
                assert got, reply[-300:]
                reply += got
            assert str(size - 1).encode() in reply and rawpg.errors_in(reply) == []
        finally:
            s.close()
        with psycopg.connect(host=host, port=int(port), user=ROLE, password=ROLE_PASSWORD, dbname="app") as c:
            n = 24 << 20
            assert c.execute("SELECT length(%s::text)", ["b" * n]).fetchone()[0] == n  # type: ignore[index]
        grown_mib = (_vm_kib(proc.pid, "VmHWM") - before) / 1024
        assert grown_mib < 16, f"proxy peak RSS grew by {grown_mib:.0f} MiB"
    finally:
        _stop_cli(proc)


def test_large_result_to_a_slow_client_is_flow_controlled(server: LocalServer) -> None:
    """A 64 MiB result read slowly by its client reaches it whole while the proxy's peak resident
    memory grows by less than 16 MiB: when the client's side is full the proxy stops reading the
    server (back-pressure through the data path, PER-1, bounded memory)."""
    proc = _start_cli(server, "--front-auth", "password", env={"PGPASSWORD": ROLE_PASSWORD})
    try:
        address = _warmed_up(proc)
        before = _vm_kib(proc.pid, "VmHWM")
        s = rawpg.login(address, ROLE, ROLE_PASSWORD)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            rows, width = 64, 1 << 20
            s.sendall(pq.query(f"SELECT repeat('x', {width}) FROM generate_series(1, {rows})"))
            received = 0
            tail = b""
            time.sleep(1.0)  # the server has produced far more than the socket buffers hold by now
            while not tail.endswith(pq.ready_for_query(b"I")):
                got = s.recv(1 << 20)
                assert got, f"connection closed after {received} bytes"
                received += len(got)
                tail = (tail + got)[-16:]
            assert received > rows * width
        finally:
            s.close()
        grown_mib = (_vm_kib(proc.pid, "VmHWM") - before) / 1024
        assert grown_mib < 16, f"proxy peak RSS grew by {grown_mib:.0f} MiB"
    finally:
        _stop_cli(proc)
