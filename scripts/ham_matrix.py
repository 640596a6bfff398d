"""Regenerate docs/matrix-ham.md (manager x fault x rule -> verdict, failover times beside the
documented bound) from the manager benchmarks' result files (harness/report/ham_matrix.py):

    .venv/bin/python scripts/ham_matrix.py            # rewrites docs/matrix-ham.md
    .venv/bin/python scripts/ham_matrix.py --print    # prints it only
    .venv/bin/python scripts/ham_matrix.py --results DIR
    .venv/bin/python scripts/ham_matrix.py --from-histories DIR --result FILE --source TEXT --measured TEXT
                                                       # a suite run's verdicts as a result file

A pg_auto_failover benchmark adds its own file (``"manager": "pg_auto_failover"``) to
benchmarks/results/ham/; ``tests/test_ham_matrix.py`` fails while the document differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.errors import ConfigError  # noqa: E402
from harness.report.ham_matrix import from_suite_histories, load_results, render  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "ham"
DOC = ROOT / "docs" / "matrix-ham.md"


def main(argv: list[str]) -> int:
    """Render the matrix from ``--results`` (default benchmarks/results/ham) and print or write it."""
    ap = argparse.ArgumentParser(description="regenerate docs/matrix-ham.md")
    ap.add_argument("--print", action="store_true", help="print instead of writing docs/matrix-ham.md")
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of result files (*.json)")
    ap.add_argument("--from-histories", type=Path, metavar="DIR",
                    help="turn the histories (*.jsonl) of a suite run into the result file --result")
    ap.add_argument("--result", type=Path, help="the result file --from-histories writes")
    ap.add_argument("--source", default="failover-harness run suites/ham", help="what ran (--from-histories)")
    ap.add_argument("--measured", default="-", help="when and under what load (--from-histories)")
    args = ap.parse_args(argv)
    if args.from_histories:
        return convert(args)
    if not args.results.is_dir():
        print(f"ham_matrix: no results folder {args.results}", file=sys.stderr)
        return 2
    try:
        text = render(load_results(p for p in args.results.glob("*.json") if not p.name.endswith(".history.json")))
    except ConfigError as exc:
        print(f"ham_matrix: {exc}", file=sys.stderr)
        return 2
    if args.print:
        sys.stdout.write(text)
    else:
        DOC.write_text(text)
    return 0


def convert(args: argparse.Namespace) -> int:
    """``--from-histories DIR --result FILE``: the verdicts of the suite run's histories (their header
    lines) as a result file of the matrix."""
    if args.result is None:
        print("ham_matrix: --from-histories needs --result FILE", file=sys.stderr)
        return 2
    metas = []
    for path in sorted(args.from_histories.glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            metas.append(json.loads(f.readline()).get("meta", {}))
    try:
        result = from_suite_histories(metas, args.source, args.measured)
    except ConfigError as exc:
        print(f"ham_matrix: {exc}", file=sys.stderr)
        return 2
    args.result.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
