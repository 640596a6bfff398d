"""Conformance matrix: which client keeps which rule. Built from the histories a suite run saved
(each history's meta holds the test's cited rules, its outcome and its checked verdicts).

A cell is ``kept`` (every verdict for that rule kept), ``violated`` (any verdict violated; the first
one's expected/observed is the one-line evidence), ``unknown`` (verdicts unknown, or the rule was
cited but no verdict came - a harness error is never shown as a violation, OBS-1)."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.history.store import read_jsonl

STATUS_ORDER = {"violated": 0, "unknown": 1, "kept": 2}


def collect_cells(histories_dir: Path, family: str | None = None) -> dict[str, dict[str, Any]]:
    """Per rule ID: ``{"status", "evidence", "tests"}`` from every ``*.jsonl`` history in a folder
    (only rule IDs starting with ``family`` when given, e.g. ``"MIR"``)."""
    cells: dict[str, dict[str, Any]] = {}

    def cell(rule: str) -> dict[str, Any]:
        return cells.setdefault(rule, {"status": "kept", "evidence": "", "tests": [], "verdicts": 0})

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
            c = cell(rule)
            c["verdicts"] += 1
            if test not in c["tests"]:
                c["tests"].append(test)
            status = v.get("status") or {True: "kept", False: "violated"}.get(v.get("valid"), "unknown")
            if STATUS_ORDER[status] < STATUS_ORDER[c["status"]]:
                c["status"] = status
                c["evidence"] = f"{v.get('observed') or ''} (expected {v.get('expected') or '-'}; {test})"
        for rule in meta.get("rules", []):
            if (family and not rule.startswith(family)) or rule in judged:
                continue
            c = cell(rule)
            if test not in c["tests"]:
                c["tests"].append(test)
            if c["status"] == "kept":
                c["status"] = "unknown"
                c["evidence"] = f"no verdict: test {meta.get('outcome', '?')} before checking ({test})"
    return cells


def build_matrix(profile: str, columns: dict[str, dict[str, dict[str, Any]]], rules: Iterable[str]) -> dict:
    """The matrix document: ``{"profile", "rules", "clients": {client: {rule: cell}}}``."""
    return {"profile": profile, "rules": list(rules), "clients": columns}


def _sort_key(rule: str) -> tuple[str, int]:
    family, _, number = rule.partition("-")
    return family, int(number) if number.isdigit() else 0


def all_rules(columns: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Every rule ID that appears in any client's column, in rulebook order."""
    return sorted({r for col in columns.values() for r in col}, key=_sort_key)


def render_markdown(matrix: dict) -> str:
    """A Markdown table: rules as rows, clients as columns, a one-line evidence per violation."""
    clients = list(matrix["clients"])
    lines = [f"# Conformance matrix: {matrix['profile']}", "",
             "| rule | " + " | ".join(clients) + " |", "|---|" + "---|" * len(clients)]
    for rule in matrix["rules"]:
        row = []
        for client in clients:
            c = matrix["clients"][client].get(rule)
            if c is None:
                row.append("–")
            elif c["status"] == "kept":
                row.append("kept")
            else:
                row.append(f"**{c['status']}**: {c['evidence'][:160]}".replace("|", "/"))
        lines.append(f"| {rule} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def render_html(matrix: dict) -> str:
    """A standalone HTML page of the matrix (cells coloured by status, evidence on hover and inline)."""
    colours = {"kept": "#d8f0d8", "violated": "#f6d0d0", "unknown": "#eeeeee"}
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


def write_matrix(matrix: dict, out_dir: Path) -> dict[str, Path]:
    """Write ``<profile>.json``, ``.md`` and ``.html`` into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {ext: out_dir / f"{matrix['profile']}.{ext}" for ext in ("json", "md", "html")}
    paths["json"].write_text(json.dumps(matrix, indent=1))
    paths["md"].write_text(render_markdown(matrix))
    paths["html"].write_text(render_html(matrix))
    return paths
