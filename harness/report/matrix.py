"""Conformance matrix: which client keeps which rule. Built from the histories a suite run saved
(each history's meta holds the test's cited rules, its outcome and its checked verdicts).

A cell is ``kept`` (every verdict for that rule kept), ``violated`` (any verdict violated; the first
one's expected/observed is the one-line evidence), ``unknown`` (verdicts unknown, or the rule was
cited but no verdict came - a harness error is never shown as a violation, OBS-1) or ``not offered``
(the client declares it has no way to express the scenario: ``details.not_offered``; only when no
other verdict judged the rule). With ``scenarios=True`` each verdict's ``params.process`` (the
scenario's client process) also gets a row of its own under the rule (``LPQ-4 · standby-first-…``).
Each cell names the saved history that decided it (``history``), linked from the reports folder's Markdown
table; the page written into the docs (:func:`write_doc`) has no links: histories are run data."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.history.store import read_jsonl

STATUS_ORDER = {"violated": 0, "unknown": 1, "kept": 2, "not offered": 3, None: 9}


def verdict_status(v: dict[str, Any]) -> str:
    """A saved verdict's matrix word: ``kept`` / ``violated`` / ``unknown`` / ``not offered``."""
    if (v.get("details") or {}).get("not_offered"):
        return "not offered"
    return v.get("status") or {True: "kept", False: "violated"}.get(v.get("valid"), "unknown")


def collect_cells(histories_dir: Path, family: str | None = None, *,
                  scenarios: bool = False) -> dict[str, dict[str, Any]]:
    """Per rule ID: ``{"status", "evidence", "tests", "history"}`` from every ``*.jsonl`` history in a
    folder (only rule IDs starting with ``family`` when given, e.g. ``"MIR"``); with ``scenarios``
    also per ``rule · scenario``."""
    cells: dict[str, dict[str, Any]] = {}

    def cell(rule: str) -> dict[str, Any]:
        return cells.setdefault(rule, {"status": None, "evidence": "", "tests": [], "verdicts": 0, "history": None})

    def judge(key: str, status: str, evidence: str, test: str, path: Path) -> None:
        c = cell(key)
        c["verdicts"] += 1
        if test not in c["tests"]:
            c["tests"].append(test)
        if STATUS_ORDER[status] < STATUS_ORDER[c["status"]]:
            c["status"], c["evidence"], c["history"] = status, evidence, str(path)

    for path in sorted(Path(histories_dir).glob("*.jsonl")):
        meta, _ = read_jsonl(path)
        test = meta.get("test", path.stem)
        verdicts = meta.get("verdicts", [])
        judged = set()
        for v in verdicts:
            rule = v["rule_id"]
            if family and not rule.startswith(family):
                continue
            judged.add(rule)
            status = verdict_status(v)
            evidence = f"{v.get('observed') or ''} (expected {v.get('expected') or '-'}; {test})" \
                if status != "not offered" else str(v["details"]["not_offered"])
            judge(rule, status, evidence, test, path)
            process = ((v.get("details") or {}).get("params") or {}).get("process")
            if scenarios and process:
                judge(f"{rule} · {process}", status, evidence, test, path)
        for rule in meta.get("rules", []):
            if (family and not rule.startswith(family)) or rule in judged:
                continue
            c = cell(rule)
            if test not in c["tests"]:
                c["tests"].append(test)
            if c["status"] in (None, "kept", "not offered"):
                c["status"] = "unknown"
                c["evidence"] = f"no verdict: test {meta.get('outcome', '?')} before checking ({test})"
                c["history"] = str(path)
    for c in cells.values():
        c["status"] = c["status"] or "unknown"
    return cells


def _scenario_of(test: str) -> str:
    """``suites/app/test_app_faults.py::test_pool_across_a_switchover`` -> ``switchover``."""
    name = test.rpartition("::")[2]
    for prefix in ("test_pool_across_a_", "test_pool_across_", "test_"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return name.replace("_", " ")


def collect_figures(histories_dir: Path) -> dict[str, str]:
    """Per scenario (the test, e.g. ``switchover``): the figures of its APP-2 and APP-1 verdicts -
    ``failed/requests`` per fault and the recovery in seconds - as one cell text."""
    out: dict[str, str] = {}
    for path in sorted(Path(histories_dir).glob("*.jsonl")):
        meta, _ = read_jsonl(path)
        by_rule = {v["rule_id"]: (v.get("details") or {}) for v in meta.get("verdicts", [])}
        if "APP-1" not in by_rule and "APP-2" not in by_rule:
            continue
        failed = by_rule.get("APP-2", {}).get("per_fault") or []
        recovery = by_rule.get("APP-1", {}).get("per_fault") or []
        parts = []
        for i in range(max(len(failed), len(recovery))):
            f = failed[i] if i < len(failed) else {}
            r = recovery[i] if i < len(recovery) else {}
            took = r.get("recovery_s")
            parts.append(f"{f.get('failed', '?')}/{f.get('requests', '?')} failed · "
                         + (f"{took:.2f} s" if isinstance(took, int | float) else "recovery ?"))
        out[_scenario_of(str(meta.get("test", path.stem)))] = "; ".join(parts) or "no fault"
    return out


def build_matrix(profile: str, columns: dict[str, dict[str, dict[str, Any]]], rules: Iterable[str],
                 drivers: dict[str, str] | None = None, figures: dict[str, dict[str, str]] | None = None) -> dict:
    """The matrix document: ``{"profile", "rules", "clients": {client: {rule: cell}}, "drivers"}``
    (``drivers``: each client's driver and version, shown under its name; ``figures``: per client,
    per scenario, the measured figures shown in a second table)."""
    doc = {"profile": profile, "rules": list(rules), "clients": columns, "drivers": dict(drivers or {})}
    if figures:
        doc["figures"] = figures
    return doc


def _sort_key(rule: str) -> tuple[str, int, str]:
    head, _, scenario = rule.partition(" · ")
    family, _, number = head.partition("-")
    return family, int(number) if number.isdigit() else 0, scenario


def all_rules(columns: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Every rule ID that appears in any client's column, in rulebook order."""
    return sorted({r for col in columns.values() for r in col}, key=_sort_key)


def _link(c: dict[str, Any], text: str, links_from: Path | None) -> str:
    if not c.get("history") or links_from is None:
        return text
    try:
        target = os.path.relpath(c["history"], links_from)
    except ValueError:
        target = c["history"]
    return f"[{text}]({target})"


def render_markdown(matrix: dict, links_from: Path | None = None) -> str:
    """A Markdown table: rules as rows, clients as columns (with their drivers' versions), a one-line
    evidence per cell that is not kept; each status links to the saved history that decided it
    (paths relative to ``links_from``, the folder the table is written to)."""
    clients = list(matrix["clients"])
    drivers = matrix.get("drivers") or {}
    heads = [f"{c}<br><small>{drivers[c]}</small>" if drivers.get(c) else c for c in clients]
    lines = [f"# Conformance matrix: {matrix['profile']}", "",
             "| rule | " + " | ".join(heads) + " |", "|---|" + "---|" * len(clients)]
    for rule in matrix["rules"]:
        row = []
        for client in clients:
            c = matrix["clients"][client].get(rule)
            if c is None:
                row.append("–")
            elif c["status"] == "kept":
                row.append(_link(c, "kept", links_from))
            else:
                text = c["evidence"][:160].replace("|", "/").replace("\n", " ")
                row.append(f"{_link(c, '**' + c['status'] + '**', links_from)}: {text}")
        shown = rule if " · " not in rule else f"&nbsp;&nbsp;↳ {rule.split(' · ', 1)[1]}"
        lines.append(f"| {shown} | " + " | ".join(row) + " |")
    figures = matrix.get("figures") or {}
    if figures:
        scenarios = sorted({s for col in figures.values() for s in col})
        lines += ["", "## Figures per fault", "",
                  "Failed requests (failed or outcome unknown / all requests completed in the fault's window, "
                  "APP-2) and recovery (seconds from the principal accepting writes to the pool's first "
                  "acknowledged write, APP-1).", "",
                  "| fault | " + " | ".join(clients) + " |", "|---|" + "---|" * len(clients)]
        for scenario in scenarios:
            lines.append(f"| {scenario} | " + " | ".join(figures.get(c, {}).get(scenario, "–") for c in clients) + " |")
    return "\n".join(lines) + "\n"


def render_html(matrix: dict) -> str:
    """A standalone HTML page of the matrix (cells coloured by status, evidence on hover and inline)."""
    colours = {"kept": "#d8f0d8", "violated": "#f6d0d0", "unknown": "#eeeeee", "not offered": "#ffffff"}
    clients = list(matrix["clients"])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in clients)
    rows = []
    for rule in matrix["rules"]:
        cells = []
        for client in clients:
            c = matrix["clients"][client].get(rule)
            if c is None:
                cells.append("<td>–</td>")
                continue
            ev = html.escape(c["evidence"])
            cells.append(f'<td style="background:{colours[c["status"]]}" title="{ev}"><b>{c["status"]}</b>'
                         f'{"<br><small>" + ev + "</small>" if c["status"] != "kept" else ""}</td>')
        rows.append(f"<tr><th>{html.escape(rule)}</th>{''.join(cells)}</tr>")
    return (f"<!doctype html><meta charset=utf-8><title>Conformance matrix: {html.escape(matrix['profile'])}</title>"
            "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #999;"
            "padding:4px 8px;vertical-align:top;max-width:28em}</style>"
            f"<h1>Conformance matrix: {html.escape(matrix['profile'])}</h1>"
            f"<table><tr><th>rule</th>{head}</tr>{''.join(rows)}</table>")


def drivers_of(histories_dir: Path) -> str | None:
    """The driver (and version) a client reported in its histories (``meta["drivers"]``), if any."""
    for path in sorted(Path(histories_dir).glob("*.jsonl")):
        meta, _ = read_jsonl(path)
        for text in (meta.get("drivers") or {}).values():
            return str(text)
    return None


def evidence_section(command: str, histories: str, make_target: str = "") -> str:
    """The matrix page's closing section: how to make the evidence again. The histories that decided
    the cells are run data and stay out of the repository: ``command`` (and ``make_target``, if any)
    regenerates them into ``histories`` (the reports folder), and the nightly chaos run keeps them as
    an artifact."""
    how = f"`{make_target}`, i.e. `{command}`" if make_target else f"`{command}`"
    return (
        "## Regenerating the evidence\n\n"
        "The run histories that decided the cells are run data: they are not kept in the repository. "
        f"To make them again, run {how}. Each client's histories land in `{histories}` "
        "(the reports folder: `FAILOVER_HARNESS_REPORTS`, default `./reports`); "
        "`failover-harness check PATH` re-checks one offline. The nightly chaos run "
        "(`.github/workflows/nightly-chaos.yml`) keeps every job's histories as its `nightly-histories` "
        "artifact, beside the merged matrices in `nightly-report`.\n"
    )


def write_doc(matrix: dict, path: Path, *, title: str = "", intro: str = "", evidence: str = "") -> Path:
    """Write the Markdown matrix to ``path`` (e.g. ``docs/matrix-lpq.md``): the table without links
    (the histories behind it are run data, not documentation), then ``evidence`` (see
    :func:`evidence_section`: how to regenerate them and where they land)."""
    text = render_markdown(matrix, links_from=None)
    if title:
        text = text.replace(f"# Conformance matrix: {matrix['profile']}", f"# {title}", 1)
    if intro:
        head, _, rest = text.partition("\n\n")
        text = f"{head}\n\n{intro.strip()}\n\n{rest}"
    if evidence:
        text = f"{text}\n{evidence.strip()}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_matrix(matrix: dict, out_dir: Path) -> dict[str, Path]:
    """Write ``<profile>.json``, ``.md`` and ``.html`` into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {ext: out_dir / f"{matrix['profile']}.{ext}" for ext in ("json", "md", "html")}
    paths["json"].write_text(json.dumps(matrix, indent=1))
    paths["md"].write_text(render_markdown(matrix, links_from=out_dir))
    paths["html"].write_text(render_html(matrix))
    return paths
