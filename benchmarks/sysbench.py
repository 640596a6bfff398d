"""PER clients under sysbench (RULEBOOK PER-1's published measurement: sysbench, 20 tables x 10,000
rows, 20 threads): Debian ``sysbench`` 1.0.20 with its ``pgsql`` driver, ``oltp_read_write`` and
``oltp_point_select`` (``--tests``), through each PER client side by side in the same run on the same
pair - direct, the reference persistent proxy in this process (``reference``, one worker) and as the
CLI runs it with one worker process per core (``reference-Nw``, ``persistent-proxy --workers N`` in a
subprocess), PgBouncer 1.18 in transaction and in session pooling, pgpool-II 4.3 when installed; and,
in the steady rounds only, two relays with no parsing (``benchmarks/relay_floor.py``: HAProxy in ``mode
tcp`` and a relay on the proxy's own event loop): what the extra hop alone costs here.

Run: ``python benchmarks/sysbench.py`` (≈15 min; ``--tests``, ``--clients``, ``--seconds``, ``--switchovers``,
``--threads``, ``--tables``, ``--table-size`` change it). Needs ``sysbench`` (``apt-get install -y sysbench``;
scripts/setup.sh lists it).

Per test, per client ``--rounds`` steady runs (the clients take turns) and one run with switchovers,
each ``--seconds`` long:

* *steady*: no fault; tps and 95th-percentile latency, each also as a ratio to direct;
* *switchovers*: ``--switchovers`` planned switchovers spread over the run, coordinated with the
  client when it coordinates (``faults.coordinate``: drain / resume, PAUSE / RESUME), and with no
  other client: each re-points itself to the current principal before its own runs (``catch_up``,
  no fault) instead of following every other client's switchovers; tps, p95,
  whether sysbench finished (it stops at the first error it cannot retry, e.g. a lost connection;
  1.0.20's pgsql driver even dies of SIGSEGV when a server goes away under it, as direct's does at
  the first switchover: the error column says ``sysbench died of SIGSEGV``)
  and the lowest 1-second tps seen (how deep the dip of a switchover is).

sysbench's errors it retries by itself (deadlocks, 40P01) are ``ignored``; ``reconnects`` are its own.
Prepared statements: sysbench's default (server-side, ``--db-ps-mode=auto``) for every client but
PgBouncer in transaction pooling (1.18 cannot carry them across transactions: ``disable``).
The pair runs without the fault proxy (``links="direct"``): the numbers are the clients' own cost.

Targets (reference proxy): tps >= 0.8x direct, p95 <= 1.25x direct; with switchovers: sysbench finishes.
Against the same run's other rows: steady tps >= 0.9x relay-floor-py and >= pgbouncer-session (per-round
ratios, intervals as below), and tps with switchovers >= pgbouncer-session's (one run each: point figures).
``in run`` says how many switchovers ended while sysbench still ran: pgbouncer-session's PAUSE never
completes with clients connected, so each of its switchovers first waits out the drain window (10 s
here) - in a 10 s run none of them happens inside it, and its "with switchovers" figure is a run
without one. The reference's row also says how many statements it re-prepared after its switchovers
(``lazy_prepares``): the new backends' parse and planning work, which sysbench did once at its start.
Each ratio target is judged by the 90 % interval of the per-round ratios (``harness.report.targets``,
distribution-free): ``met`` / ``NOT met`` only when the whole interval is on one side, else ``not
shown`` - five rounds are the fewest that bound it (defaults: 5 rounds of 10 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay_floor import HaproxyTcpRelay, PythonTcpRelay  # noqa: E402  (benchmarks/, this script's folder)
from rows import proxy_rows  # noqa: E402

from harness.clients import persistent as adapters  # noqa: E402
from harness.faults import Faults  # noqa: E402
from harness.faults.coordination import catch_up  # noqa: E402
from harness.report.targets import median_interval, verdict_text  # noqa: E402
from harness.topology import Pair  # noqa: E402
from harness.workload.sysbench import TESTS, Sysbench  # noqa: E402

TARGET_TPS_RATIO = 0.8
TARGET_P95_RATIO = 1.25
TARGET_VS_FLOOR = 0.9  # steady state: the reference against relay-floor-py, the hop alone
SYSBENCH = shutil.which("sysbench") or "/usr/bin/sysbench"
FLOORS = (HaproxyTcpRelay, PythonTcpRelay)  # steady rounds only: what the extra hop alone costs


CLIENTS = ("direct", "reference", "reference-workers", "pgbouncer-transaction", "pgbouncer-session", "pgpool",
           "relay-floor", "relay-floor-py")


def _clients(wanted: set[str]) -> list[tuple[str, Any]]:
    out = proxy_rows(wanted)
    pgpool = adapters.CLIENTS.get("pgpool")
    if "pgpool" in wanted:
        if pgpool is not None and (shutil.which("pgpool") or Path("/usr/sbin/pgpool").exists()):
            out.append(("pgpool", pgpool))
        else:
            print("pgpool-II not available: its row is skipped (apt-get install -y pgpool2)")
    if "relay-floor" in wanted and not HaproxyTcpRelay.available():
        print("haproxy not installed: relay-floor skipped (apt-get install -y haproxy)")
    return out


def _bench(address: tuple[str, int], creds: Any, opts: argparse.Namespace, ps_mode: str,
           test: str = "oltp_read_write") -> Sysbench:
    # harness.workload.sysbench: pgsql driver, the password in a 0600 option file (never on a command line)
    return Sysbench(address, creds.user, creds.password, creds.database, tables=opts.tables,
                    table_size=opts.table_size, driver="pgsql", ps_mode=ps_mode, test=test)


def _run(address: tuple[str, int], creds: Any, opts: argparse.Namespace, ps_mode: str,
         during: Any = None, test: str = "oltp_read_write") -> dict[str, Any]:
    nan = float("nan")
    with _bench(address, creds, opts, ps_mode, test) as bench:
        proc = bench.start(opts.seconds, threads=opts.threads)
        marks: list[tuple[float, float]] = []
        worker = None
        if during is not None:
            worker = threading.Thread(target=lambda: marks.extend(during()), daemon=True)
            worker.start()
        r = bench.finish(proc, timeout=opts.seconds + 120)
        ended = time.monotonic()
        if worker is not None:
            worker.join(120)
    out = r.output
    summary = "transactions:" in out
    result: dict[str, Any] = {"tps": r.tps if summary else nan, "p95": r.p95_ms if "95th percentile" in out else nan,
                              "ignored": r.errors if r.exit_code == 0 else 0, "reconnects": r.reconnects,
                              "min_interval_tps": r.min_interval_tps if r.intervals else nan}
    result["finished"] = r.exit_code == 0
    result["switchovers"] = len(marks)
    # switchovers that ended while sysbench still ran: a client whose drain waits out its window
    # (pgbouncer-session: PAUSE never completes) may see none inside a short run
    result["in_run"] = sum(1 for _, t1 in marks if t1 <= ended)
    if r.exit_code < 0:  # sysbench itself crashed (1.0.20's pgsql driver: SIGSEGV on a lost connection)
        result["error"] = f"sysbench died of {_signal_name(-r.exit_code)}"
    elif r.exit_code != 0:  # sysbench stopped at an error it does not retry (e.g. a lost connection)
        lines = [line.strip() for line in out.splitlines() if not line.startswith("[")]
        fatal = [line for line in lines if line.startswith("FATAL:") and "thread_run" not in line] or \
                [line for line in lines if "FATAL" in line or "error" in line.lower()] or lines[-1:] or ["?"]
        result["error"] = fatal[0][:140]
        if not summary and r.intervals:  # no summary: the mean of the reports until it stopped
            result["tps"] = sum(i["tps"] for i in r.intervals) / len(r.intervals)
    return result


def _signal_name(number: int) -> str:
    """``SIGSEGV`` for 11; ``signal N`` for a number Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _prepare(address: tuple[str, int], creds: Any, opts: argparse.Namespace) -> float:
    t0 = time.monotonic()
    with _bench(address, creds, opts, "auto") as bench:
        bench.cleanup(threads=min(opts.tables, 4))
        bench.prepare(threads=min(opts.tables, 4))
    return time.monotonic() - t0


def _fmt(value: float, spec: str) -> str:
    return "-" if value != value else format(value, spec)  # NaN -> "-"


def _measure(test: str, names: list[str], running: dict[str, Any], ps: dict[str, str], faults: Faults,
             creds: Any, opts: argparse.Namespace, started: float) -> dict[str, dict[str, Any]]:
    """One test: steady rounds (the clients taking turns), then one switchover run per client."""
    rows: dict[str, dict[str, Any]] = {}
    # steady runs: the clients take turns, round after round (a shared machine's load weighs on
    # each alike); a client's figures are the medians, its ratios the medians of per-round ratios
    steady_names = names + [kind.name for kind in FLOORS if kind.name in running]  # the floors: steady only
    steady_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in steady_names}
    for client in running.values():  # each sat out the other clients' switchovers: re-point it
        if client.coordinates:
            catch_up(client, faults.topology.principal.client_address)
    for _ in range(opts.rounds):
        for name in steady_names:
            steady_runs[name].append(_run(tuple(running[name].address), creds, opts, ps.get(name, "auto"), test=test))  # type: ignore[arg-type]
    # each client's switchover run has only that client coordinating (idle coordinated clients'
    # pools and workers shared the 2 cores with the measured one: benchmarks/persistent.py); one
    # that sat out earlier clients' switchovers re-points itself first
    for name in names:
        client = running[name]
        stop = None
        if client.coordinates:
            catch_up(client, faults.topology.principal.client_address)
            stop = faults.coordinate(client)
        try:

            def switch(name: str = name) -> list[tuple[float, float]]:
                marks = []
                gap = max(1.0, (opts.seconds - 4.0) / max(1, opts.switchovers))
                time.sleep(2.0)
                for _ in range(opts.switchovers):
                    t0 = time.monotonic()
                    try:
                        faults.switchover()
                    except Exception as exc:  # report it in the row; the next client still runs
                        print(f"{name}: switchover failed: {type(exc).__name__}: {exc}")
                        break
                    marks.append((t0, time.monotonic()))
                    time.sleep(max(0.0, gap - (time.monotonic() - t0)))
                return marks

            before = _lazy_prepares(client)
            switched = _run(tuple(client.address), creds, opts, ps[name], during=switch, test=test)  # type: ignore[arg-type]
            after = _lazy_prepares(client)
            if before is not None and after is not None:  # the statements re-prepared after the switchovers
                switched["lazy_prepares"] = after - before
        finally:
            if stop is not None:
                stop()
        rows[name] = {"steady": _steady(steady_runs[name], steady_runs["direct"]), "switched": switched,
                      "ps_mode": ps[name], "runs": steady_runs[name]}
        print(f"  {test} {name}: done ({time.monotonic() - started:.0f} s)", flush=True)
    for name in steady_names[len(names):]:
        rows[name] = {"steady": _steady(steady_runs[name], steady_runs["direct"]), "switched": None, "ps_mode": "auto",
                      "runs": steady_runs[name]}
    return rows


def _lazy_prepares(client: Any) -> int | None:
    """The reference proxy's ``lazy_prepares`` counter (each a Parse it re-sent on a new back connection
    just before its first use after a switchover, PER-2); None for another client."""
    try:
        return int(client.status()["counters"]["lazy_prepares"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _steady(runs: list[dict[str, Any]], direct: list[dict[str, Any]]) -> dict[str, Any]:
    """A client's steady figures: medians, and the medians of its per-round ratios to direct with
    their 90 % intervals (harness.report.targets)."""
    return {"tps": statistics.median(r["tps"] for r in runs),
            "p95": statistics.median(r["p95"] for r in runs),
            "tps_ratio": statistics.median(r["tps"] / d["tps"] for r, d in zip(runs, direct, strict=True)),
            "p95_ratio": statistics.median(r["p95"] / d["p95"] for r, d in zip(runs, direct, strict=True)),
            "tps_interval": _ratio_interval(runs, direct, "tps"),
            "p95_interval": _ratio_interval(runs, direct, "p95")}


def _ratio_interval(runs: list[dict[str, Any]], direct: list[dict[str, Any]], key: str) -> Any:
    """The median per-round ratio of ``key`` to direct's run of the same round, with its 90 % interval
    (None when a run gave no figure)."""
    ratios = [r[key] / d[key] for r, d in zip(runs, direct, strict=True) if r.get(key) and d.get(key)]
    return median_interval(ratios) if ratios else None


def _report(test: str, rows: dict[str, dict[str, Any]], version: str, prep: float, opts: argparse.Namespace,
            load: str) -> None:
    d = rows["direct"]["steady"]
    print(f"\n{version}, {test}, {opts.threads} threads, {opts.tables} x {opts.table_size} rows, "
          f"{opts.seconds:g} s per run, {os.cpu_count()} cores, {opts.mode} pair"
          f"{' (mirror readable)' if opts.mirror_readable else ''}, no fault proxy "
          f"(prepare {prep:.1f} s;\n"
          f"load average 1/5/15 min: {load})")
    print(f"{'client':<22}{'ps':>8}{'tps':>8}{'x dir':>7}{'90% ivl':>11}{'p95 ms':>9}{'x dir':>7}  |"
          f"{'sw tps':>8}{'x dir':>7}{'p95 ms':>9}{'min 1s':>8}{'in run':>8}{'finished':>10}{'ign':>5}  error")
    for name, r in rows.items():
        s, w = r["steady"], r["switched"]
        span = "-" if s["tps_interval"] is None else s["tps_interval"].span()
        steady = (f"{name:<22}{r['ps_mode']:>8}{_fmt(s['tps'], '.0f'):>8}{_fmt(s['tps_ratio'], '.2f'):>7}"
                  f"{span:>11}{_fmt(s['p95'], '.1f'):>9}{_fmt(s['p95_ratio'], '.2f'):>7}  |")
        if w is None:  # the relay floor: steady rounds only
            print(f"{steady}{'-':>8}{'-':>7}{'-':>9}{'-':>8}{'-':>8}{'-':>10}{'-':>5}")
            continue
        print(f"{steady}"
              f"{_fmt(w['tps'], '.0f'):>8}{_fmt(w['tps'] / d['tps'], '.2f'):>7}{_fmt(w['p95'], '.1f'):>9}"
              f"{_fmt(w['min_interval_tps'], '.0f'):>8}{w['in_run']:>5}/{w['switchovers']:<2}"
              f"{('yes' if w['finished'] else 'NO'):>10}{w['ignored']:>5}  "
              f"{w.get('error', '')}")
    print(f"steady: median of {opts.rounds} rounds in which the clients took turns; "
          "x dir = median per-round ratio to direct's steady run (sw tps: to direct's median);\n"
          "min 1s = the lowest tps of a 1-second report interval; "
          f"ign = errors sysbench retried itself (deadlocks); {opts.switchovers} switchovers per switchover run;\n"
          "in run = switchovers that ended before sysbench did / switchovers done (a drain that waits out its "
          "window - pgbouncer-session's PAUSE - can push them past the run)")
    for kind in FLOORS:
        if kind.name in rows:
            print(kind.legend)
    print(f"verdicts by the 90% interval of the {opts.rounds} per-round ratios (distribution-free; "
          "harness.report.targets): met / NOT met only when the whole interval says so")
    for name in [n for n in rows if n.startswith("reference")]:
        ref = rows[name]
        tps, p95 = ref["steady"]["tps_interval"], ref["steady"]["p95_interval"]
        tps_text = "no figure" if tps is None else verdict_text(tps, TARGET_TPS_RATIO, at_least=True, unit="x",
                                                                 what="rounds")
        p95_text = "no figure" if p95 is None else verdict_text(p95, TARGET_P95_RATIO, at_least=False, unit="x",
                                                                 what="rounds")
        print(f"{name} ({test}): tps {tps_text}\n{' ' * (len(name) + len(test) + 4)} p95 {p95_text}; "
              f"with switchovers sysbench {'finished' if ref['switched']['finished'] else 'did NOT finish'}")
        pad = " " * (len(name) + len(test) + 4)
        for other, target in (("relay-floor-py", TARGET_VS_FLOOR), ("pgbouncer-session", 1.0)):
            if other in rows:  # steady state against the hop alone / the pooler, per round
                ratio = _ratio_interval(ref["runs"], rows[other]["runs"], "tps")
                if ratio is not None:
                    print(f"{pad} steady tps against {other} (per-round ratio) "
                          f"{verdict_text(ratio, target, at_least=True, unit='x', what='rounds')}")
        pgb = rows.get("pgbouncer-session")
        if pgb is not None and pgb["switched"] is not None:
            w, p = ref["switched"], pgb["switched"]
            verdict = "met" if w["tps"] >= p["tps"] else "NOT met"
            if "lazy_prepares" in w:
                print(f"{pad} after its switchovers the proxy re-prepared {w['lazy_prepares']:,} statements "
                      f"({w['lazy_prepares'] / max(1, w['in_run']):,.0f} per switchover): the new backends' parse and "
                      "planning work that sysbench did once at its start")
            print(f"{pad} with switchovers {_fmt(w['tps'], '.0f')} tps "
                  f"({w['in_run']} switchovers in the run) against pgbouncer-session's {_fmt(p['tps'], '.0f')} "
                  f"({p['in_run']} in its run); target >= pgbouncer-session: {verdict} (one run each: point "
                  "figures, no interval)")


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _tests(text: str) -> list[str]:
    tests = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in tests if t not in TESTS]
    if not tests or unknown:
        raise SystemExit(f"--tests: unknown sysbench test {', '.join(unknown) or '(none)'}; use a comma-separated "
                         f"list of {', '.join(TESTS)}")
    return tests


def main() -> int:
    """Measure and print one table per test, the ratios and whether the targets are met."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", default="oltp_read_write,oltp_point_select",
                    help="comma-separated sysbench tests (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each sysbench run (default 10)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="steady rounds, clients taking turns (default 5: the fewest that bound the median "
                         "ratio's 90%% interval)")
    ap.add_argument("--switchovers", type=int, default=3, help="switchovers in the second run (default 3)")
    ap.add_argument("--threads", type=int, default=20, help="sysbench threads (default 20)")
    ap.add_argument("--tables", type=int, default=20, help="tables (default 20)")
    ap.add_argument("--table-size", type=int, default=10_000, help="rows per table (default 10,000)")
    ap.add_argument("--mode", choices=["sync", "async"], default="async")
    ap.add_argument("--mirror-readable", action="store_true",
                    help="run the mirror as a hot standby: the reference proxy then pre-attaches its sessions there "
                         "during a switchover")
    ap.add_argument("--clients", default=",".join(CLIENTS),
                    help=f"comma-separated rows to measure (default all: {','.join(CLIENTS)}; direct and reference "
                         "are always measured, the ratios need them; reference-workers is the row reference-<cores>w; "
                         "the relay floors run in the steady rounds only)")
    opts = ap.parse_args()
    wanted = {c.strip() for c in opts.clients.split(",") if c.strip()}
    if wanted - set(CLIENTS):
        ap.error(f"--clients: unknown {', '.join(sorted(wanted - set(CLIENTS)))}; choose from {', '.join(CLIENTS)}")
    tests = _tests(opts.tests)
    if not Path(SYSBENCH).exists():
        print("sysbench is not installed: apt-get install -y sysbench (scripts/setup.sh lists it)")
        return 2
    version = subprocess.run([SYSBENCH, "--version"], capture_output=True, text=True).stdout.strip()
    started = time.monotonic()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    loads: dict[str, str] = {}
    with Pair(mode=opts.mode, links="direct", mirror_readable=opts.mirror_readable) as pair:
        creds = pair.engine.credentials
        prep = _prepare(pair.principal.server_address, creds, opts)
        faults = Faults(pair)
        factories = dict(_clients(wanted))
        names = list(factories)
        running: dict[str, Any] = {}
        try:
            for name in names:
                running[name] = adapters.open_client(factories[name], pair=pair, drain_window=10.0,
                                                     recovery_window=30.0)
            ps = {name: "disable" if name == "pgbouncer-transaction" else "auto" for name in names}
            for test in tests:
                for kind in FLOORS:  # steady rounds only, to the principal of the moment
                    if kind.name in running:
                        running.pop(kind.name).stop()
                    if kind.name in wanted and kind.available():
                        running[kind.name] = kind(pair.principal.server_address, pair.principal.dsn(), pair).start()
                load = _loadavg()
                results[test] = _measure(test, names, running, ps, faults, creds, opts, started)
                loads[test] = f"{load} at the start, {_loadavg()} at the end"
        finally:
            for client in running.values():
                client.stop()
    for test in tests:
        _report(test, results[test], version, prep, opts, loads[test])
    print(f"total {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
