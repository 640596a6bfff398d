"""The app matrix: per-fault figures (APP-2 failed requests, APP-1 recovery) collected from saved
histories and shown in a second table; docs/rules.md keeps the project's APP rules through a
rulebook sync."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from harness.history import History
from harness.history.store import save_jsonl
from harness.report.matrix import all_rules, build_matrix, collect_cells, collect_figures, render_markdown
from harness.rules.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent


def saved(folder: Path, test: str, verdicts: list[Verdict]) -> None:
    h = History(meta={"test": f"suites/app/test_app_faults.py::{test}", "rules": [v.rule_id for v in verdicts],
                      "outcome": "passed", "verdicts": [v.to_dict() for v in verdicts]})
    save_jsonl(h, folder / f"{test}.jsonl")


def test_figures_per_fault_and_pool_in_a_second_table(tmp_path: Path) -> None:
    for client, took, failed in (("a", 0.35, 0), ("b", 1.5, 4)):
        (tmp_path / client).mkdir()
        saved(tmp_path / client, "test_pool_across_a_switchover", [
            Verdict("APP-1", True, details={"per_fault": [{"fault": "switchover", "recovery_s": took}]}),
            Verdict("APP-2", True, details={"per_fault": [{"fault": "switchover", "failed": failed, "requests": 90}]}),
            Verdict("APP-4", failed == 0, "no stale", f"{failed} stale")])
    figures = {c: collect_figures(tmp_path / c) for c in ("a", "b")}
    assert figures["b"] == {"switchover": "4/90 failed · 1.50 s"}
    columns = {c: collect_cells(tmp_path / c, "APP") for c in ("a", "b")}
    text = render_markdown(build_matrix("app", columns, all_rules(columns), figures=figures))
    assert "## Figures per fault" in text
    assert "| switchover | 0/90 failed · 0.35 s | 4/90 failed · 1.50 s |" in text
    assert "**violated**" in text  # APP-4 of b


def test_unknown_recovery_is_shown_as_such_and_other_profiles_have_no_figures(tmp_path: Path) -> None:
    saved(tmp_path, "test_pool_across_a_failover", [
        Verdict("APP-1", "unknown", details={"per_fault": [{"fault": "failover", "recovery_s": None}]})])
    saved(tmp_path, "test_other", [Verdict("MIR-4", True)])
    assert collect_figures(tmp_path) == {"failover": "?/? failed · recovery ?"}
    assert "figures" not in build_matrix("mirroring", {}, [])


def test_rulebook_sync_keeps_the_project_rules(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("sync_rulebook", ROOT / "scripts" / "sync_rulebook.py")
    sync = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(sync)
    text = (ROOT / "docs" / "rules.md").read_text()
    kept = sync.project_rules(text)
    assert "**APP-1 Recovery bound.**" in kept and "**APP-5 Pool size respected.**" in kept
    assert sync.project_rules("no markers") == ""
    # a sync into a copy of the repository keeps APP before the cross-cutting section
    (tmp_path / "docs").mkdir()
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "docs" / "rules.md", tmp_path / "docs" / "rules.md")
    rulebook = tmp_path / "RULEBOOK.md"
    rulebook.write_text("# Rulebook\n\n- **MIR-1 Initial partner first.** text\n\n## Cross-cutting checks\n\n"
                        "- **DUR-1 No acknowledged write lost.** text\n")
    sync.ROOT = tmp_path
    argv = sys.argv
    sys.argv = ["sync_rulebook.py", str(rulebook)]
    try:
        sync.main()
    finally:
        sys.argv = argv
    out = (tmp_path / "docs" / "rules.md").read_text()
    assert out.index("APP-1 Recovery bound") < out.index("## Cross-cutting") < out.index("DUR-1")
    assert '<a id="mir-1"></a>' in out and '<a id="app-1"></a>' in out
