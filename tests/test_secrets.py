"""No secret in any output: the one redaction function (harness/redact.py) and every writer
that uses it - history files, the timeline, Allure results, error messages, log lines - and the
mirroring clients' record of a refused connection string."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import pytest

from harness.clients.mirroring.reference import ReferenceMirroringClient
from harness.errors import ConfigError, ConnectionStringError, RuleViolation, TopologyError
from harness.history.core import History
from harness.history.store import HistoryWriter, load_jsonl, save_jsonl
from harness.redact import MASK, protect_logger, redact, redact_data, remember
from harness.report.timeline_svg import render_svg

pytest_plugins = ["pytester"]

# (text holding a password, the password's pieces that must not survive, text that must survive).
# Before this change the mirroring redaction (a regex on password=/pwd= up to ';') leaked 10 of them.
LEAK_CASES: list[tuple[str, list[str], list[str]]] = [
    ("Server=h,1;Database=app;Password=xq7;zk9", ["xq7", "zk9"], ["Database=app"]),  # unquoted ';'
    ("Server=h,1;Password=xq7;zk9;Database=app", ["xq7", "zk9"], ["Database=app"]),
    ('Server=h,1;Password="xq7;zk9;Database=app', ["xq7", "zk9"], ["Server=h,1"]),  # quote never closed
    ('Server=h,1;Password="xq7"zk9;Database=app', ["xq7", "zk9"], ["Server=h,1"]),  # text after the quote
    ("Server=h;Password=xq7 zk9;Database=x", ["xq7", "zk9"], ["Database=x"]),
    ("Server=h;Password=xq7=b;zk9;Database=x", ["xq7", "zk9"], ["Database=x"]),
    ("Server=h;Pwd=topsecret;Database=d", ["topsecret"], ["Database=d"]),
    ("Server=h;PWD = 'it''s;x9y';Database=d", ["it''s", "x9y"], ["Database=d"]),
    ("host=127.0.0.1 port=5 dbname=app user=app password=s3cretPW", ["s3cretPW"], ["dbname=app"]),
    ("host=h password='se cr3t' dbname=app", ["se cr3t"], ["dbname=app"]),
    ("postgresql://app:s3cr@tt@127.0.0.1:5432/app", ["s3cr", "tt@"], ["127.0.0.1:5432/app"]),
    ("postgresql://app:s3cretpw@127.0.0.1:5432/app?sslmode=disable", ["s3cretpw"], ["sslmode=disable"]),
    ("postgresql://h/db?user=app&password=qsecret&sslmode=disable", ["qsecret"], ["sslmode=disable"]),
    ("PGPASSWORD=envsecret psql -h 127.0.0.1", ["envsecret"], []),
    ("{'password': 'reprsecret', 'user': 'app'}", ["reprsecret"], ["'user': 'app'"]),
    ('{"password": "json\\"secret"}', ["json", "secret"], []),
]


@pytest.mark.parametrize("text,pieces,kept", LEAK_CASES)
def test_redact_removes_every_piece_of_the_password(text: str, pieces: list[str], kept: list[str]) -> None:
    """Every syntax and malformation of the issue: nothing of the password is left, the rest stays."""
    out = redact(text)
    assert not [p for p in pieces if p in out], out
    assert all(k in out for k in kept), out
    assert MASK in out
    assert redact(out) == out  # idempotent: a second writer changes nothing


def test_redact_leaves_ordinary_text_alone() -> None:
    for text in ('FATAL:  password authentication failed for user "app"', "Server=h,1;Database=app",
                 "http://127.0.0.1:8474/proxies", "passfile=/x/y.pgpass user=app", ""):
        assert redact(text) == text


def test_redact_data_masks_secret_fields_and_strings() -> None:
    data = {"password": "plainvalue", "admin_token": "tok123456", "dsn": "host=h password=pw12345",
            "nested": [{"Pwd": "zz-top-99"}, ("user=app password='a b'",)], "n": 3, "password_file": "/p"}
    out = json.dumps(redact_data(data))
    for secret in ("plainvalue", "tok123456", "pw12345", "zz-top-99", "a b"):
        assert secret not in out
    assert '"n": 3' in out and '"/p"' in out


def test_remembered_secret_is_removed_anywhere() -> None:
    remember("Unguessable-Value-42")
    assert redact("log: the value Unguessable-Value-42 appeared") == "log: the value *** appeared"
    remember("ab")  # too short to be remembered: it would mangle ordinary words
    assert redact("about") == "about"


def test_error_messages_are_redacted() -> None:
    assert "hunter22" not in str(ConfigError("bad dsn host=h password=hunter22"))
    assert "hunter22" not in str(TopologyError("psql 'postgresql://u:hunter22@h/db' failed"))
    assert "hunter22" not in str(RuleViolation("MIR-2", "open of Server=h;Pwd=hunter22 succeeded"))


def test_log_lines_are_redacted() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("harness.test_secrets")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    protect_logger(protect_logger(logger))
    try:
        logger.warning("connecting with %s", "host=h password=logsecret1")
        try:
            raise ValueError("dsn user=u password=logsecret2")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert "logsecret" not in text and "password=***" in text and "Traceback" in text
    assert sum(isinstance(f, logging.Filter) for f in logger.filters) == 1


def _history_with_secrets() -> History:
    h = History(meta={"topology": {"nodes": [{"name": "n1", "dsn": "host=h port=1 user=app password=metasecret"}]}})
    h.record("op.invoke", process="c", op_id=1, f="open",
             value={"connstring": "Server=h;Password=csecret;x;Database=d"})
    h.record("op.fail", process="c", op_id=1, f="open", error="OperationalError: password=errsecret rejected")
    h.record("client.start", dsn="postgresql://app:urisecret@127.0.0.1/app", conninfo={"password": "fieldsecret"})
    return h


SECRETS = ("metasecret", "csecret", "errsecret", "urisecret", "fieldsecret")


def test_history_files_hold_no_password(tmp_path: Path) -> None:
    """The store's write path (save and streaming writer) redacts; the live history keeps its values."""
    h = _history_with_secrets()
    saved = save_jsonl(h, tmp_path / "h.jsonl").read_text()
    with HistoryWriter(h, tmp_path / "live.jsonl"):
        h.record("op.info", process="c", op_id=2, f="execute", error="lost; dsn password=streamsecret")
    streamed = (tmp_path / "live.jsonl").read_text()
    for text in (saved, streamed):
        assert not [s for s in (*SECRETS, "streamsecret") if s in text]
        for line in text.splitlines():
            json.loads(line)  # still valid JSON lines
    assert "streamsecret" not in streamed and "password=***" in streamed
    assert h.events("op.fail")[0].get("error").endswith("password=errsecret rejected")  # in memory: untouched
    reloaded = load_jsonl(tmp_path / "h.jsonl")
    assert reloaded.events("op.invoke")[0].get("value")["connstring"].startswith("Server=h;Password=***")


def test_timeline_holds_no_password() -> None:
    svg = render_svg(_history_with_secrets(), title="Server=h;Pwd=titlesecret")
    assert not [s for s in (*SECRETS, "titlesecret") if s in svg]
    assert svg.startswith("<svg")


def test_open_records_a_refused_string_without_its_password() -> None:
    """The issue's case: an unquoted password holding ';' reached the history's connstring and error
    fields past the old redaction. Now both are clean and the open is still recorded as refused."""
    h = History()
    client = ReferenceMirroringClient(history=h, process="p")
    with pytest.raises(ConnectionStringError) as info:
        client.open("Server=127.0.0.1,1;Database=app;Password=xq7;zk9")
    invoke, fail = h.events("op.invoke")[0], h.events("op.fail")[0]
    recorded = json.dumps([invoke.fields, fail.fields, str(info.value)])
    assert "xq7" not in recorded and "zk9" not in recorded, recorded
    assert fail.get("error").startswith("ConnectionStringError")


@pytest.mark.parametrize("port", ["²", "9" * 5000, "0", "65536", "-1", "٣", " "])
def test_bad_port_is_a_connection_string_error_and_the_open_is_recorded(port: str) -> None:
    h = History()
    client = ReferenceMirroringClient(history=h, process="p")
    with pytest.raises(ConnectionStringError) as info:
        client.open(f"Server=127.0.0.1,{port};Database=app")
    assert isinstance(info.value, ConfigError) and "1..65535" in str(info.value)
    assert len(str(info.value)) < 300  # one readable line, even for 5,000 digits
    assert [e.type for e in h.events()] == ["op.invoke", "op.fail"]


def test_allure_results_hold_no_password(pytester: pytest.Pytester) -> None:
    """Everything allure-pytest writes - failure messages and traces, captured output and logs, a test's
    own attachments - and the harness's history attachment pass through the redaction."""
    pytester.makepyfile('''
import logging, allure, pytest

@pytest.mark.rule("DUR-1")
def test_leaky(history):
    history.record("op.fail", process="c", op_id=1, f="open", error="password=histsecret")
    print("stdout dsn: host=h password=outsecret")
    logging.getLogger("x").warning("log dsn: postgresql://u:logsecret@h/db")
    allure.attach("Server=h;Pwd=attsecret;Database=d", name="conn", attachment_type=allure.attachment_type.TEXT)
    allure.attach('{"password": "jsonsecret"}', name="cfg", attachment_type=allure.attachment_type.JSON)
    dsn = "host=h user=app password=failsecret"
    assert dsn == "", dsn
''')
    result = pytester.runpytest_subprocess("--alluredir", "res", "--history-dir", "hist", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    texts = {p.name: p.read_text(errors="replace") for d in ("res", "hist") for p in (pytester.path / d).iterdir()}
    found = {name: re.findall(r"\w+secret", t) for name, t in texts.items() if re.search(r"\w+secret", t)}
    assert not found, found
    joined = "\n".join(texts.values())
    assert "password=***" in joined and "Pwd=***" in joined  # the redacted texts are there
    for name, text in texts.items():
        if name.endswith(".json"):
            json.loads(text)  # still valid JSON
