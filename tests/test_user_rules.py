"""User rules: a checker registered with ``harness.rules.registry.rule`` is accepted by
``@pytest.mark.rule``, its verdicts pass and fail the test as it says and are labelled like built-in
ones; ``@pytest.mark.bounds`` reaches it (printed in the verdict); ``failover-harness check --plugin``
re-runs it offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.cli import main as cli_main
from harness.errors import ConfigError
from harness.history.core import History
from harness.history.store import save_jsonl
from harness.rules import registry
from harness.rules.verdict import Verdict

pytest_plugins = ["pytester"]

USER_RULES = '''
from harness.rules.registry import rule
from harness.rules.verdict import Verdict


@rule("ORDERS-1", title="Every order written once")
def orders_written_once(events, *, max_duplicates: int = 0) -> Verdict:
    """ORDERS-1: no order key written twice (at most max_duplicates)."""
    keys = [e.get("value") for e in events if e.type == "op.ok" and e.get("f") == "write"]
    dups = len(keys) - len(set(keys))
    return Verdict("ORDERS-1", dups <= max_duplicates, expected=f"at most {max_duplicates} duplicate(s)",
                   observed=f"{dups} duplicate(s)", evidence=[])
'''

SUITE = '''
import pytest
from harness.plugin.options import bounds_of
from harness.rules import registry


@pytest.mark.rule("ORDERS-1")
def test_kept(check, history):
    history.record("op.ok", process="w", op_id=1, f="write", value=1)
    check(registry.check("ORDERS-1", history.events()))


@pytest.mark.rule("ORDERS-1")
def test_broken_rule(check, history):
    for i in (1, 2):
        history.record("op.ok", process="w", op_id=i, f="write", value=7)
    check(registry.check("ORDERS-1", history.events()))


@pytest.mark.rule("ORDERS-1")
@pytest.mark.bounds(max_duplicates=1)
def test_bounded(check, history, request):
    for i in (1, 2):
        history.record("op.ok", process="w", op_id=i, f="write", value=7)
    verdict = check(registry.check("ORDERS-1", history.events(), **bounds_of(request.node)))[0]
    assert verdict.details["params"] == {"max_duplicates": 1}
    assert "at most 1 duplicate" in verdict.expected
'''


def test_user_rule_passes_and_fails_as_its_checker_says(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("import user_rules  # noqa: F401\n")
    pytester.makepyfile(user_rules=USER_RULES, test_orders=SUITE)
    result = pytester.runpytest_subprocess("--history-dir", "hist", "--alluredir", "res", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*RuleViolation: ORDERS-1*1 duplicate(s)*"])
    labels = {}
    for path in (pytester.path / "res").glob("*-result.json"):
        data = json.loads(path.read_text())
        labels[data["name"]] = (data["status"], {(x["name"], x["value"]) for x in data["labels"]})
    status, found = labels["test_broken_rule"]
    assert status == "failed" and ("story", "ORDERS-1 Every order written once") in found
    assert ("epic", "User rules") in found and labels["test_kept"][0] == "passed"


def test_unregistered_user_id_is_a_one_line_error_naming_the_decorator(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
        import pytest

        @pytest.mark.rule("NOPE-1")
        def test_x(check):
            pass
    ''')
    # a subprocess: an in-process run would drop the checker modules it imported from sys.modules
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--history-dir", "hist")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown rule ID 'NOPE-1'*harness.rules.registry.rule*"])


def test_check_cli_runs_a_user_rule_offline_with_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "fh_user_rules_cli.py").write_text(USER_RULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    h = History()
    for i in (1, 2):
        h.record("op.ok", process="w", op_id=i, f="write", value=3)
    save_jsonl(h, tmp_path / "h.jsonl")
    try:
        code = cli_main(["check", str(tmp_path / "h.jsonl"), "--rules", "ORDERS-1", "--plugin", "fh_user_rules_cli"])
        assert code == 1 and "ORDERS-1" in capsys.readouterr().out
        kept = cli_main(["check", str(tmp_path / "h.jsonl"), "--rules", "ORDERS-1", "--param", "max_duplicates=1"])
        assert kept == 0
    finally:
        registry.unregister("ORDERS-1")
        sys.modules.pop("fh_user_rules_cli", None)


def test_rule_decorator_rejects_a_malformed_id_and_a_taken_one() -> None:
    with pytest.raises(ConfigError, match="FAMILY-N"):
        registry.rule("not an id")
    with pytest.raises(ConfigError, match="already has a checker"):
        registry.rule("APP-1")(lambda events: Verdict("APP-1", True))


def test_load_user_rules_names_a_missing_module() -> None:
    with pytest.raises(ConfigError, match="no_such_user_rules"):
        registry.load_user_rules(["no_such_user_rules"])


def test_bounds_take_keywords_the_closest_marker_winning(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
        import pytest
        from harness.plugin.options import bounds_of

        pytestmark = pytest.mark.bounds(recovery_s=5, failed_requests=3)

        @pytest.mark.bounds(recovery_s=2)
        def test_closest(request):
            assert bounds_of(request.node) == {"recovery_s": 2, "failed_requests": 3}

        @pytest.mark.bounds(2)
        def test_positional(request):
            bounds_of(request.node)
    ''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--history-dir", "hist")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*bounds takes keyword arguments only*"])


def test_rules_named_in_the_environment_are_loaded_by_check_and_by_the_plugin(tmp_path: Path) -> None:
    import os
    import subprocess

    (tmp_path / "fh_env_rules.py").write_text(USER_RULES)
    h = History()
    h.record("op.ok", process="w", op_id=1, f="write", value=3)
    save_jsonl(h, tmp_path / "h.jsonl")
    env = {**os.environ, "FAILOVER_HARNESS_RULES": "fh_env_rules",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    fh = [sys.executable, "-m", "harness.cli"]
    out = subprocess.run(fh + ["check", str(tmp_path / "h.jsonl"), "--rules", "ORDERS-1"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.startswith("ORDERS-1 KEPT"), out.stdout + out.stderr
    (tmp_path / "test_env_rule.py").write_text(
        "import pytest\n\n@pytest.mark.rule('ORDERS-1')\ndef test_cited(check):\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(tmp_path / "test_env_rule.py"), "--history-dir", str(tmp_path / "hist")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-2000:]
