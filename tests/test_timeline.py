"""The SVG timeline: valid XML, the expected lanes and bars, hover titles, legibility limits."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from harness.history import Event, History
from harness.history.synthetic import mirroring_retry_history, switchover_sessions_history
from harness.report.timeline_svg import WIDTH, render_svg

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def by_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [el for el in root.iter() if cls in (el.get("class") or "").split()]


def lanes(root: ET.Element, kind: str) -> list[str]:
    return [g.get("data-lane") or "" for g in by_class(root, f"lane-{kind}")]


def small_history() -> History:
    """Two proxies, one client session: 3 connections (refused, timed out, opened), a fault, a role
    change, a kill, and ops ok/fail/info."""
    h = History(meta={"monotonic_origin": 100.0, "wall_origin": 1_700_000_000.0})
    t = 100.0
    h.record("node.start", t, node="pg1", role="primary", seconds=0.1)
    h.record("fault.start", t + 1, fault="partition", id="p1", node="pg1", params={"proxy": "pg1"})
    h.record("attempt.start", t + 1.1, process="c1", attempt=1, target="initial", address="127.0.0.1:6001",
             retry_time=1.2)
    h.record("conn.accepted", t + 1.1001, proxy="pg1", conn_id=1, client="c:1", listen="127.0.0.1:6001",
             upstream="127.0.0.1:7001", node="pg1")
    h.record("attempt.end", t + 2.3, process="c1", attempt=1, target="initial", address="127.0.0.1:6001",
             outcome="timeout", error="retry time expired")
    h.record("conn.closed", t + 2.3001, proxy="pg1", conn_id=1, by="client", reason="", bytes_up=10,
             bytes_down=0)
    h.record("node.kill", t + 2.5, node="pg1")
    h.record("attempt.start", t + 2.4, process="c1", attempt=2, target="failover", address="127.0.0.1:6002",
             retry_time=1.2)
    h.record("conn.accepted", t + 2.4001, proxy="pg2", conn_id=1, client="c:2", listen="127.0.0.1:6002",
             upstream="127.0.0.1:7002", node="pg2")
    h.record("conn.closed", t + 2.41, proxy="pg2", conn_id=1, by="upstream", reason="EOF", bytes_up=10,
             bytes_down=90)
    h.record("attempt.end", t + 2.41, process="c1", attempt=2, target="failover", address="127.0.0.1:6002",
             outcome="inactive", error="not accepting connections")
    h.record("role.change", t + 3.0, node="pg2", old_role="standby", new_role="primary")
    h.record("fault.end", t + 3.2, fault="partition", id="p1", node="pg1", seconds=2.2, error=None)
    h.record("attempt.start", t + 3.3, process="c1", attempt=3, target="failover", address="127.0.0.1:6002",
             retry_time=2.4)
    h.record("conn.accepted", t + 3.3001, proxy="pg2", conn_id=2, client="c:3", listen="127.0.0.1:6002",
             upstream="127.0.0.1:7002", node="pg2")
    h.record("attempt.end", t + 3.31, process="c1", attempt=3, target="failover", address="127.0.0.1:6002",
             outcome="opened", error=None)
    for i, kind in enumerate(["op.ok", "op.fail", "op.info"]):
        h.record("op.invoke", t + 4 + i, process="c1", op_id=i, f="query", value="select 1")
        h.record(kind, t + 4.01 + i, process="c1", op_id=i, f="query", value=1, error=None)
    return h


def test_valid_svg_with_expected_lanes_and_bars() -> None:
    root = parse(render_svg(small_history(), title="small"))
    assert root.tag == f"{NS}svg" and root.get("width") == str(WIDTH)
    assert lanes(root, "node") == ["pg1", "pg2"]
    assert lanes(root, "client") == ["c1"]
    pg2 = next(g for g in by_class(root, "lane-node") if g.get("data-lane") == "pg2")
    assert "standby→primary" in "".join(pg2.itertext())  # roles the node went through
    assert len(by_class(root, "conn")) == 3
    assert len(by_class(root, "conn-timeout")) == 1  # the client abandoned it at its retry time
    assert len(by_class(root, "conn-refused")) == 1  # inactive mirror
    assert len(by_class(root, "conn-opened")) == 1  # still open at the end
    assert len(by_class(root, "attempt")) == 3
    assert [len(by_class(root, f"op-{s}")) for s in ("ok", "fail", "info")] == [1, 1, 1]
    assert len(by_class(root, "fault")) == 1 and len(by_class(root, "fault-window")) == 1
    kinds = sorted(el.get("class", "") for el in by_class(root, "marker"))
    assert kinds == ["marker marker-node-kill", "marker marker-node-start", "marker marker-role-change"]


def test_every_bar_and_marker_has_a_title_with_exact_times() -> None:
    root = parse(render_svg(small_history()))
    shapes = [el for g in by_class(root, "bar") for el in g if el.tag == f"{NS}rect"]
    shapes += by_class(root, "marker") + by_class(root, "fault-window")
    assert shapes
    for el in shapes:
        title = el.find(f"{NS}title")
        assert title is not None and re.search(r"\+\d+\.\d{6} s \(t=\d+\.\d{6}\)", title.text or ""), title
    # wall clock from meta appears in hovers
    assert "UTC" in (shapes[0].find(f"{NS}title").text or "")  # type: ignore[union-attr]


def test_duration_label_only_when_it_fits() -> None:
    root = parse(render_svg(small_history()))
    texts = ["".join(t.itertext()) for g in by_class(root, "conn") for t in g.iter(f"{NS}text")]
    assert "1.20 s" in texts  # the 1.2 s timeout bar is wide enough
    assert not any(t.endswith("ms") for t in texts)  # the 10 ms bar is 2-3 px wide: no label


def test_escaping_of_hostile_names() -> None:
    h = History()
    h.record("conn.accepted", 1.0, proxy='p<&>"', conn_id=1, node=None, listen="x", client="y", upstream="z")
    h.record("conn.closed", 2.0, proxy='p<&>"', conn_id=1, by="toxic", reason="timeout toxic </svg>")
    h.record("op.ok", 2.5, process="<script>alert(1)</script>", op_id=1, f="q", value="]]>")
    svg = render_svg(h, title="a & b < c")
    root = parse(svg)
    assert lanes(root, "node") == ['p<&>"'] and lanes(root, "client") == ["<script>alert(1)</script>"]
    assert "<script>" not in svg


def test_accepts_event_dicts_and_empty_history() -> None:
    events = [Event(0, 5.0, "op.invoke", {"process": "a", "op_id": 1, "f": "q"}).to_dict(),
              Event(1, 5.5, "op.ok", {"process": "a", "op_id": 1, "f": "q"}).to_dict()]
    assert len(by_class(parse(render_svg(events)), "op-ok")) == 1
    empty = parse(render_svg(History(), title="nothing"))
    assert "empty history" in "".join(empty.itertext())


def test_open_ended_fault_and_connection_reach_the_end() -> None:
    h = History()
    h.record("fault.start", 0.0, fault="latency", id="l1", node="n", params={"latency": 100})
    h.record("conn.accepted", 1.0, proxy="n", conn_id=1, node="n", listen="a", client="b", upstream="c")
    h.record("op.ok", 10.0, process="p", op_id=1, f="q")
    root = parse(render_svg(h))
    assert len(by_class(root, "fault")) == 1
    (conn,) = by_class(root, "conn")
    assert "conn-open" in conn.get("class", "").split()  # no client attempt matched: "still open"
    assert "not closed" in "".join(conn.itertext())


@pytest.mark.parametrize("make, sessions", [(mirroring_retry_history, 1), (switchover_sessions_history, 20)])
def test_synthetic_cases_stay_readable(make, sessions: int) -> None:
    """The two reference pictures: ~20 attempts in 15 s, and 20 sessions across a switchover. Width
    1200 px, lanes at least 18 px high, total height bounded, everything parseable."""
    h = make()
    svg = render_svg(h, title=make.__name__)
    root = parse(svg)
    height = int(root.get("height") or 0)
    assert root.get("width") == "1200" and 200 < height < 1400
    assert len(lanes(root, "client")) == sessions
    assert len(by_class(root, "attempt")) == len(h.events("attempt.start"))
    assert len(by_class(root, "conn")) == len(h.events("conn.accepted"))
    for g in by_class(root, "lane"):
        assert float(g.get("data-height", 0)) >= 18
    # ops are merged into runs, so thousands of operations stay a manageable picture
    assert len(by_class(root, "op")) <= len(h.events("op.invoke"))
    assert len(svg) < 2_000_000


def test_mirroring_case_has_about_twenty_attempts_in_fifteen_seconds() -> None:
    h = mirroring_retry_history()
    starts = h.events("attempt.start")
    assert 18 <= len(starts) <= 30
    assert starts[-1].t - starts[0].t <= 15.0


def test_evidence_is_outlined_and_marked() -> None:
    h = small_history()
    timeout_end = next(e.index for e in h.events("attempt.end") if e.get("outcome") == "timeout")
    failed_op = h.events("op.fail")[0].index
    root = parse(render_svg(h, evidence=[timeout_end, failed_op]))
    outlined = by_class(root, "evidence")
    assert sorted(g.get("class", "").split()[0:2][-1] for g in outlined) == ["attempt", "op-fail"]
    assert len(by_class(root, "evidence-mark")) == 2
    assert not by_class(parse(render_svg(h)), "evidence-mark")


def test_refused_connect_seen_by_the_capture_is_a_refused_bar_on_its_node_lane() -> None:
    h = History(meta={"monotonic_origin": 10.0, "wall_origin": 1_700_000_000.0})
    h.record("harness.capture", 10.0, available=True, method="af_packet:lo", reason=None, targets=[])
    h.record("op.invoke", 10.1, process="c1", op_id=1, f="open", value=None)
    h.record("conn.refused", 10.1002, proxy="fh-r-n2", node="n2", listen="127.0.0.1:6002",
             client="127.0.0.1:50001", client_port=50001, seconds=0.000004, source="af_packet:lo")
    h.record("conn.accepted", 10.101, proxy="fh-r-n1", conn_id=1, client="127.0.0.1:50002",
             listen="127.0.0.1:6001", upstream="127.0.0.1:7001", node="n1")
    h.record("op.ok", 10.11, process="c1", op_id=1, f="open", value=None)
    root = parse(render_svg(h, title="refused"))
    assert "n2" in lanes(root, "node")
    refused = by_class(root, "conn-refused")
    titles = [t.text or "" for g in refused for t in g.iter(f"{NS}title")]
    assert any("seen by the packet capture" in t and "127.0.0.1:50001" in t for t in titles), titles
