"""Sub-commands that work on saved results: ``check`` (re-check a saved history offline),
``timeline`` (draw a saved history as SVG) and ``report`` (build the offline Allure HTML report).

Exit codes of ``check`` (see docs/reports.md): 0 every verdict kept, 1 at least one rule violated,
4 no violation but at least one verdict unknown, 2 bad input (unknown rule, bad file or parameter),
3 harness error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.paths import unwritable_reason

EXIT_KEPT = 0
EXIT_VIOLATED = 1
EXIT_UNKNOWN = 4


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``check``, ``timeline`` and ``report`` to the ``failover-harness`` command line."""
    p = sub.add_parser(
        "check", help="re-check a saved history (JSON lines) against rule IDs",
        description="Run registered checkers on a saved history. Exit 0 = all kept, 1 = a rule "
        "violated, 4 = no violation but a verdict unknown, 2 = bad input.")
    p.add_argument("history", type=Path, help="a history saved as JSON lines (*.jsonl)")
    p.add_argument("--rules", default="recorded",
                   help="comma-separated rule IDs, e.g. MIR-5,MIR-4; 'recorded' (default) = the rules the "
                   "suite checked in this history, with the parameters it used; 'all' = every rule of the "
                   "history's profile (and of the rules it cites); parameters always come from the history "
                   "first, --param overrides them with a note")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="checker parameter (repeatable); VALUE is parsed as JSON when it can be "
                   "(15, 0.5, true, [1,2]) else taken as text; RULE:KEY=VALUE targets one rule")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON lines instead")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (repeatable): a module registering user rules with "
                   "harness.rules.registry.rule; entry points of group failover_harness.rules and env "
                   "FAILOVER_HARNESS_RULES are imported too")
    p.set_defaults(func=cmd_check)

    t = sub.add_parser("timeline", help="draw a saved history as an SVG timeline")
    t.add_argument("history", type=Path, help="a history saved as JSON lines (*.jsonl)")
    t.add_argument("-o", "--output", type=Path, help="SVG file to write (default: HISTORY.svg)")
    t.add_argument("--title", help="title drawn above the timeline (default: the file name)")
    t.set_defaults(func=cmd_timeline)

    r = sub.add_parser("report", help="build the single-file offline Allure HTML report",
                       description="Generate the Allure 2 report from allure-results with the npm "
                       "allure-commandline under tools/, keeping the trend history of the previous "
                       "report. Prints the path of the HTML file.")
    r.add_argument("--results", type=Path, default=None,
                   help="allure results folder (default: reports/allure-results)")
    r.add_argument("--output", type=Path, default=None,
                   help="report folder (default: reports/allure-report)")
    r.add_argument("--history-from", type=Path, default=None, metavar="DIR",
                   help="carry the Allure trend from this earlier report (a folder with history/ or a single-file "
                   "index.html, e.g. the previous nightly's); default: the previous report in --output")
    r.add_argument("--multi-file", action="store_true",
                   help="write the classic multi-file report (needs a web server) instead of one HTML")
    r.set_defaults(func=cmd_report)


def parse_value(text: str) -> Any:
    """A ``--param`` value: JSON when it parses (numbers, true/false, lists), else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_params(items: list[str], rule_ids: list[str]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``KEY=VALUE`` (any rule whose checker takes KEY) and ``RULE:KEY=VALUE`` (that rule only) into
    ``(global_params, per_rule_params)``."""
    common: dict[str, Any] = {}
    per_rule: dict[str, dict[str, Any]] = {r: {} for r in rule_ids}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param {item!r}: expected KEY=VALUE (or RULE:KEY=VALUE), e.g. mode=async")
        target, colon, name = key.strip().rpartition(":")
        if colon:
            target = target.strip().upper()
            if target not in per_rule:
                raise ConfigError(f"--param {item!r} names rule {target}, which is not in --rules")
            per_rule[target][name.strip()] = parse_value(value)
        else:
            common[name.strip()] = parse_value(value)
    return common, per_rule


def recorded_params(meta: dict[str, Any], rule_id: str) -> list[dict[str, Any]]:
    """The parameter sets a suite judged ``rule_id`` with (``details["params"]`` of the verdicts saved
    in the history's meta), each once, in order; ``[{}]`` when there are none (then only
    ``meta["rule_params"]`` and ``--param`` supply parameters)."""
    seen: list[dict[str, Any]] = []
    for v in meta.get("verdicts", []):
        params = (v.get("details") or {}).get("params")
        if v.get("rule_id") == rule_id and isinstance(params, dict) and params not in seen:
            seen.append(params)
    return seen or [{}]


def profile_rules(meta: dict[str, Any], known: list[str]) -> list[str]:
    """``--rules all`` for one history: the registered rules of the families of its profile
    (``meta["profile"]``, else the profile of the rules it cites) and of every rule it cites or
    judged; every registered rule for a history that names none (an old or hand-made one)."""
    from harness.profiles import get_profile, profile_of_rules

    cited = [str(r) for r in meta.get("rules") or []] + [str(v.get("rule_id")) for v in meta.get("verdicts", [])]
    families = {r.partition("-")[0].upper() for r in cited if "-" in r}
    name = meta.get("profile")
    profile = get_profile(name) if isinstance(name, str) and name else profile_of_rules(cited)
    if profile is not None:
        families |= set(profile.families)
    return [r for r in known if r.partition("-")[0] in families] if families else known


def override_notes(entry: Any, meta: dict[str, Any], recorded: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """One line per ``--param`` that replaces a value the history supplies (its meta or the
    parameters the suite judged with), so a re-check that differs from the suite says why."""
    own = {**entry.params_from_meta(meta), **recorded}
    return [f"note: {entry.rule_id} {k}={given[k]!r} overrides the history's {own[k]!r}"
            for k in sorted(given) if k in own and own[k] != given[k]]


def cmd_check(args: argparse.Namespace) -> int:
    """``failover-harness check``: re-check a saved history; one line per verdict. Profile, mode and
    every checker parameter come from the history (recorded when its test started); ``--param``
    overrides them, with a note on stderr."""
    from harness.history.store import read_jsonl
    from harness.rules import registry

    registry.load_user_rules(getattr(args, "plugin", []) or [])

    rule_ids = [r.strip().upper() for r in args.rules.split(",") if r.strip()]
    if rule_ids == ["ALL"]:
        meta, _ = read_jsonl(args.history)
        rule_ids = profile_rules(meta, registry.all_rules())
    elif rule_ids == ["RECORDED"]:
        meta, _ = read_jsonl(args.history)
        rule_ids = list(dict.fromkeys(v["rule_id"] for v in meta.get("verdicts", [])))
        if not rule_ids:
            raise ConfigError(f"{args.history} records no checked verdicts; name the rules with --rules "
                              "(e.g. --rules DUR-1) and their parameters with --param")
    if not rule_ids:
        raise ConfigError("--rules is empty; give rule IDs such as DUR-1 or MIR-5,MIR-4")
    entries = [registry.get(r) for r in rule_ids]  # unknown IDs fail before anything runs
    common, per_rule = parse_params(args.param, [e.rule_id for e in entries])
    unused = set(common)
    calls = []
    for entry in entries:
        accepted = entry.accepted_params()
        params = {k: v for k, v in common.items() if accepted is None or k in accepted}
        unused -= set(params)
        params.update(per_rule[entry.rule_id])
        calls.append((entry, params))
    if unused:
        raise ConfigError(f"--param {', '.join(sorted(unused))}: no checker among "
                          f"{', '.join(rule_ids)} takes it")
    meta, events = read_jsonl(args.history)
    verdicts = []
    notes: list[str] = []
    for entry, params in calls:
        for recorded in recorded_params(meta, entry.rule_id):
            notes += override_notes(entry, meta, recorded, params)
            verdicts.append(entry.check(events, meta, **{**recorded, **params}))
    for note in dict.fromkeys(notes):  # once every parameter was accepted: a bad one is the only line
        print(note, file=sys.stderr)
    for v in verdicts:
        if args.json:
            print(json.dumps(v.to_dict(), default=str))
        else:
            shown = ", ".join(map(str, v.evidence[:12])) + (", …" if len(v.evidence) > 12 else "")
            evidence = f" [events {shown}]" if v.evidence else ""
            print(f"{v.rule_id} {v.status.upper()}: expected {v.expected or '-'}; "
                  f"observed {v.observed or '-'}{evidence}")
    if any(v.valid is False for v in verdicts):
        return EXIT_VIOLATED
    if any(v.valid not in (True, False) for v in verdicts):
        return EXIT_UNKNOWN
    return EXIT_KEPT


def cmd_timeline(args: argparse.Namespace) -> int:
    """``failover-harness timeline``: write the SVG timeline of a saved history."""
    from harness.history.store import load_jsonl
    from harness.report.timeline_svg import render_svg

    history = load_jsonl(args.history)
    out = args.output or args.history.with_suffix(".svg")
    reason = "it is a folder" if out.is_dir() else unwritable_reason(out.parent)
    if reason:
        raise ConfigError(f"cannot write the timeline to {out} ({reason}); give a file path you can write with -o")
    out.write_text(render_svg(history, title=args.title or args.history.name), encoding="utf-8")
    print(out)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``failover-harness report``: build the Allure HTML report and print where it is."""
    from harness.report.builder import build_report

    path = build_report(args.results, args.output, single_file=not args.multi_file, history_from=args.history_from)
    print(path)
    sys.stdout.flush()
    return 0
