"""The ``history`` fixture: one :class:`~harness.history.core.History` per test, streamed while the
test runs, saved afterwards (``<history dir>/<test>.jsonl`` plus its SVG timeline) and attached to
the Allure result whether the test passed or failed."""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.plugin.options import ATTACH_KEY, REPORTS_KEY, VERDICTS_KEY, HarnessOptions, rule_ids_of

if TYPE_CHECKING:
    from harness.history.core import History

#: Longest readable part of a saved history's file name (a hash keeps it unique).
STEM_CHARS = 100


def file_stem(nodeid: str) -> str:
    """The saved history's file name (no suffix) for a test: its node ID made file-safe, cut in the
    middle when long (so both the suite path and the test name stay readable), plus a short hash of
    the whole ID so that two tests never share a file."""
    digest = hashlib.sha1(nodeid.encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")
    if len(readable) > STEM_CHARS:
        head = STEM_CHARS * 2 // 5
        readable = f"{readable[:head]}..{readable[-(STEM_CHARS - head - 2):]}"
    return f"{readable}-{digest}"


def _outcome(item: pytest.Item) -> str:
    reports = item.stash.get(REPORTS_KEY, {})
    for when in ("setup", "call"):
        rep = reports.get(when)
        if rep is not None and rep.failed:
            return "error" if when == "setup" else "failed"
        if rep is not None and rep.skipped:
            return "skipped"
    return "passed" if "call" in reports else "not run"


@pytest.fixture
def history(request: pytest.FixtureRequest, harness_options: HarnessOptions) -> Iterator[History]:
    """A fresh :class:`History` for this test, streamed to ``<history dir>/<test>.jsonl.partial`` while
    the test runs. After the test (passed or failed) it is saved to ``<history dir>/<test>.jsonl`` with
    its SVG timeline beside it, and attached to the Allure result (JSON + SVG) when ``--alluredir`` is
    on. ``meta`` holds the test id, rule IDs, profile, backend, engine, client, worker, and at the end
    the outcome and the checked verdicts (``failover-harness check`` reads them back)."""
    from harness.history.core import History
    from harness.history.store import HistoryWriter
    from harness.profiles import profile_of_rules

    item = request.node
    rules = rule_ids_of(item)
    profile = profile_of_rules(rules)
    h = History(meta={"test": item.nodeid, "rules": rules, "profile": profile.name if profile else None,
                      "backend": harness_options.backend,
                      "engine": harness_options.engine, "client": harness_options.client or "reference",
                      "worker": harness_options.worker})
    path = harness_options.history_dir / f"{file_stem(item.nodeid)}.jsonl"
    # Streamed while the test runs, so a crashed worker still leaves its history (``.partial``).
    writer = HistoryWriter(h, path.with_name(path.name + ".partial")).open()
    try:
        yield h
    finally:
        writer.close()
        _finish_history(item, h, path)
        writer.path.unlink(missing_ok=True)


def _finish_history(item: pytest.Item, h: History, path: Path) -> None:
    from harness.history.store import save_jsonl
    from harness.report.allure import allure_active
    from harness.report.timeline_svg import render_svg

    h.meta["outcome"] = _outcome(item)
    h.meta["verdicts"] = [v.to_dict() for v in item.stash.get(VERDICTS_KEY, [])]
    save_jsonl(h, path)
    svg: str | None
    try:
        evidence = [i for v in item.stash.get(VERDICTS_KEY, []) if v.valid is not True for i in v.evidence]
        svg = render_svg(h, title=item.nodeid, evidence=evidence)
        path.with_suffix(".svg").write_text(svg, encoding="utf-8")
    except Exception as exc:  # a drawing bug must not hide the test's own result
        svg = None
        warnings.warn(f"timeline of {item.nodeid} could not be drawn: {type(exc).__name__}: {exc}",
                      stacklevel=1)
    if allure_active(item.config):
        # attached by pytest_runtest_teardown below, once every fixture is finalised, so that the
        # files sit on the test itself rather than under this fixture's "Tear down" entry
        item.stash[ATTACH_KEY] = _attachment(h, path, item, svg)


#: Evidence events per verdict that a passed test's attachment keeps a window around.
EVIDENCE_ANCHORS = 5


def _attachment(h: History, path: Path, item: pytest.Item, svg: str | None) -> tuple[tuple[bytes, bool], str | None]:
    """What the report carries of the history and its timeline (docs/reports.md, "Report size"): for
    a test that did not pass, the saved file whole and gzip-compressed and the whole timeline; for a
    passed one the events nearest its faults and evidence (:mod:`harness.report.attachment`) and the
    timeline of those. ``((body, compressed), svg)``; the saved files stay whole."""
    from harness.history.core import History
    from harness.report.attachment import compressed, trim, trimmed_jsonl
    from harness.report.timeline_svg import render_svg

    if h.meta["outcome"] != "passed":
        return (compressed(path.read_bytes()), True), svg
    events = h.events()
    evidence = [i for v in item.stash.get(VERDICTS_KEY, []) for i in list(v.evidence)[:EVIDENCE_ANCHORS]]
    kept = trim(events, evidence)
    body = trimmed_jsonl(dict(h.meta), events, evidence, str(path), kept=kept).encode("utf-8")
    if svg is not None and len(kept) < len(events):
        try:
            svg = render_svg(History.from_events(kept, dict(h.meta)),
                             title=f"{item.nodeid} - near faults and evidence (whole: {path.with_suffix('.svg')})")
        except Exception:  # the whole timeline is attached instead
            pass
    return (body, False), svg


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After all fixtures are torn down, attach the saved history and timeline to the Allure test."""
    try:
        return (yield)
    finally:
        payload = item.stash.get(ATTACH_KEY, None)
        if payload is not None:
            from harness.report.allure import attach_history

            (body, gz), svg = payload
            attach_history(body, svg, name="history", compressed=gz)


