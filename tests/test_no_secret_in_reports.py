"""No secret in the reports ("a full make chaos leaves no password of the topology in reports/"): real
suites run through ``failover-harness run`` with Allure results and saved histories, then every
artefact - histories (.jsonl, .svg), every file of the Allure results, and the run's own terminal
output - is searched for the topology's password.

The run covers suites/durability, suites/mirroring/test_mir_connections.py (connection strings with
the password, refused ones included, MIR-2) and one persistent test (the reference proxy logging in
with it): the whole ``suites`` folder takes about 3 minutes, too long for ``make test``; it was
run the same way by hand (27 tests, no occurrence)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from harness.topology.postgres import PostgresEngine
from tests.support.checkout import repo_root

SUITES = ["suites/durability", "suites/mirroring/test_mir_connections.py",
          "suites/persistent/test_per_keepalive.py::test_per1_all_connections_kept_across_one_switchover"]


def test_suites_leave_no_topology_password_in_their_artefacts(tmp_path: Path) -> None:
    creds = PostgresEngine().credentials
    results, histories = tmp_path / "allure-results", tmp_path / "histories"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", *SUITES, "--results", str(results),
                           f"--pytest-arg=--history-dir={histories}"],
                          cwd=repo_root(), capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]  # 1: a client broke a rule
    files = [p for p in (*results.rglob("*"), *histories.rglob("*")) if p.is_file()]
    assert len(list(histories.glob("*.jsonl"))) >= 7 and len(list(histories.glob("*.svg"))) >= 7
    assert len(list(results.glob("*-result.json"))) >= 7 and list(results.glob("*-attachment.*"))
    needles = {creds.password.encode(), quote(creds.password, safe="").encode()}
    leaked = [str(p) for p in files if any(n in p.read_bytes() for n in needles)]
    assert not leaked, leaked
    assert not [n for n in needles if n in (proc.stdout + proc.stderr).encode()]
    # the histories do describe the topology and the connection strings - with the password left out
    joined = b"".join(p.read_bytes() for p in histories.glob("*.jsonl"))
    assert str(creds.passfile).encode() in joined  # each node's dsn, in the topology meta
    assert b'Password=\\"***\\"' in joined  # the connection strings the mirroring clients were given
