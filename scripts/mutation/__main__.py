"""``python -m scripts.mutation [--jobs N] [--sample N --seed S] [--module PATH] [--list]``.

Runs the mutation test configured in ``[tool.mutation]`` of ``pyproject.toml`` and prints the kill
rate per module (docs/mutation.md). Exit status 1 when a module of a full run is below
``fail_under`` or a mutant could not be judged; 2 for bad settings or a broken baseline.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import sys
import time
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # so that `harness` is this checkout's, whatever PYTHONPATH says
    sys.path.insert(0, str(REPO))

from scripts.mutation import report, settings  # noqa: E402
from scripts.mutation.baseline import Baseline, run_session  # noqa: E402
from scripts.mutation.sites import FuncKey, Site, find_sites  # noqa: E402
from scripts.mutation.worker import Job, Outcome, Target, keyed_codes, live_functions, run_jobs  # noqa: E402

PYTEST_ARGS = ["-q", "-s", "-p", "no:cacheprovider", "-p", "no:timeout", "--no-header", "--assert=plain", "--tb=no"]


def _hypothesis_profile() -> None:
    """Property tests must judge every mutant alike: fixed examples, no example database shared
    between mutants, no shrinking (a kill needs one failing example), no timing health checks."""
    from hypothesis import HealthCheck, Phase
    from hypothesis import settings as hsettings

    hsettings.register_profile(
        "mutation",
        database=None,
        derandomize=True,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    hsettings.load_profile("mutation")


def _target(rel: str, users: dict[str, set[FuncKey | None]]) -> Target:
    path = REPO / rel
    tree = ast.parse(path.read_text(), str(path))
    name = rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    original = keyed_codes(compile(tree, str(path), "exec", dont_inherit=True))
    return Target(path, rel, name, tree, find_sites(rel, tree, users), original, {})


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m scripts.mutation", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1, help="mutants run at a time (default 1)")
    p.add_argument("--sample", type=int, default=0, metavar="N", help="run N mutants per module, drawn with --seed")
    p.add_argument("--seed", type=int, default=16, help="seed of --sample (default 16)")
    p.add_argument("--module", action="append", default=[], metavar="PATH", help="only this module (repeatable)")
    p.add_argument("--list", action="store_true", help="list the mutants (line, key) and exit")
    p.add_argument("--out", type=Path, default=REPO / "reports" / "mutation", help="where the result files go")
    a = p.parse_args(argv)
    if a.jobs < 1 or a.sample < 0:
        p.error("--jobs must be >= 1 and --sample >= 0")
    return a


def _chosen(t: Target, cfg: settings.Settings, a: argparse.Namespace) -> tuple[list[Site], int]:
    """The sites of ``t`` to run (equivalents left out, sampled if asked) and how many were excluded."""
    sites = [s for s in t.sites if f"{t.rel}::{s.key}" not in cfg.equivalent]
    excluded = len(t.sites) - len(sites)
    if a.sample and a.sample < len(sites):
        rng = random.Random(f"{a.seed}:{t.rel}")
        sites = sorted(rng.sample(sorted(sites, key=lambda s: s.key), a.sample), key=lambda s: s.line)
    return sites, excluded


def _reload_order(site: Site, base: Baseline, users: dict[str, set[FuncKey | None]]) -> list[str]:
    """Every test, those likely to notice a module-level mutant first: the callers of the function
    whose decorator or default holds it, or of the functions using the name it assigns."""
    funcs = {site.owner} if site.owner else set()
    for name in site.assigns:
        funcs |= {f for f in users.get(name, set()) if f is not None}
    first = set().union(*(base.callers.get(f, set()) for f in funcs if f is not None)) if funcs else set()
    order = {n: i for i, n in enumerate(base.tests)}
    return sorted(base.tests, key=lambda n: (n not in first, base.durations.get(n, 0.0), order[n]))


def _job(t: Target, site: Site, base: Baseline, cfg: settings.Settings,
         users: dict[str, set[FuncKey | None]]) -> Job | None:
    """How to run ``site``: patch the function for the tests that reach it, or re-import for all."""
    inner = site.funcs[-1] if site.funcs else None
    if inner is None or inner in base.at_import:
        budget = sum(base.durations.values())
        tests = _reload_order(site, base, users)
        return Job(t, site, "reload", tests, tests, max(cfg.timeout_floor, cfg.timeout_factor * budget))
    tests = base.tests_for(str(t.path), site.line, site.end_line, inner)
    if not tests:
        return None
    budget = sum(base.durations.get(n, 0.0) for n in tests)
    return Job(t, site, "patch", tests, list(cfg.tests), max(cfg.timeout_floor, cfg.timeout_factor * budget))


class _Run:
    """The part of the run that happens inside the pytest session, once the baseline passed."""

    def __init__(self, a: argparse.Namespace, cfg: settings.Settings, targets: list[Target], console: TextIO,
                 users: dict[str, set[FuncKey | None]]) -> None:
        self.a, self.cfg, self.targets, self.console, self.users = a, cfg, targets, console, users
        self.started = time.monotonic()
        self.error: settings.SettingsError | None = None

    def say(self, text: str = "") -> None:
        print(text, file=self.console, flush=True)

    @property
    def pytest_args(self) -> list[str]:
        return PYTEST_ARGS + self.cfg.pytest_args

    def __call__(self, base: Baseline) -> int:
        try:
            return self.run(base)
        except settings.SettingsError as exc:
            self.error = exc
            return 2

    def self_check(self, base: Baseline) -> None:
        """The unmutated modules, served both ways, must pass: else the tool (not a mutant) is wrong."""
        budget = max(self.cfg.timeout_floor, self.cfg.timeout_factor * sum(base.durations.values()))
        checks = [
            Job(t, None, mode, list(base.tests), list(self.cfg.tests), budget)
            for t in self.targets
            for mode in ("patch", "reload")
        ]
        bad: list[Outcome] = []
        run_jobs(checks, REPO, self.pytest_args, base.items, self.a.jobs,
                 lambda o: bad.append(o) if o.status != "survived" else None)
        if bad:
            lines = [f"{o.job.target.rel} ({o.job.mode}): {o.status}, exit {o.code}" for o in bad]
            raise settings.SettingsError("self-check failed - the unmutated module does not pass when served by "
                                         "the tool: " + "; ".join(lines))

    def run(self, base: Baseline) -> int:
        a, cfg, targets = self.a, self.cfg, self.targets
        problems = live_functions(targets)
        unreached = [t.rel for t in targets if str(t.path) not in base.files]
        if problems or unreached:
            raise settings.SettingsError("; ".join(problems[:3] + [f"no test reaches {u}" for u in unreached]))
        self.say(f"mutation: baseline {len(base.tests)} tests in {time.monotonic() - self.started:.1f} s "
                 f"({', '.join(cfg.tests)})")
        self.self_check(base)
        tallies: dict[str, report.ModuleTally] = {}
        jobs: list[Job] = []
        for t in targets:
            sites, excluded = _chosen(t, cfg, a)
            tally = tallies[t.rel] = report.ModuleTally(t.rel, len(t.sites), excluded, sampled=bool(a.sample))
            for site in sites:
                job = _job(t, site, base, cfg, self.users)
                if job is None:
                    tally.outcomes["no tests"] += 1
                    tally.left.append((site, "no tests"))
                else:
                    jobs.append(job)
        reloads = sum(j.mode == "reload" for j in jobs)
        self.say(f"mutation: {len(jobs)} mutants to run ({reloads} by re-import), {a.jobs} at a time")
        count = 0
        timings: list[tuple[float, str, int, str]] = []

        def done(o: Outcome) -> None:
            nonlocal count
            count += 1
            tally = tallies[o.job.target.rel]
            tally.outcomes[o.status] += 1
            timings.append((round(o.seconds, 2), o.job.mode, len(o.job.tests), o.status))
            if o.status in ("survived", "error"):
                assert o.job.site is not None
                tally.left.append((o.job.site, o.status if o.status == "survived" else f"error {o.code}"))
            if count % 100 == 0 or count == len(jobs):
                self.say(f"mutation: {count}/{len(jobs)} done, {time.monotonic() - self.started:.0f} s")

        run_jobs(jobs, REPO, self.pytest_args, base.items, a.jobs, done)
        return self.finish(list(tallies.values()), timings)

    def finish(self, rows: list[report.ModuleTally], timings: list[tuple[float, str, int, str]]) -> int:
        a, cfg = self.a, self.cfg
        elapsed = time.monotonic() - self.started
        self.say()
        self.say(report.table(rows))
        keys = {f"{t.rel}::{s.key}" for t in self.targets for s in t.sites}
        mutated = {t.rel for t in self.targets}
        for k in sorted(k for k in cfg.equivalent if k not in keys and k.split("::")[0] in mutated):
            self.say(f"mutation: warning: the equivalent mutant {k!r} no longer exists; remove it from pyproject.toml")
        meta = {"seconds": round(elapsed, 1), "jobs": a.jobs, "sample": a.sample, "seed": a.seed,
                "tests": cfg.tests, "slowest": sorted(timings, reverse=True)[:20]}
        report.write(a.out, rows, meta)
        self.say(f"\nmutation: {elapsed:.0f} s; survivors in {a.out / 'survivors.txt'}")
        errors = sum(t.outcomes["error"] for t in rows)
        low = [t.module for t in rows if not t.sampled and t.rate < cfg.fail_under]
        if errors:
            self.say(f"mutation: {errors} mutant(s) could not be judged (tool error); see survivors.txt")
        if low:
            self.say(f"mutation: below fail_under = {cfg.fail_under:g} %: {', '.join(low)}")
        return 1 if errors or low else 0


def main(argv: list[str] | None = None) -> int:
    """Run the mutation test; print the kill rate per module (docs/mutation.md)."""
    a = _args(argv)
    cfg = settings.load(REPO)
    modules = cfg.modules
    if a.module:
        unknown = [m for m in a.module if m not in cfg.modules]
        if unknown:
            raise settings.SettingsError(f"--module {unknown[0]} is not in [tool.mutation] modules {cfg.modules}")
        modules = a.module
    users: dict[str, set[FuncKey | None]] = {}
    targets = [_target(m, users) for m in modules]
    if a.list:
        for t in targets:
            for s in t.sites:
                print(f"{s.line:5d} {s.operator:8} {t.rel}::{s.key}")
        return 0
    _hypothesis_profile()
    a.out.mkdir(parents=True, exist_ok=True)
    log = a.out / "session.log"
    sys.stdout.flush()
    console = os.fdopen(os.dup(1), "w")
    saved = os.dup(1), os.dup(2)
    run = _Run(a, cfg, targets, console, users)
    with open(log, "w") as sink:  # pytest's own output (the baseline, the self-check) goes to the log
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            code, driver = run_session({str(t.path) for t in targets}, cfg.tests, run.pytest_args, run)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
    if run.error is not None:
        raise run.error
    if driver.base.failed or not driver.base.tests:
        failed = ", ".join(driver.base.failed[:3]) or f"pytest exit {code}"
        raise settings.SettingsError(f"the tests fail without any mutant ({failed}); see {log} and fix them first")
    return driver.status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except settings.SettingsError as exc:
        print(f"mutation: {exc}", file=sys.stderr)
        sys.exit(2)
