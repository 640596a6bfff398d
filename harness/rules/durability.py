"""DUR-1 - no acknowledged write lost (RULEBOOK, cross-cutting).

The workload records each write as ``op.invoke``/``op.ok`` with ``f="write"`` and ``value`` = the key
it wrote, and after the fault one final read ``op.ok`` with ``f="read_all"`` whose ``value`` is the
list of keys present on the primary. Every write acknowledged before that read started must be in it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from harness.errors import ConfigError
from harness.history.core import Event
from harness.rules.registry import rule
from harness.rules.verdict import UNKNOWN, Verdict

RULE_ID = "DUR-1"
MODES = ("sync", "async")


def _key(value: Any) -> str:
    """A hashable, order-stable identity for a written value (keys may be ints, strings or lists)."""
    return json.dumps(value, sort_keys=True, default=str)


def _short(keys: list[Any], limit: int = 10) -> str:
    text = ", ".join(map(repr, keys[:limit]))
    return text + (f", … ({len(keys) - limit} more)" if len(keys) > limit else "")


def params_from_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """DUR-1 parameters from a history's meta: ``meta["rule_params"]["DUR-1"]``, and ``mode`` from the
    topology the plugin recorded (``meta["topology"]["mode"]``, ``"sync"``/``"async"``)."""
    params: dict[str, Any] = {}
    topology = meta.get("topology")
    mode = topology.get("mode") if isinstance(topology, Mapping) else None
    if mode in MODES:
        params["mode"] = mode
    table = meta.get("rule_params") or {}
    own = table.get(RULE_ID) if isinstance(table, Mapping) else None
    if isinstance(own, Mapping):
        params.update(own)
    return params


@rule(RULE_ID, params_from_meta=params_from_meta)
def check_no_acknowledged_write_lost(events: list[Event], *, mode: str = "sync") -> Verdict:
    """DUR-1: every acknowledged write (``op.ok`` f=write) is in the final read (``op.ok`` f=read_all).

    ``mode`` is the replication mode of the pair: ``"sync"`` (high safety: a loss is a violation) or
    ``"async"`` (high performance: a loss is still reported as violated, worded as a finding with its
    size, never hidden). Without a final read the verdict is unknown. Writes acknowledged after the
    final read was invoked are not judged (listed in ``details["not_judged"]``)."""
    if mode not in MODES:
        raise ConfigError(f"DUR-1: mode must be one of {', '.join(MODES)}, not {mode!r}")
    ordered = sorted(events, key=lambda e: e.index)
    reads = [e for e in ordered if e.type == "op.ok" and e.get("f") == "read_all"]
    writes = [e for e in ordered if e.type == "op.ok" and e.get("f") == "write"]
    expected = ("every acknowledged write present on the primary after the fault"
                if mode == "sync" else
                "async (high-performance) mode: acknowledged writes may be lost; any loss is reported "
                "as a finding with its size")
    if not reads:
        return Verdict(RULE_ID, UNKNOWN, expected=expected,
                       observed=f"no final read (op.ok f=read_all) in the history; "
                                f"{len(writes)} acknowledged write(s) cannot be checked",
                       evidence=[w.index for w in writes[:20]], details={"mode": mode})
    final = reads[-1]
    # The read's invocation, if recorded, bounds which writes it must see.
    invoke = next((e for e in ordered if e.type == "op.invoke" and e.get("f") == "read_all"
                   and e.get("process") == final.get("process") and e.get("op_id") == final.get("op_id")
                   and e.index < final.index), None)
    cutoff = invoke.index if invoke is not None else final.index
    judged = [w for w in writes if w.index < cutoff]
    not_judged = [w for w in writes if w.index >= cutoff]
    value = final.get("value")
    if not isinstance(value, list | tuple | set | frozenset):
        return Verdict(RULE_ID, UNKNOWN, expected=expected,
                       observed=f"the final read's value is {type(value).__name__}, not a list of keys",
                       evidence=[final.index], details={"mode": mode})
    present = {_key(v) for v in value}
    lost = [w for w in judged if _key(w.get("value")) not in present]
    windows = exposure_windows(ordered)
    exposed = [w for w in judged if any(_inside(w, win) for win in windows)]
    details: dict[str, Any] = {
        "mode": mode, "acknowledged": len(judged), "present": len(present),
        "lost": [w.get("value") for w in lost], "lost_count": len(lost),
        "final_read": final.index, "not_judged": [w.get("value") for w in not_judged],
        "exposed_windows": windows, "exposed_writes": len(exposed),
    }
    note = (f"; {len(exposed)} of them acknowledged while the principal ran exposed (no second copy: "
            f"{_windows_text(windows)})" if windows else "")
    if not lost:
        return Verdict(RULE_ID, True, expected=expected,
                       observed=f"all {len(judged)} acknowledged write(s) present in the final read "
                                f"(event {final.index}){note}",
                       evidence=[final.index], details=details)
    lost_keys = [w.get("value") for w in lost]
    observed = (f"{len(lost)} of {len(judged)} acknowledged write(s) lost: {_short(lost_keys)}"
                + (" (finding: async mode)" if mode == "async" else "") + note)
    return Verdict(RULE_ID, False, expected=expected, observed=observed,
                   evidence=[w.index for w in lost] + [final.index], details=details)


def exposure_windows(events: list[Event]) -> list[dict[str, Any]]:
    """The windows in which a sync principal acknowledged writes with no second copy (after a
    failover, until a mirror rejoined: ``exposure.start`` / ``exposure.end``, docs/topology.md "The
    exposed window"), in order: ``{"node", "start", "end", "seconds"}`` with event indexes; ``end``
    and ``seconds`` are None for a window still open when the history ends."""
    windows: list[dict[str, Any]] = []
    open_by_node: dict[Any, dict[str, Any]] = {}
    for e in events:
        if e.type == "exposure.start":
            win = {"node": e.get("node"), "start": e.index, "end": None, "seconds": None}
            open_by_node[e.get("node")] = win
            windows.append(win)
        elif e.type == "exposure.end" and e.get("node") in open_by_node:
            win = open_by_node.pop(e.get("node"))
            win["end"], win["seconds"] = e.index, e.get("seconds")
    return windows


def _inside(write: Event, window: dict[str, Any]) -> bool:
    return window["start"] < write.index and (window["end"] is None or write.index < window["end"])


def _windows_text(windows: list[dict[str, Any]]) -> str:
    parts = []
    for w in windows:
        length = f"{w['seconds']:.3f} s" if isinstance(w["seconds"], int | float) else "until the end"
        parts.append(f"{w['node']} {length}, events {w['start']}-{w['end'] if w['end'] is not None else '…'}")
    return "; ".join(parts)
