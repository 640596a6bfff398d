"""Topology benchmark: how long the harness takes to bring a pair up (cold template and warm), to
switch over and to fail over, each printed beside the raw pg_ctl / pg_basebackup / pg_rewind time
of the same step measured in the same run, as a ratio (harness / raw).

Targets (issue "Foundation 1"): warm pair up <= 1.0 s, switchover <= 1.0 s, failover <= 0.5 s.

    python benchmarks/topology.py [--repeat 5]
    python benchmarks/topology.py --backend compose [--repeat 3]

With ``--backend compose`` it measures a pair behind the fault proxy on both backends in the same run
- containers behind the real Toxiproxy (``make compose-setup`` first) and local processes behind the
harness's default fault proxy - and prints compose beside local as a ratio (compose / local).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness.ports import allocate_port
from harness.topology import Pair
from harness.topology import postgres as pg
from harness.topology.process import database_user, kill_group, run_tool

RUN_AS = database_user()


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def must(res) -> None:
    if res.returncode != 0:
        raise SystemExit(f"raw step failed: {res.args}\n{res.stderr}")


class RawPair:
    """The same pair built the classic way with pg_ctl and pg_basebackup (same settings)."""

    def __init__(self, base: Path, template: Path) -> None:
        self.base, self.template = base, template
        self.bin = pg.pg_bindir()
        self.nodes = {}
        for name in ("a", "b"):
            d = base / name
            d.mkdir()
            RUN_AS.chown(d)
            self.nodes[name] = {"dir": d, "data": d / "data", "port": allocate_port(), "conf": d / "postgresql.conf"}
        self.primary, self.standby = "a", "b"

    def conf(self, name: str, standby_of: str | None) -> None:
        n = self.nodes[name]
        cfg = pg.ServerConfig(port=n["port"], socket_dir=n["dir"], application_name=name, synchronous=True,
                              standby_of=("127.0.0.1", self.nodes[standby_of]["port"]) if standby_of else None)
        n["conf"].write_text(cfg.render())
        RUN_AS.chown(n["conf"])

    def pg_ctl(self, *args: str):
        return run_tool([str(self.bin / "pg_ctl"), *args], RUN_AS, timeout=120)

    def start(self, name: str) -> None:
        n = self.nodes[name]
        must(self.pg_ctl("start", "-w", "-D", str(n["data"]), "-l", str(n["dir"] / "log"),
                         "-o", f"-c config_file={n['conf']}"))

    def up(self) -> None:
        a, b = self.nodes["a"], self.nodes["b"]
        pg.copy_template(self.template, a["data"])
        self.conf("a", None)
        self.start("a")
        must(run_tool([str(self.bin / "pg_basebackup"), "-D", str(b["data"]), "-h", "127.0.0.1", "-p", str(a["port"]),
                       "-U", "postgres", "-c", "fast", "-X", "stream", "--no-sync"], RUN_AS))
        pg.make_standby(b["data"], RUN_AS)
        self.conf("b", "a")
        self.start("b")
        self.wait_streaming("a", "b")

    def wait_streaming(self, primary: str, standby: str) -> None:
        p = self.nodes[primary]
        deadline = time.monotonic() + 30
        with pg.admin_connect(p["dir"], p["port"]) as conn:
            while time.monotonic() < deadline:
                row = conn.execute("SELECT state FROM pg_stat_replication WHERE application_name=%s",
                                   (standby,)).fetchone()
                if row and row[0] == "streaming":
                    return
                time.sleep(0.01)
        raise SystemExit("raw standby never streamed")

    def switchover(self) -> None:
        old, new = self.primary, self.standby
        o, n = self.nodes[old], self.nodes[new]
        must(self.pg_ctl("stop", "-w", "-m", "fast", "-D", str(o["data"])))
        must(self.pg_ctl("promote", "-w", "-D", str(n["data"])))
        self.conf(new, None)
        with pg.admin_connect(n["dir"], n["port"]) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CHECKPOINT")
        must(run_tool([str(self.bin / "pg_rewind"), "-D", str(o["data"]), "--no-sync",
                       f"--source-server=host={n['dir']} port={n['port']} user=postgres dbname=postgres"], RUN_AS))
        pg.make_standby(o["data"], RUN_AS)
        self.conf(old, new)
        self.start(old)
        self.wait_streaming(new, old)
        self.primary, self.standby = new, old

    def failover(self) -> None:
        old, new = self.primary, self.standby
        pid = int((self.nodes[old]["data"] / "postmaster.pid").read_text().split()[0])
        kill_group(pid)
        must(self.pg_ctl("promote", "-w", "-D", str(self.nodes[new]["data"])))
        self.primary, self.standby = new, old

    def down(self) -> None:
        for n in self.nodes.values():
            pidfile = n["data"] / "postmaster.pid"
            if pidfile.exists():
                kill_group(int(pidfile.read_text().split()[0]))


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def backends_side_by_side(repeat: int) -> None:
    """Pair up, switchover and failover on compose and on local, same run, as ratios."""
    from harness.topology.backend import get_backend, get_engine

    engine = get_engine("postgres")
    times: dict[str, dict[str, list[float]]] = {}
    for _ in range(repeat):
        for backend in ("local", "compose"):
            be = get_backend(backend)
            be.check(engine)
            pair = be.build(engine, 2)
            row = times.setdefault(backend, {"up": [], "switchover": [], "failover": []})
            try:
                row["up"].append(timed(pair.up))
                row["switchover"].append(pair.switchover().seconds)
                row["failover"].append(pair.failover().seconds)
            finally:
                pair.down()
    print(f"pair behind the fault proxy, median of {repeat} runs, seconds (compose / local = ratio)\n")
    print(f"{'step':12} {'compose':>8} {'local':>8} {'ratio':>7}")
    for step in ("up", "switchover", "failover"):
        c, lo = median(times["compose"][step]), median(times["local"][step])
        print(f"{step:12} {c:8.3f} {lo:8.3f} {c / lo:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement (default 5; compose 3)")
    parser.add_argument("--backend", choices=["local", "compose"], default="local",
                        help="compose: that backend beside local (same run, ratios)")
    args = parser.parse_args()
    if args.backend == "compose":
        backends_side_by_side(args.repeat or 3)
        return
    args.repeat = args.repeat or 5
    rows: list[tuple[str, float, float, str, float | None]] = []
    work = Path(tempfile.mkdtemp(prefix="fh-bench-", dir="/tmp"))
    work.chmod(0o755)
    RUN_AS.chown(work)
    try:
        # cold: a template made from scratch vs a bare initdb
        cold_dir = work / "templates"
        cold_dir.mkdir()
        RUN_AS.chown(cold_dir)
        os.environ["FAILOVER_HARNESS_TEMPLATES"] = str(cold_dir)
        cold = timed(lambda: Pair(links="direct").__enter__().down())
        raw_initdb_dir = work / "initdb"
        raw_initdb = timed(lambda: must(run_tool([str(pg.pg_bindir() / "initdb"), "-D", str(raw_initdb_dir), "-U",
                                                  "postgres", "--auth=trust", "--no-sync"], RUN_AS)))
        shutil.rmtree(raw_initdb_dir, ignore_errors=True)
        template = pg.template_dir(RUN_AS)
        rows.append(("pair up, cold template (incl. initdb)", cold, raw_initdb, "raw: initdb alone", None))

        harness_up, proxied_up, raw_up = [], [], []
        harness_sw, raw_sw, harness_fo, raw_fo = [], [], [], []
        for i in range(args.repeat):
            pair = Pair(links="direct")
            harness_up.append(timed(pair.up))
            harness_sw.append(pair.switchover().seconds)
            harness_fo.append(pair.failover().seconds)
            pair.down()
            pair = Pair()
            proxied_up.append(timed(pair.up))
            pair.down()
            base = work / f"raw{i}"
            base.mkdir()
            RUN_AS.chown(base)
            raw = RawPair(base, template)
            try:
                raw_up.append(timed(raw.up))
                raw_sw.append(timed(raw.switchover))
                raw_fo.append(timed(raw.failover))
            finally:
                raw.down()
        rows += [
            ("pair up, warm template (direct)", median(harness_up), median(raw_up),
             "raw: cp + pg_ctl start -w + pg_basebackup + pg_ctl start -w", 1.0),
            ("pair up, warm template (behind proxy)", median(proxied_up), median(raw_up), "same raw steps", 1.0),
            ("switchover", median(harness_sw), median(raw_sw),
             "raw: pg_ctl stop -m fast, promote -w, CHECKPOINT, pg_rewind, pg_ctl start -w", 1.0),
            ("failover", median(harness_fo), median(raw_fo), "raw: kill -9 + pg_ctl promote -w", 0.5),
        ]
    finally:
        os.environ.pop("FAILOVER_HARNESS_TEMPLATES", None)
        shutil.rmtree(work, ignore_errors=True)

    print(f"PostgreSQL {pg.server_version()}, median of {args.repeat} runs, seconds (harness / raw = ratio)\n")
    print(f"{'step':40} {'harness':>8} {'raw':>8} {'ratio':>6}  {'target':>7}  raw steps")
    for name, h, r, what, target in rows:
        verdict = "" if target is None else ("met" if h <= target else "MISSED")
        tgt = "" if target is None else f"<={target:.1f}"
        print(f"{name:40} {h:8.3f} {r:8.3f} {h / r:6.2f}  {tgt:>5} {verdict:6} {what}")


if __name__ == "__main__":
    main()
