"""ACR-2's retry schedule (``maxAcrRetries`` rounds, ``acrRetryInterval`` apart), ACR-6 judged on every
call that opens a transport, and ``failover-harness check`` judging a saved ACR history with the
history's own profile, mode and schedule (RULEBOOK ACR-2, ACR-6). Pure histories; the CLI in a
subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_acr_checkers import SETS, H, _first_statement_case, _prologue

from harness.history.store import save_jsonl
from harness.rules import acr, registry
from harness.rules.acr import check_group_address_tried_last, check_seamless_statement_replay

ADDRESSES = ("m1", "m2", "m3", "group")


def _ran_out(rounds: int, gap: float, *, group_last: bool = True) -> H:
    """Every primary address killed; a first statement whose client makes ``rounds`` rounds over the
    list ``gap`` s apart, then gives up with SQL30081N."""
    h = _prologue()
    for name in ADDRESSES:
        h.kill(name)
    op, value = h.stmt("SELECT 2", 2, 0, server=False)
    order = ADDRESSES if group_last else ("group", "m1", "m2", "m3")
    for k in range(rounds):
        if k:
            h.t += gap
        for name in order:
            h.transport(name, refused=True)
    h.fail(op, "execute", value, sqlstate="08001")
    h.heal()
    return h


def test_acr2_schedule_kept_with_one_retry_after_the_interval() -> None:
    v = check_seamless_statement_replay(_ran_out(2, 0.2).events(), max_acr_retries=1, acr_retry_interval=0.2)
    assert v.valid is True, v.summary


@pytest.mark.parametrize(("rounds", "gap", "why"), [
    (100, 0.2, "round(s)"),  # retried for 20 s instead of once
    (1, 0.2, "round(s)"),  # gave up without the retry
    (2, 0.0, "between two rounds"),  # no spacing
    (2, 3.0, "between two rounds"),  # far later than the interval
])
def test_acr2_schedule_broken(rounds: int, gap: float, why: str) -> None:
    v = check_seamless_statement_replay(_ran_out(rounds, gap).events(), max_acr_retries=1, acr_retry_interval=0.2)
    assert v.valid is False and why in v.observed and v.evidence, v.summary


def test_acr2_schedule_not_judged_without_its_parameters_or_the_capture() -> None:
    assert check_seamless_statement_replay(_ran_out(100, 0.2).events()).valid == "unknown"  # no schedule given
    h = H(capture=False)
    h.connect()
    for name in ADDRESSES:
        h.kill(name)
    op, value = h.stmt("SELECT 2", 1, 0, server=False)
    h.fail(op, "execute", value, sqlstate="08001")
    assert check_seamless_statement_replay(h.events(), max_acr_retries=1, acr_retry_interval=0.2).valid == "unknown"


def test_acr6_judged_on_a_reroute_and_broken_by_the_group_address_first() -> None:
    kept = check_group_address_tried_last(_first_statement_case().events())
    assert kept.valid is True, kept.summary
    h = _prologue()
    h.kill("m1")
    h.publish(down=("m1",))
    op, value = h.stmt("SELECT 2", 2, 0, server=False)
    h.reconnect("group", SETS)  # the group-wide address before the running members m2, m3
    h.server("SELECT 2")
    h.ok(op, "execute", value)
    v = check_group_address_tried_last(h.events())
    assert v.valid is False and "m2" in v.observed and "m3" in v.observed


# ---------------------------------------------------------------------- offline, from the history


def _save(h: H, tmp_path: Path, mode: str, rules: list[str], verdicts: list[dict] | None = None) -> Path:
    h.h.meta.update({"rules": rules, "profile": "acr", "verdicts": verdicts or [],
                     "acr_client": {"app": {"mode": mode, "options": {"max_acr_retries": 1,
                                                                      "acr_retry_interval": 0.2}}}})
    path = tmp_path / "h.jsonl"
    save_jsonl(h.h, path)
    return path


def _check(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", "check", str(path), *args, "--json"],
                          capture_output=True, text=True, timeout=60)


def test_params_come_from_the_history() -> None:
    meta = {"acr_client": {"app": {"mode": "non-seamless", "options": {"max_acr_retries": 2, "connect_timeout": 2}}},
            "rule_params": {"ACR-9": {"tolerance": 2.0}}}
    assert acr.params("ACR-2", meta) == {"mode": "non-seamless", "max_acr_retries": 2}
    assert acr.params("ACR-7", meta) == {"mode": "non-seamless"}
    assert acr.params("ACR-9", meta) == {"tolerance": 2.0}
    assert registry.get("ACR-2").params_from_meta(meta) == {"mode": "non-seamless", "max_acr_retries": 2}


def test_check_judges_a_non_seamless_history_in_its_own_mode(tmp_path: Path) -> None:
    """A seamless-mode rule on a non-seamless client's history is unknown offline, as in the suite."""
    path = _save(_first_statement_case(), tmp_path, "non-seamless", ["ACR-7"])
    got = _check(path, "--rules", "ACR-2")
    assert got.returncode == 4, got.stderr
    assert json.loads(got.stdout)["valid"] == "unknown"
    assert "non-seamless" in json.loads(got.stdout)["observed"]
    seamless = _check(_save(_first_statement_case(), tmp_path, "seamless", ["ACR-2"]), "--rules", "ACR-2")
    assert seamless.returncode == 0 and json.loads(seamless.stdout)["valid"] is True


def test_check_reads_the_schedule_and_a_param_overrides_it_with_a_note(tmp_path: Path) -> None:
    path = _save(_ran_out(2, 0.2), tmp_path, "seamless", ["ACR-2", "ACR-6"])
    assert _check(path, "--rules", "ACR-2").returncode == 0
    got = _check(path, "--rules", "ACR-2", "--param", "max_acr_retries=3")
    assert got.returncode == 1 and "maxAcrRetries=3" in got.stdout
    assert "note: ACR-2 max_acr_retries=3 overrides the history's 1" in got.stderr


def test_check_rules_all_means_the_rules_of_the_history_s_profile(tmp_path: Path) -> None:
    path = _save(_first_statement_case(), tmp_path, "seamless", ["ACR-1", "ACR-2", "DUR-1"])
    got = _check(path, "--rules", "all")
    assert got.returncode in (0, 4), got.stdout + got.stderr
    rules = [json.loads(line)["rule_id"] for line in got.stdout.splitlines()]
    assert rules == [f"ACR-{i}" for i in range(1, 10)] + ["DUR-1"]
    assert "MIR-1" not in got.stdout and "Traceback" not in got.stderr
