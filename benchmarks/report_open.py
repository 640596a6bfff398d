"""How big the single-file report is and how fast headless Chromium shows its overview
(docs/reports.md, "Report size"), beside a one-test report built in the same run (the floor: what
Allure's own page costs).

    python benchmarks/report_open.py [--report reports/allure-report/index.html] [--repeat 3]

For each report: its size, its attachments by kind (embedded bytes), and the wall time Chromium
(``chromium --headless``) takes until the overview's summary widget is in the page - the smallest
virtual-time budget that shows it, timed per launch; the median of ``--repeat`` launches. Needs
Debian's ``chromium`` (``apt-get install chromium``)."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from harness.paths import reports_dir
from harness.report.builder import build_report, embedded_files

BUDGETS_MS = (0, 250, 500, 1000, 2000, 4000, 8000)


def chromium() -> str:
    """The Chromium binary, or exit naming the package."""
    for name in ("chromium", "chromium-browser"):
        if found := shutil.which(name):
            return found
    sys.exit("report_open: no chromium on PATH; install it: apt-get install -y chromium")


def shows_overview(dom: str) -> bool:
    """Whether the dumped page has rendered the overview's summary widget (an element of that class,
    not the name in the page's scripts or styles)."""
    page = re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.S)
    return re.search(r'class="[^"]*\bsummary-widget__stats\b', page) is not None


def time_to_overview(index: Path, binary: str) -> tuple[float, int] | None:
    """(wall seconds, virtual budget in ms) of the first launch whose page shows the overview."""
    for budget in BUDGETS_MS:
        with tempfile.TemporaryDirectory() as profile:
            t0 = time.perf_counter()
            budget_arg = [f"--virtual-time-budget={budget}"] if budget else []
            proc = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                                   *budget_arg, "--dump-dom", index.resolve().as_uri()],
                                  capture_output=True, text=True, timeout=120)
            took = time.perf_counter() - t0
        if shows_overview(proc.stdout):
            return took, budget
    return None


def one_test_report(folder: Path) -> Path:
    """A report of one passed test (the floor)."""
    res = folder / "results"
    res.mkdir(parents=True)
    rid = str(uuid.uuid4())
    (res / f"{rid}-result.json").write_text(json.dumps({
        "uuid": rid, "historyId": "x", "name": "test_x", "fullName": "suite#test_x", "status": "passed",
        "start": 1_700_000_000_000, "stop": 1_700_000_000_100, "labels": []}))
    return build_report(res, folder / "report", environment={"backend": "local"})


def attachment_bytes(index: Path) -> dict[str, int]:
    """Embedded bytes of the report's attachments by extension."""
    out: dict[str, int] = {}
    for name, data in embedded_files(index).items():
        if name.startswith("data/attachments/"):
            ext = name.rsplit(".", 1)[-1] if "." in name else "?"
            out[ext] = out.get(ext, 0) + len(data)
    return out


def main() -> int:
    """Measure the given report beside the one-test floor."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=reports_dir() / "allure-report" / "index.html")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not args.report.is_file():
        sys.exit(f"report_open: no report at {args.report}; run make chaos first or pass --report")
    binary = chromium()
    with tempfile.TemporaryDirectory() as tmp:
        floor = one_test_report(Path(tmp))
        rows = []
        for label, index in (("report", args.report), ("one-test floor", floor)):
            times = []
            for _ in range(args.repeat):
                got = time_to_overview(index, binary)
                if got is None:
                    sys.exit(f"report_open: chromium never showed the overview of {index}")
                times.append(got[0])
            rows.append((label, index.stat().st_size, statistics.median(times), attachment_bytes(index)))
    base = rows[1][2]
    print(f"{'report':<16} {'size MB':>8} {'overview s':>11} {'x floor':>8}  attachments")
    for label, size, took, kinds in rows:
        att = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sorted(kinds.items()))
        print(f"{label:<16} {size / 1e6:>8.2f} {took:>11.2f} {took / base:>8.2f}  {att or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
