"""The app profile against real pools on a real pair (one switchover each): the adapters shown in
docs/clients.md keep every rule, and a pool that does not validate its connections breaks APP-4 with
the request and the proxy's close as evidence."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from harness.history.store import read_jsonl
from tests.support.checkout import repo_root

FH = [sys.executable, "-m", "harness.cli"]
SUITE = str(repo_root() / "suites" / "app" / "test_app_faults.py")


def _run(tmp_path: Path, client: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    histories = tmp_path / "h"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(FH + ["run", SUITE, "--client", client, "-k", "switchover", "--results", str(tmp_path / "r"),
                               f"--pytest-arg=--history-dir={histories}"],
                         capture_output=True, text=True, timeout=240, env=env)
    saved = list(histories.glob("*.jsonl"))
    assert len(saved) == 1, out.stdout[-3000:] + out.stderr[-2000:]
    meta, _ = read_jsonl(saved[0])
    return out, {v["rule_id"]: v for v in meta.get("verdicts", [])}


def test_the_docs_adapters_keep_every_rule_across_a_switchover(tmp_path: Path) -> None:
    text = (repo_root() / "docs" / "clients.md").read_text()
    section = text[text.index("## Put your app's pool under test"):]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    engine = next(b for b in blocks if "def make_engine" in b)
    pool = next(b for b in blocks if "def make_pool" in b)
    (tmp_path / "my_app_pool.py").write_text(engine)
    (tmp_path / "my_psycopg_pool.py").write_text(pool)
    for client in ("my_app_pool:make_engine", "my_psycopg_pool:make_pool"):
        out, verdicts = _run(tmp_path, client)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
        assert {r: v["valid"] for r, v in verdicts.items()} == {
            "APP-1": True, "APP-2": True, "APP-3": True, "APP-4": True, "APP-5": True, "DUR-1": True}
        for d in (tmp_path / "h", tmp_path / "r"):
            for f in d.glob("*"):
                f.unlink()


def test_sqlalchemy_without_pre_ping_breaks_app4_with_evidence(tmp_path: Path) -> None:
    out, verdicts = _run(tmp_path, "sqlalchemy")
    assert out.returncode == 1 and "APP-4" in out.stdout
    stale = verdicts["APP-4"]
    assert stale["valid"] is False and stale["evidence"] and stale["details"]["validates"] is False
    assert all(v["valid"] is True for r, v in verdicts.items() if r != "APP-4")
