"""The pytest plugin through pytester: options, fixtures, verdict outcomes, Allure results, xdist."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SUITE = '''
import pytest
from harness.errors import ProxyError
from harness.rules import Verdict

@pytest.mark.rule("MIR-5")
def test_kept(check, history):
    history.record("op.ok", process="c1", op_id=1, f="open", value=None)
    assert check(Verdict("MIR-5", True, "1.2 s", "1.2 s"))[0].status == "kept"

@pytest.mark.rule("MIR-4", "DUR-1")
def test_violated(check, history):
    history.record("op.ok", process="w", op_id=1, f="write", value="k1")
    check([Verdict("MIR-4", True), Verdict("DUR-1", False, "every write kept", "k1 lost", evidence=[0])])

@pytest.mark.rule("PER-1")
def test_unknown(check):
    check(Verdict("PER-1", "unknown", observed="no switchover in the history"))

@pytest.mark.rule("DUR-1")
def test_harness_error(history):
    history.record("fault.start", fault="partition", id="f1", node="pg1", params={})
    raise ProxyError("toxiproxy did not answer on 127.0.0.1:8474")
'''


def results(alluredir: Path) -> dict[str, dict]:
    out = {}
    for path in alluredir.glob("*-result.json"):
        data = json.loads(path.read_text())
        out[data["name"]] = data
    return out


def labels(result: dict, name: str) -> list[str]:
    return [lab["value"] for lab in result["labels"] if lab["name"] == name]


@pytest.fixture(autouse=True)
def _no_demo_client_left() -> object:
    """In-process pytester runs register ``mirroring/demo`` in this process's registry: remove it, so
    no later test (the nightly plan) sees a client that does not exist."""
    yield
    from harness.clients.registry import unregister_client

    unregister_client("mirroring", "demo")


def test_options_parse_and_reach_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('''
        from harness.clients.registry import register_client
        register_client("mirroring", "demo", lambda **kwargs: "demo", replace=True)
    ''')
    pytester.makepyfile('''
        def test_opts(harness_options, client_spec):
            assert (harness_options.backend, harness_options.engine) == ("local", "postgres")
            assert harness_options.keep_on_failure is True
            assert client_spec == harness_options.client == "mirroring/demo"
            assert harness_options.worker == "main"
            assert harness_options.history_dir.name == "hist"
    ''')
    result = pytester.runpytest("--backend", "local", "--engine", "postgres", "--client", "mirroring/demo",
                                "--keep-on-failure", "--history-dir", "hist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert any("failover-harness: backend=local engine=postgres" in line for line in result.outlines)


@pytest.mark.parametrize(("option", "value", "reason"), [
    ("--backend", "compose", "backend 'compose': no Docker engine answers here"),
])
def test_unavailable_backend_or_engine_is_one_line_before_any_test(pytester: pytest.Pytester, option: str,
                                                                   value: str, reason: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The options no longer lie: a backend or engine that cannot run here (compose where no Docker
    engine answers; an engine not built) is refused at start-up, in one line, and no test runs (so
    nothing runs local processes under another name)."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    pytester.makepyfile('''
        def test_never_runs(harness_options):
            raise AssertionError("must not run")
    ''')
    result = pytester.runpytest(option, value, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and reason in errors[0] and "failover-harness:" in errors[0], errors
    assert "must not run" not in result.stdout.str()


def test_engine_mariadb_is_accepted(pytester: pytest.Pytester) -> None:
    """``--engine mariadb`` is built (docs/mariadb.md): accepted, and the header names it."""
    pytester.makepyfile('''
        def test_opts(harness_options):
            assert harness_options.engine == "mariadb"
    ''')
    result = pytester.runpytest("--engine", "mariadb", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert any("engine=mariadb" in line for line in result.outlines)


def test_defaults_and_bad_choice(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
        def test_opts(harness_options, client_spec):
            opts = harness_options
            assert (opts.backend, opts.engine, client_spec) == ("local", "postgres", None)
            assert harness_options.keep_on_failure is False
    ''')
    pytester.runpytest().assert_outcomes(passed=1)
    bad = pytester.runpytest("--backend", "docker")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in bad.stderr.lines if line] == [
        "ERROR: failover-harness: unknown backend 'docker'; use one of local, compose"]
    prefixed = pytester.runpytest("--fh-engine", "oracle")  # the prefixed name of the same option
    assert prefixed.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown engine 'oracle'" in prefixed.stderr.str()


def test_verdict_outcomes_and_saved_histories(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--history-dir", "hist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    out = result.stdout.str()
    assert "RuleViolation: DUR-1: expected every write kept; observed k1 lost" in out
    assert "VerdictUnknown: PER-1: verdict unknown" in out
    hist = pytester.path / "hist"
    saved = sorted(p.name.split("-")[0] for p in hist.glob("*.jsonl"))
    assert saved == ["test_suite.py_test_harness_error", "test_suite.py_test_kept",
                     "test_suite.py_test_violated"]
    assert len(list(hist.glob("*.svg"))) == 3
    violated = next(hist.glob("test_suite.py_test_violated-*.jsonl"))
    meta = json.loads(violated.read_text().splitlines()[0])["meta"]
    assert meta["outcome"] == "failed" and meta["rules"] == ["MIR-4", "DUR-1"]
    assert [v["status"] for v in meta["verdicts"]] == ["kept", "violated"]
    assert 'class="evidence-mark"' in violated.with_suffix(".svg").read_text()  # evidence event 0
    kept = json.loads(next(hist.glob("test_suite.py_test_kept-*.jsonl")).read_text().splitlines()[0])["meta"]
    assert kept["outcome"] == "passed" and kept["backend"] == "local"


def test_allure_statuses_labels_attachments_and_session_files(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("--alluredir", "res", "--history-dir", "hist",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    res = results(pytester.path / "res")
    assert {name: r["status"] for name, r in res.items()} == {
        "test_kept": "passed", "test_violated": "failed", "test_unknown": "broken",
        "test_harness_error": "broken"}
    violated = res["test_violated"]
    assert "DUR-1: expected every write kept" in violated["statusDetails"]["message"]
    assert labels(violated, "epic") == ["Mirroring (SQL Server)"]
    assert labels(violated, "feature") == ["MIR - database mirroring client", "DUR - durability"]
    assert labels(violated, "story") == ["MIR-4 Alternation", "DUR-1 No acknowledged write lost"]
    assert labels(violated, "severity") == ["blocker"]
    assert [link["url"].rsplit("/", 1)[-1] for link in violated["links"]] == ["rules.md#mir-4", "rules.md#dur-1"]
    assert [(s["name"], s["status"]) for s in violated["steps"]] == [
        ("MIR-4 Alternation: kept", "passed"), ("DUR-1 No acknowledged write lost: violated", "failed")]
    assert [(s["name"], s["status"]) for s in res["test_unknown"]["steps"]] == [
        ("PER-1 Keepalive on switchover: unknown", "broken")]
    assert labels(res["test_harness_error"], "epic") == ["Cross-cutting"]
    # history + timeline attached to the test itself: a passed test's windows as text, the whole
    # history of a failed or broken one compressed (docs/reports.md, "Report size")
    for name in ("test_kept", "test_violated", "test_harness_error"):
        attached = [(a["name"], a["type"]) for a in res[name].get("attachments", [])]
        whole = name != "test_kept"
        first = ("history.jsonl.gz (whole history)", "application/gzip") if whole else ("history.jsonl", "text/plain")
        assert attached == [first, ("history timeline", "image/svg+xml")], name
        source = pytester.path / "res" / res[name]["attachments"][0]["source"]
        text = gzip.decompress(source.read_bytes()).decode() if whole else source.read_text()
        assert json.loads(text.splitlines()[0])["meta"]["test"].endswith(name)
    assert not res["test_unknown"].get("attachments")  # it has no history fixture
    categories = json.loads((pytester.path / "res" / "categories.json").read_text())
    assert [c["name"] for c in categories][:1] == ["Rule violations"] and "Harness errors" in str(categories)
    env = (pytester.path / "res" / "environment.properties").read_text()
    for key in ("backend=local", "engine=postgres", "fault_proxy=", "client=", "harness.revision=",
                "machine="):
        assert key in env


def test_history_is_streamed_while_the_test_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
        import json
        def test_x(history, harness_options):
            history.record("op.ok", process="c1", op_id=1, f="write", value="k")
            (partial,) = harness_options.history_dir.glob("*.jsonl.partial")
            lines = partial.read_text().splitlines()
            assert json.loads(lines[1])["value"] == "k"
    ''')
    pytester.runpytest("--history-dir", "hist").assert_outcomes(passed=1)
    hist = pytester.path / "hist"
    assert not list(hist.glob("*.partial")) and len(list(hist.glob("*.jsonl"))) == 1


def test_labels_survive_a_failing_session_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
        import pytest
        from harness.errors import NodeStartError
        @pytest.fixture(scope="session")
        def pair():
            raise NodeStartError("postgres did not start: port in use")
        @pytest.mark.rule("PER-1")
        def test_x(pair):
            pass
    ''')
    result = pytester.runpytest_subprocess("--alluredir", "res", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    (res,) = results(pytester.path / "res").values()
    assert res["status"] == "broken"
    assert labels(res, "epic") == ["Persistent connections (PolarProxy)"]
    assert labels(res, "story") == ["PER-1 Keepalive on switchover"]


def test_no_allure_files_without_alluredir(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest("--history-dir", "hist").assert_outcomes(passed=1, failed=3)
    assert not list(pytester.path.rglob("*-result.json"))
    assert not list(pytester.path.rglob("categories.json"))


def test_unknown_client_is_a_clear_error_and_registered_ones_resolve(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('''
        from harness.clients.registry import register_client
        def make_demo(**kwargs):
            return ("demo client", kwargs)
        register_client("mirroring", "demo", make_demo, replace=True)
    ''')
    pytester.makepyfile(clientmod='''
        def factory(**kwargs):
            return "imported"
    ''')
    pytester.makepyfile(test_client='''
        import pytest
        @pytest.mark.rule("MIR-1")
        def test_client(client_factory, client_spec):
            if client_spec.endswith("demo"):
                assert client_factory()[0] == "demo client"
            else:
                assert client_factory() == "imported"
    ''')
    pytester.syspathinsert()
    pytester.runpytest("--client", "demo").assert_outcomes(passed=1)
    pytester.runpytest("--client", "clientmod:factory").assert_outcomes(passed=1)
    bad = pytester.runpytest("--client", "nosuch")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR  # refused at start-up, before any test
    text = bad.stderr.str()
    assert re.search(r"failover-harness: unknown client 'nosuch'; known clients: [^\n]*\bmirroring/demo\b", text)
    assert "passed" not in bad.stdout.str() and "Traceback" not in text
    missing = pytester.runpytest("--client", "nomodule_xyz:make")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot import module 'nomodule_xyz'" in missing.stderr.str()
    wrong_profile = pytester.runpytest("--client", "persistent/demo")
    assert wrong_profile.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown client 'demo' for profile persistent" in wrong_profile.stderr.str()


def test_unknown_client_is_refused_even_when_no_test_of_its_profile_is_collected(pytester: pytest.Pytester) -> None:
    """No silent acceptance (OBS-1): a DUR-only suite with ``--client nosuch`` used to pass and credit
    ``client: nosuch`` in its history; now nothing runs and the one error line names the known clients."""
    pytester.makepyfile('''
        import pytest
        @pytest.mark.rule("DUR-1")
        def test_cross_cutting(history):
            history.record("op.ok", f="write", value=1)
    ''')
    result = pytester.runpytest("--client", "nosuch", "--history-dir", "hist", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and "unknown client 'nosuch'" in errors[0], errors
    assert not (pytester.path / "hist").exists()
    pytester.runpytest("--client", "reference", "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_bad_rule_id_in_marker_is_an_error_not_a_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
        import pytest
        @pytest.mark.rule("MIR-99")
        def test_x():
            pass
    ''')
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    assert "unknown rule ID 'MIR-99'" in result.stdout.str()


def test_check_warns_about_uncited_rules(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
        import pytest
        from harness.rules import Verdict
        @pytest.mark.rule("MIR-4")
        def test_x(check):
            check(Verdict("MIR-5", True))
    ''')
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "checks MIR-5 but cites only MIR-4" in result.stdout.str()


def test_check_rejects_non_verdicts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
        def test_x(check):
            check([True])
    ''')
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    assert "check() takes Verdict objects" in result.stdout.str()


def test_xdist_two_workers_per_test_files_and_one_set_of_session_files(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeconftest('''
        import pytest
        from harness.plugin import add_environment
        @pytest.fixture(autouse=True)
        def _env(request):
            add_environment(request.config, engine__version="PostgreSQL 15.99 (fixture)")
    ''')
    result = pytester.runpytest_subprocess("-n", "2", "--alluredir", "res", "--history-dir", "hist",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    assert len(list((pytester.path / "hist").glob("*.jsonl"))) == 3
    assert {r["status"] for r in results(pytester.path / "res").values()} == {"passed", "failed", "broken"}
    res = pytester.path / "res"
    assert (res / "categories.json").exists()
    env = (res / "environment.properties").read_text()
    assert "engine.version=PostgreSQL 15.99 (fixture)" in env  # merged from the workers
    assert not list(res.glob(".failover-harness-env-*"))
    workers = {json.loads(p.read_text().splitlines()[0])["meta"]["worker"]
               for p in (pytester.path / "hist").glob("*.jsonl")}
    assert workers <= {"gw0", "gw1"} and workers
