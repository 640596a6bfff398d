"""The kill rate per module: the printed table, ``survivors.txt`` and ``results.json``."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from scripts.mutation.sites import Site

#: Outcomes that count as killed: a test failed, collection broke, or the mutant ran past its timeout.
KILLED = ("killed", "timeout")


@dataclass
class ModuleTally:
    """The outcomes of one module's mutants (``no tests``: no test reaches the mutated function)."""

    module: str
    sites: int  # every mutant of the module
    excluded: int = 0  # listed as equivalent
    sampled: bool = False
    outcomes: Counter[str] = field(default_factory=Counter)
    left: list[tuple[Site, str]] = field(default_factory=list)  # survivors and errors

    @property
    def judged(self) -> int:
        return sum(v for k, v in self.outcomes.items() if k != "error")

    @property
    def killed(self) -> int:
        return sum(self.outcomes[k] for k in KILLED)

    @property
    def rate(self) -> float:
        return 100.0 * self.killed / self.judged if self.judged else 0.0

    def interval(self) -> tuple[float, float]:
        """A 95 % Wilson interval of the rate (what a sampled run can claim)."""
        n = self.judged
        if not n:
            return 0.0, 0.0
        z, p = 1.96, self.killed / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)


def table(tallies: list[ModuleTally]) -> str:
    """The table ``make mutation`` prints: one row per module, the kill rate last."""
    head = f"{'module':42} {'mutants':>7} {'equiv':>5} {'run':>5} {'killed':>6} {'t/out':>5} {'surv':>5} " \
           f"{'untest':>6} {'err':>4}  kill rate"
    rows = [head, "-" * len(head)]
    for t in tallies:
        o = t.outcomes
        rate = f"{t.rate:5.1f} %"
        if t.sampled:
            lo, hi = t.interval()
            rate += f" (sampled; 95 % CI {lo:.0f}-{hi:.0f} %)"
        rows.append(
            f"{t.module:42} {t.sites:7d} {t.excluded:5d} {t.judged + o['error']:5d} {o['killed']:6d} "
            f"{o['timeout']:5d} {o['survived']:5d} {o['no tests']:6d} {o['error']:4d}  {rate}"
        )
    return "\n".join(rows)


def write(out: Path, tallies: list[ModuleTally], meta: dict[str, object]) -> None:
    """``survivors.txt`` (one line per mutant no test killed, with its key for an equivalent entry)
    and ``results.json`` (the numbers)."""
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for t in tallies:
        lines.append(f"# {t.module}: {len(t.left)} left")
        for site, status in sorted(t.left, key=lambda item: item[0].line):
            lines.append(f"{status:9} line {site.line:4d}  {site.module}::{site.key}")
    (out / "survivors.txt").write_text("\n".join(lines) + "\n")
    data = {
        **meta,
        "modules": [
            {
                "module": t.module,
                "mutants": t.sites,
                "equivalent": t.excluded,
                "sampled": t.sampled,
                "outcomes": dict(t.outcomes),
                "kill_rate": round(t.rate, 2),
                "left": [f"{s.module}::{s.key}" for s, _ in t.left],
            }
            for t in tallies
        ],
    }
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
