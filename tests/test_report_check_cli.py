"""``failover-harness check`` (and ``timeline``): offline re-checking of a saved history."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.cli import main
from harness.history import History, save_jsonl


def _history(tmp_path: Path, present: list | None, meta: dict | None = None, name: str = "h.jsonl") -> Path:
    h = History(meta=meta or {})
    for i, key in enumerate(["k1", "k2"], start=1):
        h.record("op.invoke", process="w", op_id=i, f="write", value=key)
        h.record("op.ok", process="w", op_id=i, f="write", value=key)
    if present is not None:
        h.record("op.invoke", process="r", op_id=9, f="read_all", value=None)
        h.record("op.ok", process="r", op_id=9, f="read_all", value=present)
    return save_jsonl(h, tmp_path / name)


def test_kept_exits_0_and_prints_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(_history(tmp_path, ["k1", "k2"])), "--rules", "DUR-1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("DUR-1 KEPT: ")


def test_violated_exits_1_and_names_the_loss(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(_history(tmp_path, ["k1"])), "--rules", "dur-1"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("DUR-1 VIOLATED: ") and "'k2'" in out and "[events 3, 5]" in out


def test_unknown_exits_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(_history(tmp_path, None)), "--rules", "DUR-1"]) == 4
    assert capsys.readouterr().out.startswith("DUR-1 UNKNOWN: ")


def test_params_from_meta_and_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _history(tmp_path, ["k1"], meta={"rule_params": {"DUR-1": {"mode": "async"}}})
    assert main(["check", str(path), "--rules", "DUR-1", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert "async" in verdict["expected"] and verdict["details"]["lost"] == ["k2"]
    assert main(["check", str(path), "--rules", "DUR-1", "--param", "DUR-1:mode=sync"]) == 1
    assert "async" not in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--rules", "NOPE-1"], "known rules: "),
    (["--rules", "DUR-1", "--param", "mode"], "expected KEY=VALUE"),
    (["--rules", "DUR-1", "--param", "colour=red"], "no checker among DUR-1 takes it"),
    (["--rules", "DUR-1", "--param", "MIR-5:x=1"], "not in --rules"),
    (["--rules", "DUR-1", "--param", "mode=semi"], "mode must be one of"),
])
def test_bad_input_exits_2_with_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 args: list[str], message: str) -> None:
    assert main(["check", str(_history(tmp_path, ["k1", "k2"])), *args]) == 2
    assert message in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "none.jsonl"), "--rules", "DUR-1"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_console_script_end_to_end(tmp_path: Path) -> None:
    path = _history(tmp_path, ["k2"])
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "check", str(path), "--rules", "DUR-1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("DUR-1 VIOLATED")


def test_timeline_command_writes_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _history(tmp_path, ["k1"])
    assert main(["timeline", str(path)]) == 0
    svg = path.with_suffix(".svg")
    assert capsys.readouterr().out.strip() == str(svg)
    assert ET.parse(svg).getroot().tag == "{http://www.w3.org/2000/svg}svg"
