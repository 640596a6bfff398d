"""The LPQ matrix cells: *not offered* only where nothing judged the rule, a row per scenario, the
driver under each column; a link from each status to the history that decided it in the reports
folder's table, none in the page written into the docs (which says how to regenerate the histories)."""

from __future__ import annotations

import argparse

from harness.cli.matrix_cmds import matrix_command
from harness.history.core import History
from harness.history.store import save_jsonl
from harness.report.matrix import (
    build_matrix,
    collect_cells,
    drivers_of,
    evidence_section,
    render_markdown,
    write_doc,
)


def saved(folder, name: str, verdicts: list[dict], drivers: dict | None = None) -> None:
    h = History(meta={"test": f"suites/lpq/{name}", "rules": sorted({v["rule_id"] for v in verdicts}),
                      "outcome": "passed", "verdicts": verdicts, "drivers": drivers or {}})
    save_jsonl(h, folder / f"{name}.jsonl")


def verdict(rule: str, valid, process: str, observed: str = "x", not_offered: str | None = None) -> dict:
    details = {"params": {"process": process}, **({"not_offered": not_offered} if not_offered else {})}
    status = "unknown" if valid == "unknown" else {True: "kept", False: "violated"}[valid]
    return {"rule_id": rule, "valid": valid, "status": status, "observed": observed, "expected": "e",
            "details": details}


def test_cells_scenarios_not_offered_and_links(tmp_path) -> None:
    h = tmp_path / "h"
    h.mkdir()
    saved(h, "a", [verdict("LPQ-4", True, "standby-first-any"),
                   verdict("LPQ-4", False, "standby-first-read-write", observed="landed on n2; 25006")],
          drivers={"standby-first-any": "postgres 3.4.9"})
    saved(h, "b", [verdict("LPQ-6", "unknown", "random-order", not_offered="postgres has no random order")])
    cells = collect_cells(h, "LPQ", scenarios=True)
    assert cells["LPQ-4"]["status"] == "violated" and "25006" in cells["LPQ-4"]["evidence"]
    assert cells["LPQ-4 · standby-first-any"]["status"] == "kept"
    assert cells["LPQ-6"]["status"] == "not offered" and cells["LPQ-6"]["evidence"] == "postgres has no random order"
    assert cells["LPQ-4"]["history"].endswith("a.jsonl")
    assert drivers_of(h) == "postgres 3.4.9"
    matrix = build_matrix("lpq", {"postgres-js": cells}, sorted(cells), {"postgres-js": "postgres 3.4.9"})
    md = render_markdown(matrix)
    assert "postgres 3.4.9" in md and "↳ standby-first-any" in md
    linked = render_markdown(matrix, links_from=h)  # the reports folder's table links each status
    assert "[**violated**](a.jsonl): landed on n2; 25006" in linked
    evidence = evidence_section("failover-harness matrix --profile lpq --clients postgres-js --doc docs/matrix-lpq.md",
                                "reports/matrix/lpq/<client>/histories/", "make matrix")
    doc = write_doc(matrix, tmp_path / "docs" / "matrix-lpq.md", evidence=evidence)
    text = doc.read_text()
    assert "| LPQ-4 | **violated**: landed on n2; 25006 (expected e; suites/lpq/a) |" in text  # no link
    assert ".jsonl" not in text and "](" not in text
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["matrix-lpq.md"]  # no history copied
    assert text.rstrip().endswith(evidence.rstrip())
    assert "## Regenerating the evidence" in text and "`make matrix`" in text
    assert "`reports/matrix/lpq/<client>/histories/`" in text and "nightly-histories" in text


def test_doc_names_the_command_that_regenerates_it() -> None:
    args = argparse.Namespace(profile="persistent", markers="not slow", engine="mariadb",
                              doc="docs/matrix-persistent-mariadb.md")
    assert matrix_command(args, ["direct", "reference"]) == (
        "failover-harness matrix --profile persistent --clients direct,reference -m 'not slow' --engine mariadb "
        "--doc docs/matrix-persistent-mariadb.md")


def test_a_kept_verdict_beats_not_offered(tmp_path) -> None:
    saved(tmp_path, "a", [verdict("LPQ-1", "unknown", "s1", not_offered="no"), verdict("LPQ-1", True, "s2")])
    assert collect_cells(tmp_path, "LPQ")["LPQ-1"]["status"] == "kept"
