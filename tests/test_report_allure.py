"""Allure helpers (labels, categories, environment) and the report builder on a small results folder."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import MissingDependencyError
from harness.report import allure as fa
from harness.report.builder import allure_binary, build_report, embedded_files
from tests.support.checkout import repo_root

RULES = repo_root() / "docs" / "rules.md"  # generated from the shared RULEBOOK (scripts/sync_rulebook.py)
# The Allure CLI is installed by `make setup` (scripts/setup.sh); a missing one fails these tests.


def test_labels_for_a_mirroring_test() -> None:
    labels = fa.labels_for_rules(["MIR-5", "OBS-1"])
    assert labels["epic"] == "Mirroring (SQL Server)"
    assert labels["features"] == ["MIR - database mirroring client", "OBS - observability"]
    assert labels["stories"] == ["MIR-5 Retry time schedule", "OBS-1 Harness error is not a violation"]
    assert labels["severity"] == "critical"
    assert labels["links"][0] == (fa.rule_link("MIR-5"), "MIR-5 Retry time schedule")
    assert fa.rule_link("MIR-5").endswith("docs/rules.md#mir-5")
    assert fa.labels_for_rules([]) == {}


@pytest.mark.parametrize("rule, epic", [("PER-2", "Persistent connections (PolarProxy)"),
                                        ("ACR-3", "Automatic client reroute (DB2)"),
                                        ("ICM-6", "Internet Cluster Manager (Domino)"),
                                        ("LPQ-4", "libpq multi-host rules (PostgreSQL drivers)"),
                                        ("DUR-1", "Cross-cutting"), ("OBS-1", "Cross-cutting")])
def test_epic_per_profile(rule: str, epic: str) -> None:
    assert fa.labels_for_rules([rule])["epic"] == epic


def test_rule_link_base_can_be_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fa.RULEBOOK_URL_ENV, "https://example.org/RULEBOOK.md")
    assert fa.rule_link("PER-10") == "https://example.org/RULEBOOK.md#per-10"


def test_rule_titles_table_has_every_family_range() -> None:
    expected = {f"{fam}-{n}" for fam, count in (("MIR", 13), ("PER", 10), ("ACR", 9), ("ICM", 7),
                                                ("LPQ", 6), ("APP", 5), ("DUR", 1), ("OBS", 1))
                for n in range(1, count + 1)}
    assert set(fa.RULE_TITLES) == expected and all(fa.RULE_TITLES.values())
    assert set(fa.RULE_SEVERITY) <= expected


def test_rule_titles_cover_every_rulebook_id() -> None:
    ids = set(re.findall(r"\*\*((?:MIR|PER|ACR|ICM|LPQ|APP|DUR|OBS)-\d+) ", RULES.read_text()))
    assert len(ids) == 52
    assert ids == set(fa.RULE_TITLES)


def test_rule_violation_category_regex_matches_what_allure_pytest_writes() -> None:
    regex = re.compile(fa.CATEGORIES[0]["messageRegex"])
    assert regex.fullmatch("harness.errors.RuleViolation: MIR-5: expected 1.2 s;\nobserved 3 s")
    assert regex.fullmatch("DUR-1: expected every write")
    assert regex.fullmatch("ORDERS-12: a user rule's violation")
    assert not regex.fullmatch("AssertionError: assert left == right")
    assert fa.CATEGORIES[-1] == {**fa.CATEGORIES[-1], "name": "Harness errors", "matchedStatuses": ["broken"]}


def test_environment_and_categories_files(tmp_path: Path) -> None:
    env = fa.collect_environment("local", "postgres", "mirroring/demo", "1.2",
                                 extra={"engine.version": "PG 15"})
    assert env["engine.version"] == "PG 15" and env["client"] == "mirroring/demo"
    for key in ("backend", "engine", "fault_proxy", "fault_proxy.version", "client.version",
                "harness.revision", "machine"):
        assert env[key]
    fa.write_environment(tmp_path, {"a key": "x=y: z\\w", "n": None})
    assert (tmp_path / "environment.properties").read_text() == "a_key=x\\=y\\: z\\\\w\n"
    fa.write_categories(tmp_path)
    assert json.loads((tmp_path / "categories.json").read_text()) == fa.CATEGORIES
    (tmp_path / "categories.json").write_text("[]")
    fa.write_categories(tmp_path, overwrite=False)
    assert (tmp_path / "categories.json").read_text() == "[]"


def _result(folder: Path, name: str, status: str, message: str = "") -> None:
    rid = str(uuid.uuid4())
    data = {"uuid": rid, "historyId": name, "testCaseId": name, "name": name, "fullName": f"suite#{name}",
            "status": status, "statusDetails": {"message": message} if message else {},
            "start": 1_700_000_000_000, "stop": 1_700_000_000_500,
            "labels": [{"name": "suite", "value": "demo"},
                       {"name": "epic", "value": "Mirroring (SQL Server)"}]}
    (folder / f"{rid}-result.json").write_text(json.dumps(data))


def _results(tmp_path: Path) -> Path:
    res = tmp_path / "allure-results"
    res.mkdir()
    _result(res, "test_alternates_partners", "passed")
    _result(res, "test_retry_schedule", "failed",
            "harness.errors.RuleViolation: MIR-5: expected 1.2 s; observed 3 s")
    _result(res, "test_proxy_down", "broken", "harness.errors.ProxyError: proxy did not answer")
    return res


def test_single_file_report_embeds_tests_categories_and_keeps_the_trend(tmp_path: Path) -> None:
    res = _results(tmp_path)
    out = tmp_path / "report"
    index = build_report(res, out, environment={"backend": "local", "engine": "postgres"})
    assert index == (out / "index.html").resolve() and sorted(p.name for p in out.iterdir()) == ["index.html"]
    files = embedded_files(index)
    cases = [json.loads(v) for k, v in files.items() if k.startswith("data/test-cases/")]
    assert sorted(c["name"] for c in cases) == ["test_alternates_partners", "test_proxy_down",
                                                 "test_retry_schedule"]
    categories = json.loads(files["data/categories.json"])
    by_name = {c["name"]: [t["name"] for g in c["children"] for t in g["children"]]
               for c in categories["children"]}
    assert by_name == {"Rule violations": ["test_retry_schedule"], "Harness errors": ["test_proxy_down"]}
    env = json.loads(files["widgets/environment.json"])
    assert {"name": "backend", "values": ["local"]} in env
    # second build: the first report's trend is carried over (two points in the history trend)
    index = build_report(res, out)
    trend = json.loads(embedded_files(index)["history/history-trend.json"])
    assert len(trend) == 2
    assert (res / "history" / "history-trend.json").exists()


def test_report_command_prints_the_html_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = _results(tmp_path)
    out = tmp_path / "multi"
    assert main(["report", "--results", str(res), "--output", str(out), "--multi-file"]) == 0
    assert capsys.readouterr().out.strip() == str((out / "index.html").resolve())
    suites = (out / "data" / "suites.json").read_text()
    assert "test_retry_schedule" in suites and "test_alternates_partners" in suites
    assert "Rule violations" in (out / "data" / "categories.json").read_text()
    assert (out / "history").is_dir()
    assert (res / "categories.json").exists() and (res / "environment.properties").exists()


def test_missing_allure_names_the_setup_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FAILOVER_HARNESS_ALLURE", str(tmp_path / "no-allure"))
    with pytest.raises(MissingDependencyError, match="failover-harness setup"):
        allure_binary()
    res = _results(tmp_path)
    assert main(["report", "--results", str(res), "--output", str(tmp_path / "o")]) == 3


def test_missing_java_names_the_setup_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingDependencyError, match="Java is not installed.*failover-harness setup"):
        build_report(_results(tmp_path), tmp_path / "o")


def test_missing_results_folder_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--results", str(tmp_path / "none")]) == 2
    assert "no Allure results" in capsys.readouterr().err
