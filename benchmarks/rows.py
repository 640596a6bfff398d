"""The PER client rows both benchmarks measure (``benchmarks/persistent.py``, ``benchmarks/sysbench.py``;
PER-1 targets): direct and the reference proxy always, the ratios need them; the CLI proxy with one worker
process per core and PgBouncer's two pooling modes when asked for."""

from __future__ import annotations

import os
import shutil
from typing import Any

from harness.clients import persistent as adapters
from harness.clients.persistent.reference_process import reference_workers


def proxy_rows(wanted: set[str]) -> list[tuple[str, Any]]:
    """``(row name, client factory)`` in table order for the rows named in ``wanted``
    (``reference-workers`` is the row ``reference-<cores>w``); PgBouncer's rows are skipped, saying
    so, when it is not installed."""
    rows: list[tuple[str, Any]] = [("direct", adapters.direct), ("reference", adapters.reference_client)]
    if "reference-workers" in wanted:
        rows.append((f"reference-{os.cpu_count() or 1}w", reference_workers))
    bouncers = [(n, f) for n, f in (("pgbouncer-transaction", adapters.pgbouncer_transaction),
                                    ("pgbouncer-session", adapters.pgbouncer_session)) if n in wanted]
    if bouncers and shutil.which("pgbouncer"):
        rows += bouncers
    elif bouncers:
        print("pgbouncer not installed: its rows are skipped (apt-get install -y pgbouncer)")
    return rows
