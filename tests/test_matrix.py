"""The conformance matrix built from saved histories: kept / violated (with evidence) / unknown, and a
harness error never shown as a violation (OBS-1)."""

from __future__ import annotations

from harness.history import History
from harness.history.store import save_jsonl
from harness.report.matrix import all_rules, build_matrix, collect_cells, render_html, render_markdown
from harness.rules.verdict import UNKNOWN, Verdict


def saved(tmp_path, name, rules, outcome, verdicts):
    h = History(meta={"test": f"suites/x.py::{name}", "rules": rules, "outcome": outcome,
                      "verdicts": [v.to_dict() for v in verdicts]})
    save_jsonl(h, tmp_path / f"{name}.jsonl")


def test_cells_from_histories(tmp_path):
    saved(tmp_path, "t1", ["MIR-4", "MIR-5"], "failed",
          [Verdict("MIR-4", True), Verdict("MIR-5", False, "0.32 s ±0.02", "attempt 3 held 2.00 s")])
    saved(tmp_path, "t2", ["MIR-5"], "passed", [Verdict("MIR-5", True)])
    saved(tmp_path, "t3", ["MIR-7"], "error", [])  # harness error before any verdict
    saved(tmp_path, "t4", ["MIR-9"], "broken", [Verdict("MIR-9", UNKNOWN, observed="no open")])
    saved(tmp_path, "t5", ["DUR-1"], "passed", [Verdict("DUR-1", True)])
    cells = collect_cells(tmp_path, "MIR")
    assert set(cells) == {"MIR-4", "MIR-5", "MIR-7", "MIR-9"}
    assert cells["MIR-4"]["status"] == "kept"
    assert cells["MIR-5"]["status"] == "violated" and "attempt 3 held 2.00 s" in cells["MIR-5"]["evidence"]
    assert cells["MIR-5"]["tests"] == ["suites/x.py::t1", "suites/x.py::t2"]
    assert cells["MIR-7"]["status"] == "unknown" and "no verdict" in cells["MIR-7"]["evidence"]
    assert cells["MIR-9"]["status"] == "unknown"


def test_rendered_matrix_shows_both_clients(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    saved(tmp_path / "a", "t1", ["MIR-10", "MIR-4"], "passed", [Verdict("MIR-10", True), Verdict("MIR-4", True)])
    saved(tmp_path / "b", "t1", ["MIR-4"], "failed", [Verdict("MIR-4", False, "alternation", "B never tried")])
    columns = {"ref": collect_cells(tmp_path / "a"), "other": collect_cells(tmp_path / "b")}
    matrix = build_matrix("mirroring", columns, all_rules(columns))
    assert matrix["rules"] == ["MIR-4", "MIR-10"]  # numeric order
    md = render_markdown(matrix)
    assert "| rule | ref | other |" in md
    assert "| MIR-4 | kept | **violated**: B never tried" in md
    assert "| MIR-10 | kept | – |" in md
    page = render_html(matrix)
    assert "<th>other</th>" in page and "B never tried" in page
