"""The timeline picture of a history: plain SVG, no dependency beyond the standard library. It draws the
model of :mod:`harness.history.timeline`. Over 600 lines: one drawing class, one method per band.

Layout, top to bottom (width ``WIDTH`` px, time axis in seconds from the first event):

* title and a one-line summary;
* **Faults** band: one labelled bar per fault window (``fault.start`` .. ``fault.end``), whose shading
  also spans every lane below;
* **Events** band: labels for the vertical markers (``role.change``, ``node.start/stop/kill``,
  ``node.pause/resume``) that cross every lane;
* **Network** lanes, one per node (or proxy when a connection names no node): a bar per proxied
  connection from ``conn.accepted`` to ``conn.closed``, coloured by outcome, with its duration written
  on it when it fits; overlapping connections are stacked in sub-rows;
* **Client** lanes, one per session (``process``): the client's own attempts (``attempt.start`` ..
  ``attempt.end``) and retry delays on the upper row, operations (``op.invoke`` .. ``op.ok/fail/info``)
  as ticks on the lower row; neighbouring operations with the same outcome merge into one bar;
* a legend.

Every drawn element carries a ``<title>`` (hover text) with exact times. Elements carry CSS classes
(``lane``, ``conn``, ``attempt``, ``op``, ``fault``, ``marker`` plus the outcome) so tests and scripts can
count them. See docs/reports.md for the legend.
"""

from __future__ import annotations

import math
import time as _time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Any

from harness.history.core import Event, History
from harness.history.timeline import (
    ATTEMPT_OUTCOME,
    Attempt,
    Conn,
    Op,
    TimelineModel,
    build_model,
    close_category,
    coerce_events,
    conn_outcome,
)
from harness.redact import redact

WIDTH = 1200
LABEL_W = 190
RIGHT_PAD = 24
PLOT_X0 = LABEL_W
PLOT_W = WIDTH - LABEL_W - RIGHT_PAD
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
CHAR_W = 6.3  # average advance of an 11 px sans-serif glyph, for fitting labels
SMALL_CHAR_W = 5.4  # 9.5 px labels on bars

# Outcome -> (fill colour, legend text). Colours chosen to stay apart for common colour blindness.
OUTCOMES: dict[str, tuple[str, str]] = {
    "opened": ("#2e7d32", "opened"),
    "open": ("#81c784", "still open at end"),
    "refused": ("#ef6c00", "refused / inactive"),
    "timeout": ("#6a1b9a", "timed out"),
    "reset": ("#c62828", "reset / error"),
    "client": ("#607d8b", "closed by client"),
    "server": ("#5d4037", "closed by server"),
}
OP_COLOURS = {"ok": "#43a047", "fail": "#e53935", "info": "#fbc02d"}
DELAY_COLOUR = "#bdbdbd"
FAULT_FILL = "#ffb300"
EVIDENCE_COLOUR = "#d50000"
MARKER_STYLE: dict[str, tuple[str, str, str]] = {
    # type -> (colour, dash pattern, legend text)
    "role.change": ("#1565c0", "", "role change"),
    "node.start": ("#2e7d32", "4 3", "node start"),
    "node.stop": ("#424242", "4 3", "node stop"),
    "node.kill": ("#c62828", "", "node kill"),
    "node.pause": ("#8d6e63", "1 3", "node pause"),
    "node.resume": ("#8d6e63", "1 3", "node resume"),
}


def _fmt_s(seconds: float) -> str:
    if abs(seconds) >= 10:
        return f"{seconds:.1f} s"
    if abs(seconds) >= 1:
        return f"{seconds:.2f} s"
    if abs(seconds) >= 0.01:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds * 1000:.1f} ms"


def _fit(text: str, width: float, char_w: float = CHAR_W) -> str:
    """``text`` cut with an ellipsis to fit ``width`` pixels ('' when not even two characters fit)."""
    room = int(width // char_w)
    if len(text) <= room:
        return text
    if room < 3:
        return ""
    return text[: room - 1] + "…"


def _nice_step(span: float, target: int = 12) -> float:
    raw = span / max(target, 1)
    exp = math.floor(math.log10(raw)) if raw > 0 else 0
    for m in (1, 2, 5, 10):
        step = m * 10**exp
        if step >= raw:
            return step
    return 10 ** (exp + 1)


def _pack(intervals: list[tuple[float, float]], gap: float = 1.0) -> tuple[list[int], int]:
    """Greedy interval packing: a row per interval so that bars in one row do not overlap."""
    ends: list[float] = []
    rows = [0] * len(intervals)
    for i in sorted(range(len(intervals)), key=lambda k: intervals[k][0]):
        start, end = intervals[i]
        for r, last in enumerate(ends):
            if last + gap <= start:
                rows[i], ends[r] = r, end
                break
        else:
            rows[i] = len(ends)
            ends.append(end)
    return rows, max(len(ends), 1)


class _Svg:
    def __init__(self, model: TimelineModel, meta: Mapping[str, Any], evidence: Iterable[int] = ()) -> None:
        self.m = model
        self.meta = meta
        self.evidence = {int(i) for i in evidence}
        span = model.t1 - model.t0
        self.span = max(span * 1.02, 0.001)
        self.root = ET.Element("svg", {"xmlns": "http://www.w3.org/2000/svg", "version": "1.1",
                                       "font-family": FONT, "font-size": "11"})
        self.layers = {name: ET.SubElement(self.root, "g", {"class": name}) for name in
                       ("background", "lanebg", "grid", "shading", "lanes", "markers", "bands", "axis",
                        "legend")}

    # helpers ---------------------------------------------------------------------------------------
    def x(self, t: float) -> float:
        return PLOT_X0 + (t - self.m.t0) / self.span * PLOT_W

    def when(self, t: float) -> str:
        rel = t - self.m.t0
        text = f"+{rel:.6f} s (t={t:.6f})"
        if "wall_origin" in self.meta and "monotonic_origin" in self.meta:
            try:
                wall = float(self.meta["wall_origin"]) + (t - float(self.meta["monotonic_origin"]))
                clock = _time.strftime("%H:%M:%S", _time.gmtime(wall))
                text += f" {clock}.{int(wall % 1 * 1e6):06d} UTC"
            except (TypeError, ValueError):
                pass
        return text

    def el(self, parent: ET.Element, tag: str, title: str | None = None, **attrs: Any) -> ET.Element:
        node = ET.SubElement(parent, tag, {k.rstrip("_").replace("_", "-"): _num(v) for k, v in attrs.items()
                                           if v is not None})
        if title:
            ET.SubElement(node, "title").text = title
        return node

    def text(self, parent: ET.Element, x: float, y: float, content: str, title: str | None = None,
             **attrs: Any) -> ET.Element:
        node = self.el(parent, "text", title, x=x, y=y, **attrs)
        if title:  # <title> first, then the text
            node.find("title").tail = content  # type: ignore[union-attr]
        else:
            node.text = content
        return node

    def bar(self, parent: ET.Element, t_start: float, t_end: float, y: float, h: float, fill: str,
            title: str, cls: str, label: str | None = None, min_w: float = 2.0,
            indices: Iterable[int] = (), **attrs: Any) -> tuple[ET.Element, float]:
        x0 = self.x(t_start)
        w = max(self.x(t_end) - x0, min_w)
        if self.evidence and self.evidence.intersection(indices):
            cls += " evidence"
            attrs.update(stroke=EVIDENCE_COLOUR, stroke_width="2")
            title = "EVIDENCE of a verdict\n" + title
        g = self.el(parent, "g", None, class_=cls)
        self.el(g, "rect", title, x=x0, y=y, width=w, height=h, fill=fill, **attrs)
        if label and h >= 9:
            fitted = label if len(label) * SMALL_CHAR_W + 4 <= w else ""
            if fitted:
                self.text(g, x0 + w / 2, y + h - 2, fitted, None, text_anchor="middle",
                          font_size="9.5", fill="#ffffff", pointer_events="none")
        return g, w

    # sections --------------------------------------------------------------------------------------
    def render(self, title: str) -> str:
        y = 22.0
        self.text(self.root, 10, y, _fit(title, WIDTH - 20, 8), None, font_size="15", font_weight="bold")
        y += 18
        self.text(self.root, 10, y, _fit(self.summary(), WIDTH - 20), None, fill="#555555")
        y += 14
        axis_label_y = y + 10
        y += 16
        plot_top = y
        y = self.faults_band(y)
        y = self.markers_band(y)
        y = self.evidence_band(y)
        lanes_top = y
        y = self.network_lanes(y)
        y = self.client_lanes(y)
        plot_bottom = y + 2
        self.shading(lanes_top, plot_bottom, plot_top)
        self.axis(plot_top, plot_bottom, axis_label_y)
        self.marker_lines(lanes_top, plot_bottom)
        y = self.legend(plot_bottom + 28)
        height = int(y + 10)
        self.root.set("width", str(WIDTH))
        self.root.set("height", str(height))
        self.root.set("viewBox", f"0 0 {WIDTH} {height}")
        self.el(self.layers["background"], "rect", None, x=0, y=0, width=WIDTH, height=height, fill="#ffffff")
        ET.indent(self.root, space="")
        return _serialise(self.root)

    def summary(self) -> str:
        meta, m = self.meta, self.m
        parts = [f"{len(m.events)} events over {_fmt_s(m.t1 - m.t0)}",
                 f"{len(m.conns)} proxied connections", f"{len(m.attempts)} client attempts",
                 f"{len(m.ops)} operations", f"{len(m.faults)} faults"]
        for key in ("test", "client", "backend", "engine"):
            if meta.get(key):
                parts.append(f"{key} {meta[key]}")
        if "wall_origin" in meta and "monotonic_origin" in meta:
            try:
                wall = float(meta["wall_origin"]) + (m.t0 - float(meta["monotonic_origin"]))
                parts.append("start " + _time.strftime("%Y-%m-%d %H:%M:%S UTC", _time.gmtime(wall)))
            except (TypeError, ValueError):
                pass
        return " · ".join(parts)

    def caption(self, y: float, text: str, h: float) -> None:
        self.text(self.layers["bands"], 10, y + h / 2 + 4, text, None, font_weight="bold", fill="#333333")

    def faults_band(self, y: float) -> float:
        m = self.m
        if not m.faults:
            return y
        spans = [(self.x(s.t), max(self.x(e.t if e else m.t1), self.x(s.t) + 2)) for s, e in m.faults]
        labels = [self.fault_label(s, e) for s, e in m.faults]
        # a label that does not fit inside its bar goes to its right; reserve that room when packing
        inside = [(b - a - 6 >= len(lbl) * CHAR_W) for (a, b), lbl in zip(spans, labels, strict=True)]
        packed = [(a, b if fits else b + 4 + min(len(lbl) * CHAR_W, 180))
                  for (a, b), lbl, fits in zip(spans, labels, inside, strict=True)]
        rows, n = _pack(packed, gap=3)
        row_h = 16
        self.caption(y, "Faults", row_h)
        band = self.layers["bands"]
        for (start, end), (x0, x1), row, label, fits in zip(m.faults, spans, rows, labels, inside,
                                                             strict=True):
            ry = y + row * row_h + 1
            error = end.get("error") if end is not None else None
            title = (f"fault {label}\nstart {self.when(start.t)}\n"
                     + (f"end {self.when(end.t)}\nduration {_fmt_s(end.t - start.t)}" if end is not None
                        else "no fault.end: still active at the end of the history")
                     + (f"\nparams {start.get('params')}" if start.get("params") else "")
                     + (f"\nerror {error}" if error else ""))
            g = self.el(band, "g", None, class_="fault")
            self.el(g, "rect", title, x=x0, y=ry, width=x1 - x0, height=row_h - 3, fill=FAULT_FILL,
                    fill_opacity="0.55", stroke="#c62828" if error else "#e65100",
                    stroke_width="1.5" if error else "0.6")
            if fits:
                text, tx = label, x0 + 3
            else:
                text, tx = _fit(label, min(180.0, PLOT_X0 + PLOT_W + RIGHT_PAD - x1 - 6)), x1 + 3
            if text:
                self.text(g, tx, ry + row_h - 6, text, title, fill="#4e342e", font_size="10")
        return y + n * row_h + 4

    @staticmethod
    def fault_label(start: Event, end: Event | None) -> str:
        label = str(start.get("fault") or "fault")
        if start.get("node"):
            label += f" {start.get('node')}"
        if end is not None:
            label += f" ({_fmt_s(end.t - start.t)})"
        if end is not None and end.get("error"):
            label += " - error"
        return label

    def marker_label(self, e: Event) -> str:
        node = e.get("node") or "?"
        if e.type == "role.change":
            return f"{node} → {e.get('new_role')}"
        if e.type == "node.stop" and e.get("mode"):
            return f"stop {node} ({e.get('mode')})"
        return f"{e.type.split('.', 1)[1]} {node}"

    def markers_band(self, y: float) -> float:
        m = self.m
        if not m.markers:
            return y
        labels = [self.marker_label(e) for e in m.markers]
        spans = [(self.x(e.t) - 4, self.x(e.t) + 8 + len(lbl) * CHAR_W)
                 for e, lbl in zip(m.markers, labels, strict=True)]
        rows, n = _pack(spans, gap=3)
        n = min(n, 4)
        row_h = 15
        self.caption(y, "Events", row_h)
        band = self.layers["bands"]
        for e, label, row in zip(m.markers, labels, rows, strict=True):
            colour, _dash, name = MARKER_STYLE[e.type]
            x = self.x(e.t)
            title = f"{name}: {label}\n{self.when(e.t)}" + "".join(
                f"\n{k}={v}" for k, v in e.fields.items() if k != "node")
            g = self.el(band, "g", None, class_=f"marker-label marker-{e.type.replace('.', '-')}")
            ry = y + min(row, n - 1) * row_h
            self.el(g, "path", title, d=f"M{x - 4:.1f},{ry + 3:.1f} L{x + 4:.1f},{ry + 3:.1f} "
                    f"L{x:.1f},{ry + 10:.1f} Z", fill=colour)
            if row < n:
                self.text(g, x + 6, ry + 11, label, title, fill=colour, font_size="10.5")
        return y + n * row_h + 4

    def evidence_band(self, y: float) -> float:
        marked = [e for e in self.m.events if e.index in self.evidence]
        if not marked:
            return y
        row_h = 13
        self.caption(y, "Evidence", row_h)
        for e in marked:
            x = self.x(e.t)
            details = ", ".join(f"{k}={v}" for k, v in list(e.fields.items())[:8])
            self.el(self.layers["bands"], "path", f"evidence event {e.index}: {e.type}\n{self.when(e.t)}\n"
                    f"{details}", class_="evidence-mark",
                    d=f"M{x - 4:.1f},{y + 2:.1f} L{x + 4:.1f},{y + 2:.1f} L{x:.1f},{y + 10:.1f} Z",
                    fill=EVIDENCE_COLOUR, fill_opacity="0.8")
        return y + row_h + 2

    def marker_lines(self, top: float, bottom: float) -> None:
        for e in self.m.markers:
            colour, dash, name = MARKER_STYLE[e.type]
            x = self.x(e.t)
            self.el(self.layers["markers"], "line", f"{name}: {self.marker_label(e)}\n{self.when(e.t)}",
                    class_=f"marker marker-{e.type.replace('.', '-')}", x1=x, x2=x, y1=top, y2=bottom,
                    stroke=colour, stroke_width="1.4", stroke_dasharray=dash or None, stroke_opacity="0.85")

    def shading(self, top: float, bottom: float, band_top: float) -> None:
        for start, end in self.m.faults:
            x0 = self.x(start.t)
            x1 = max(self.x(end.t if end is not None else self.m.t1), x0 + 2)
            title = f"fault window {self.fault_label(start, end)}: {self.when(start.t)}" + (
                f" .. {self.when(end.t)}" if end is not None else " .. (no end)")
            self.el(self.layers["shading"], "rect", title, class_="fault-window", x=x0, y=band_top,
                    width=x1 - x0, height=bottom - band_top, fill=FAULT_FILL, fill_opacity="0.13")

    def lane_frame(self, y: float, h: float, label: str, sub: str, kind: str, index: int) -> ET.Element:
        g = self.el(self.layers["lanes"], "g", None, class_=f"lane lane-{kind}", data_lane=label,
                    data_height=h)
        if index % 2 == 0:  # zebra stripes under the grid and the fault shading
            self.el(self.layers["lanebg"], "rect", None, class_="lane-band", x=0, y=y, width=WIDTH,
                    height=h, fill="#f3f5f9")
        self.el(g, "line", None, x1=PLOT_X0, x2=WIDTH - RIGHT_PAD, y1=y + h, y2=y + h, stroke="#e0e0e0")
        text = _fit(label, LABEL_W - 24 - (len(sub) * SMALL_CHAR_W + 6 if sub else 0))
        if not text:
            text = _fit(label, LABEL_W - 24)
            sub = ""
        self.text(g, 18, y + min(h / 2 + 4, 15), text, f"{kind} lane: {label}" + (f" ({sub})" if sub else ""),
                  fill="#212121")
        if sub:
            self.text(g, 18 + len(text) * CHAR_W + 6, y + min(h / 2 + 4, 15), sub, None, fill="#757575",
                      font_size="9.5")
        return g

    def group_header(self, y: float, text: str) -> float:
        self.text(self.layers["bands"], 8, y + 13, text, None, font_weight="bold", fill="#37474f")
        self.el(self.layers["bands"], "line", None, x1=8, x2=WIDTH - RIGHT_PAD, y1=y + 17, y2=y + 17,
                stroke="#90a4ae", stroke_width="0.8")
        return y + 20

    def network_lanes(self, y: float) -> float:
        m = self.m
        if not m.node_lanes:
            return y
        y = self.group_header(y, "Network (fault proxy)")
        for i, lane in enumerate(m.node_lanes):
            conns = [c for c in m.conns if c.lane == lane]
            spans = [(self.x(c.accepted.t), max(self.x(c.closed.t if c.closed else m.t1),
                                                 self.x(c.accepted.t) + 2)) for c in conns]
            rows, n = _pack(spans, gap=0)
            row_h, bar_h = _row_size(n)
            h = max(22.0, n * row_h + 8)
            roles = m.roles.get(lane, [])
            g = self.lane_frame(y, h, lane, "→".join(_dedupe(roles))[:40], "node", i)
            for c, row in zip(conns, rows, strict=True):
                self.draw_conn(g, c, y + 4 + row * row_h, bar_h)
            y += h
        return y

    def draw_conn(self, g: ET.Element, c: Conn, y: float, h: float) -> None:
        m = self.m
        outcome = conn_outcome(c)
        close = close_category(c)
        t_end = c.closed.t if c.closed is not None else m.t1
        a = c.accepted
        if a.type == "conn.refused":
            lines = [f"connect refused at proxy {a.get('proxy')} (disabled), seen by the packet capture",
                     f"SYN {self.when(a.t)} from {a.get('client')} to {a.get('listen')}, RST "
                     f"{_fmt_s(float(a.get('seconds') or 0.0))} later"]
            if c.attempt is not None:
                lines.append(f"client session {c.attempt.process}, attempt {c.attempt.start.get('attempt')}"
                             f" ({c.attempt.start.get('target')})")
            self.bar(g, a.t, a.t, y, h, OUTCOMES["refused"][0], "\n".join(lines), "bar conn conn-refused", None,
                     indices=[a.index])
            return
        lines = [f"connection {a.get('conn_id')} via proxy {a.get('proxy')}"
                 + (f" to node {a.get('node')}" if a.get("node") else ""),
                 f"outcome: {OUTCOMES[outcome][1]}",
                 f"accepted {self.when(a.t)}"]
        if a.get("client"):
            lines.append(f"client {a.get('client')} → listen {a.get('listen')} → "
                         f"upstream {a.get('upstream')}")
        if c.upstream_ok is not None:
            lines.append(f"upstream connected {self.when(c.upstream_ok.t)}")
        if c.upstream_failed is not None:
            lines.append(f"upstream failed {self.when(c.upstream_failed.t)}: "
                         f"{c.upstream_failed.get('error')}")
        if c.closed is not None:
            lines.append(f"closed {self.when(c.closed.t)} by {c.closed.get('by')}"
                         + (f" ({c.closed.get('reason')})" if c.closed.get("reason") else ""))
            lines.append(f"duration {_fmt_s(c.closed.t - a.t)}; bytes up {c.closed.get('bytes_up')}, "
                         f"down {c.closed.get('bytes_down')}")
        else:
            lines.append("not closed before the end of the history")
        if c.attempt is not None:
            lines.append(f"client session {c.attempt.process}, attempt {c.attempt.start.get('attempt')}"
                         f" ({c.attempt.start.get('target')})")
        title = "\n".join(lines)
        indices = [e.index for e in (a, c.closed, c.upstream_ok, c.upstream_failed) if e is not None]
        bar_g, w = self.bar(g, a.t, t_end, y, h, OUTCOMES[outcome][0], title, f"bar conn conn-{outcome}",
                            _fmt_s(t_end - a.t) if c.closed is not None else None, indices=indices)
        if close != outcome and w >= 6:  # end cap: how the proxy saw it close (or still open)
            x1 = self.x(a.t) + w
            cap_title = (f"closed: {OUTCOMES[close][1]}\n{self.when(c.closed.t)}" if c.closed is not None
                         else f"still open at the end of the history ({self.when(m.t1)})")
            self.el(bar_g, "rect", cap_title, class_="close-cap", x=x1 - 3, y=y, width=3, height=h,
                    fill=OUTCOMES[close][0], stroke="#ffffff", stroke_width="0.5")

    def client_lanes(self, y: float) -> float:
        m = self.m
        if not m.client_lanes:
            return y
        y = self.group_header(y + 4, "Client sessions")
        attempts_by: dict[str, list[Attempt]] = {}
        for a in m.attempts:
            attempts_by.setdefault(a.process, []).append(a)
        delays_by: dict[str, list[Event]] = {}
        for d in m.delays:
            delays_by.setdefault(str(d.get("process")), []).append(d)
        ops_by: dict[str, list[Op]] = {}
        for op in m.ops:
            ops_by.setdefault(op.process, []).append(op)
        many = len(m.client_lanes) > 12
        for i, lane in enumerate(m.client_lanes):
            attempts = attempts_by.get(lane, [])
            delays = delays_by.get(lane, [])
            ops = ops_by.get(lane, [])
            # pack on real time: a session's sequential attempts share one row even when tiny
            spans = [(a.start.t, a.end.t if a.end else m.t1) for a in attempts]
            rows, n = _pack(spans, gap=0.0) if attempts else ([], 0)
            bar_h = 9.0 if many else 11.0
            row_h = bar_h + 2
            op_h = 5.0 if many else 7.0
            h = 6 + n * row_h + (op_h + 3 if ops else 0) + (2 if n else 0)
            h = max(h, 18.0)
            summary = f"{len(attempts)} att, {len(ops)} ops" if attempts else f"{len(ops)} ops"
            g = self.lane_frame(y, h, lane, summary, "client", i)
            top = y + 4
            for a, row in zip(attempts, rows, strict=True):
                self.draw_attempt(g, a, top + row * row_h, bar_h)
            for d in delays:
                seconds = float(d.get("seconds") or 0)
                self.bar(g, d.t, d.t + seconds, top + 1, bar_h - 2, DELAY_COLOUR,
                         f"retry delay {_fmt_s(seconds)} (session {lane})\nfrom {self.when(d.t)}\n"
                         f"to {self.when(d.t + seconds)}", "delay", None, min_w=1.5, stroke="#757575",
                         stroke_width="0.5", stroke_dasharray="2 1")
            if ops:
                self.draw_ops(g, ops, top + n * row_h + (2 if n else 0), op_h)
            y += h
        return y

    def draw_attempt(self, g: ET.Element, a: Attempt, y: float, h: float) -> None:
        s, e = a.start, a.end
        outcome = ATTEMPT_OUTCOME.get(str(e.get("outcome")), "reset") if e is not None else "open"
        t_end = e.t if e is not None else self.m.t1
        lines = [f"session {a.process}: attempt {s.get('attempt')} to {s.get('target')} {s.get('address')}",
                 f"outcome: {e.get('outcome') if e is not None else 'no attempt.end'}",
                 f"start {self.when(s.t)}"]
        if s.get("retry_time") is not None:
            lines.append(f"retry time {_fmt_s(float(s.get('retry_time')))}")
        if e is not None:
            lines.append(f"end {self.when(e.t)}; duration {_fmt_s(e.t - s.t)}")
            if e.get("error"):
                lines.append(f"error: {e.get('error')}")
        if a.conn is not None:
            accepted = a.conn.accepted
            lines.append(f"network: proxy {accepted.get('proxy')} connection {accepted.get('conn_id')}")
        # which partner: "I" initial / "F" failover (MIR), so the alternation reads off the client lane
        mark = {"initial": "I ", "failover": "F "}.get(str(s.get("target")), "")
        self.bar(g, s.t, t_end, y, h, OUTCOMES[outcome][0], "\n".join(lines),
                 f"bar attempt attempt-{outcome}", f"{mark}{_fmt_s(t_end - s.t)}" if e is not None else None,
                 indices=[s.index] + ([e.index] if e is not None else []))
        retry = s.get("retry_time")
        # the retry-time mark only where it matters: attempts that ran for most of their retry time
        if isinstance(retry, int | float) and retry > 0 and (t_end - s.t) >= 0.5 * float(retry):
            xr = self.x(s.t + float(retry))
            if xr - self.x(s.t) >= 3:
                self.el(g, "line", f"retry time ends {self.when(s.t + float(retry))}", class_="retry-mark",
                        x1=xr, x2=xr, y1=y - 1, y2=y + h + 1, stroke="#000000", stroke_width="1")

    def draw_ops(self, g: ET.Element, ops: list[Op], y: float, h: float) -> None:
        """Operations as ticks; neighbours closer than 1.5 px with the same status merge into one bar."""
        items = []
        for op in ops:
            t_a = op.invoke.t if op.invoke is not None else op.done.t  # type: ignore[union-attr]
            t_b = op.done.t if op.done is not None else self.m.t1
            items.append((t_a, t_b, op))
        items.sort(key=lambda it: it[0])
        runs: list[list[Any]] = []
        last_is_evidence = False
        for t_a, t_b, op in items:
            status = op.status
            is_evidence = bool(self.evidence) and any(
                ev is not None and ev.index in self.evidence for ev in (op.invoke, op.done))
            mergeable = not is_evidence and not last_is_evidence
            last_is_evidence = is_evidence
            if mergeable and runs and runs[-1][2] == status and self.x(t_a) - self.x(runs[-1][1]) < 1.5:
                run = runs[-1]
                run[1] = max(run[1], t_b)
                run[3].append(op)
            else:
                runs.append([t_a, t_b, status, [op]])
        for t_a, t_b, status, members in runs:
            first: Op = members[0]
            f = (first.invoke or first.done).get("f")  # type: ignore[union-attr]
            if len(members) == 1:
                done = (f"done {self.when(t_b)} ({_fmt_s(t_b - t_a)})" if first.done is not None
                        else "no completion")
                title = f"op {f} {status}\ninvoke {self.when(t_a)}\n{done}"
                err = first.done.get("error") if first.done is not None else None
                if err:
                    title += f"\nerror: {err}"
                value = first.done.get("value") if first.done is not None else None
                if value is not None:
                    title += f"\nvalue: {str(value)[:200]}"
            else:
                fs = sorted({str((op.invoke or op.done).get("f")) for op in members})  # type: ignore[union-attr]
                title = (f"{len(members)} ops {status} ({', '.join(fs)})\nfrom {self.when(t_a)}\n"
                         f"to {self.when(t_b)}")
            # failures and indeterminate results are rare and matter most: draw them wider
            indices = [ev.index for op in members for ev in (op.invoke, op.done) if ev is not None]
            self.bar(g, t_a, t_b, y, h, OP_COLOURS.get(status, OP_COLOURS["info"]), title,
                     f"op op-{status}", None, min_w=1.5 if status == "ok" else 3.0, indices=indices)

    def axis(self, top: float, bottom: float, label_y: float) -> None:
        span = self.span
        step = _nice_step(span, 14)
        decimals = max(0, -int(math.floor(math.log10(step)))) if step < 1 else 0
        grid, axis = self.layers["grid"], self.layers["axis"]
        k = 0
        while k * step <= span + 1e-12:
            rel = k * step
            x = PLOT_X0 + rel / span * PLOT_W
            self.el(grid, "line", None, x1=x, x2=x, y1=top, y2=bottom, stroke="#e6e6e6", stroke_width="1")
            label = f"{rel:.{decimals}f}"
            self.text(axis, x, label_y, label + (" s" if k == 0 else ""), f"+{rel:.{decimals}f} s",
                      text_anchor="middle", fill="#616161", font_size="10")
            self.text(axis, x, bottom + 12, label, None, text_anchor="middle", fill="#616161", font_size="10")
            k += 1
        self.text(axis, 10, label_y, "time since first event (s)", None, fill="#616161", font_size="10")
        self.el(axis, "line", None, x1=PLOT_X0, x2=PLOT_X0 + PLOT_W, y1=top, y2=top, stroke="#9e9e9e")
        self.el(axis, "line", None, x1=PLOT_X0, x2=PLOT_X0 + PLOT_W, y1=bottom, y2=bottom, stroke="#9e9e9e")

    def legend(self, y: float) -> float:
        g = self.layers["legend"]
        items: list[tuple[str, str, str]] = [("rect", OUTCOMES[k][0], f"connection/attempt {OUTCOMES[k][1]}"
                                              if k == "opened" else OUTCOMES[k][1]) for k in OUTCOMES]
        items += [("op", OP_COLOURS[k], f"op {k}") for k in ("ok", "fail", "info")]
        items += [("rect", DELAY_COLOUR, "retry delay"), ("fault", FAULT_FILL, "fault window"),
                  ("tick", "#000000", "retry time")]
        items += [("line", MARKER_STYLE[k][0], MARKER_STYLE[k][2]) for k in
                  ("role.change", "node.start", "node.stop", "node.kill", "node.pause")]
        if self.evidence:
            items.append(("evidence", EVIDENCE_COLOUR, "verdict evidence"))
        self.text(g, 10, y + 9, "Legend", None, font_weight="bold", fill="#333333")
        x = 70.0
        for shape, colour, label in items:
            w = 14 + 5 + len(label) * CHAR_W + 16
            if x + w > WIDTH - 10:
                x = 70.0
                y += 18
            item = self.el(g, "g", None, class_="legend-item")
            if shape == "line":
                kind = next(k for k, v in MARKER_STYLE.items() if v[2] == label)
                self.el(item, "line", label, x1=x + 7, x2=x + 7, y1=y, y2=y + 12, stroke=colour,
                        stroke_width="2", stroke_dasharray=MARKER_STYLE[kind][1] or None)
            elif shape == "tick":
                self.el(item, "rect", label, x=x, y=y + 2, width=14, height=9, fill=OUTCOMES["timeout"][0])
                self.el(item, "line", None, x1=x + 9, x2=x + 9, y1=y, y2=y + 13, stroke=colour)
            elif shape == "evidence":
                self.el(item, "rect", label, x=x, y=y + 1, width=14, height=10, fill="#ffffff",
                        stroke=colour, stroke_width="2")
            elif shape == "op":
                self.el(item, "rect", label, x=x, y=y + 3, width=14, height=6, fill=colour)
            elif shape == "fault":
                self.el(item, "rect", label, x=x, y=y, width=14, height=12, fill=colour, fill_opacity="0.45",
                        stroke="#e65100", stroke_width="0.6")
            else:
                self.el(item, "rect", label, x=x, y=y + 1, width=14, height=10, fill=colour)
            self.text(item, x + 19, y + 10, label, None, fill="#333333")
            x += w
        self.text(g, 70, y + 30, "Network bars: body = outcome (client's view when matched), right cap = how "
                  "the proxy saw it close; duration written on bars wide enough. Hover any element for "
                  "exact times.", None, fill="#757575", font_size="10")
        return y + 36


def _row_size(rows: int) -> tuple[float, float]:
    """(row pitch, bar height) for a lane with ``rows`` stacked bars: 12/10 px, shrinking when many."""
    if rows <= 6:
        return 12.0, 10.0
    bar = max(3.0, min(10.0, 72.0 / rows))
    return bar + 1.5, bar


def _dedupe(items: list[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def _serialise(root: ET.Element) -> str:
    """The SVG text of ``root`` with every text, tail and attribute redacted (no password in a
    timeline: hover texts quote event fields such as ``error``)."""
    for node in root.iter():
        node.text, node.tail = redact(node.text), redact(node.tail)
        for key, value in node.attrib.items():
            node.attrib[key] = redact(value)
    return ET.tostring(root, encoding="unicode")


def render_svg(history_or_events: History | Iterable[Event] | Iterable[Mapping[str, Any]],
               title: str = "History timeline", meta: Mapping[str, Any] | None = None,
               evidence: Iterable[int] = ()) -> str:
    """Draw a history as a self-contained SVG document (a string) - see the module docstring.

    Accepts a :class:`History`, a list of :class:`Event` or of their dict form. ``meta`` (default:
    the history's) adds the test/client/backend to the summary line and wall-clock times to hovers.
    ``evidence`` (event indices, e.g. of a violated verdict) outlines the bars drawn from those events
    in red and marks each evidence event on an *Evidence* band.
    An empty history gives a small picture saying so. Serves every rule indirectly: it is the picture
    attached to each suite test next to the history. No password reaches the picture."""
    events, meta_d = coerce_events(history_or_events, meta)
    if not events:
        root = ET.Element("svg", {"xmlns": "http://www.w3.org/2000/svg", "width": str(WIDTH),
                                  "height": "60", "viewBox": f"0 0 {WIDTH} 60", "font-family": FONT,
                                  "font-size": "12"})
        ET.SubElement(root, "rect", {"x": "0", "y": "0", "width": str(WIDTH), "height": "60",
                                     "fill": "#ffffff"})
        t = ET.SubElement(root, "text", {"x": "10", "y": "24", "font-weight": "bold"})
        t.text = title
        t2 = ET.SubElement(root, "text", {"x": "10", "y": "44", "fill": "#757575"})
        t2.text = "empty history: no events were recorded"
        return _serialise(root)
    return _Svg(build_model(events), meta_d, evidence).render(title)
