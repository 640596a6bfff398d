"""The suites' pair / group under a manager (``--topology patroni-pair``; harness/topology/managed.py,
harness/topology/patroni_topology.py), without starting Patroni: what is refused and why, the table
in docs/ha-managers.md being the code's own rendering, the plugin skipping (with the reason) the
tests a manager topology cannot serve, and bad ``--topology`` input refused in one line."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.topology import managed
from harness.topology.api import Group, Pair
from harness.topology.patroni_topology import PatroniGroup, PatroniPair, build, run_credentials

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent


def test_docs_table_is_the_rendering() -> None:
    doc = (ROOT / "docs" / "ha-managers.md").read_text()
    assert managed.with_table(doc) == doc, "stale managed table in docs/ha-managers.md: run scripts/capability_table.py"


def test_with_table_needs_its_markers() -> None:
    with pytest.raises(ValueError, match="no managed capability-table markers"):
        managed.with_table("# nothing here\n")


def test_every_refused_topology_operation_has_a_reason() -> None:
    for op in ("stop", "start", "kill", "pause", "resume", "add_node", "remove_node", "partner_setting"):
        why = managed.operation_refusal(op)
        assert why and "\n" not in why, op
    for op in ("switchover", "failover", "rejoin"):
        assert managed.operation_refusal(op) is None, op


@pytest.mark.parametrize(("rules", "refused"), [
    (["DUR-1"], False), (["LPQ-1", "LPQ-4"], False), (["HAM-1"], False),
    (["MIR-4"], True), (["PER-1"], True), (["APP-1"], True), (["LPQ-1", "MIR-4"], True), (["XYZ-1"], True),
])
def test_family_refusal(rules: list[str], refused: bool) -> None:
    assert (managed.family_refusal(rules) is not None) is refused


def test_build_gives_a_pair_or_a_group_that_refuses_harness_only_operations() -> None:
    pair = build(2, mode="sync", mirror_readable=False)
    assert isinstance(pair, PatroniPair) and isinstance(pair, Pair) and pair.topology == "patroni-pair"
    assert pair.mirror_readable is True and pair.mirror_readable_asked is False  # hot standbys, said so
    group = build(3, mode="async")
    assert isinstance(group, PatroniGroup) and isinstance(group, Group)
    assert group.cluster.timing.synchronous_mode is False and pair.cluster.timing.synchronous_mode is True
    assert pair.cluster.leader_first is True
    for call in (lambda: pair.stop("n1"), lambda: pair.kill("n1"), lambda: pair.pause("n1"),
                 lambda: pair.start("n1"), lambda: pair.add_node(), lambda: pair.partner_setting()):
        with pytest.raises(ConfigError) as info:
            call()
        assert "patroni-pair" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("kwargs", [{"mode": "semi"}, {"links": "direct"}])
def test_build_refuses_what_a_manager_topology_cannot_be(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        build(2, **kwargs)


def test_run_credentials_reads_the_runs_password_file(tmp_path: Path) -> None:
    (tmp_path / "pgpass").write_text("*:*:*:fh_app:s3cret:with:colons\n")
    creds = run_credentials(tmp_path)
    assert (creds.user, creds.password, creds.passfile) == ("fh_app", "s3cret:with:colons", str(tmp_path / "pgpass"))


def test_run_passes_the_topology_to_pytest() -> None:
    from harness.cli.run_cmds import add_run_options, pytest_args

    p = argparse.ArgumentParser()
    p.add_argument("paths", nargs="*")
    p.add_argument("--pytest-arg", dest="pytest_args", action="append")
    add_run_options(p)
    args = p.parse_args(["suites/durability", "--topology", "patroni-pair"])
    assert "--fh-topology=patroni-pair" in pytest_args(args)
    with pytest.raises(SystemExit):
        p.parse_args(["--topology", "pg-pair"])


def test_plugin_skips_unmanageable_families_with_the_reason(pytester: pytest.Pytester) -> None:
    """Collected under ``--topology patroni-pair``: a MIR test is skipped saying why, a DUR test is not
    skipped (it fails here on purpose before asking for a topology, proving it ran)."""
    pytester.makepyfile('''
        import pytest

        @pytest.mark.rule("MIR-4")
        def test_mir(pair):
            raise AssertionError("must not run")

        @pytest.mark.rule("DUR-1")
        def test_dur(request, harness_options):
            assert harness_options.topology == "patroni-pair"
            assert "pair" not in request.fixturenames
    ''')
    result = pytester.runpytest("--topology", "patroni-pair", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    assert "not under --topology patroni-pair: MIR needs an inactive partner" in result.stdout.str()
    assert any("topology=patroni-pair" in line for line in result.outlines)


def test_unknown_topology_is_one_line_before_any_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
        def test_never_runs(pair):
            raise AssertionError("must not run")
    ''')
    result = pytester.runpytest("--topology", "pg-triple", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and "unknown --topology 'pg-triple'" in errors[0], errors


def test_pgaf_topology_skips_every_client_suite_with_the_reason(pytester: pytest.Pytester) -> None:
    """Under ``--topology pgaf-pair`` a DUR test that asks for a pair is skipped saying the client suites
    under pg_auto_failover are not built; a test without a topology runs."""
    pytester.makepyfile('''
        import pytest

        @pytest.mark.rule("DUR-1")
        def test_dur(pair):
            raise AssertionError("must not run")

        def test_plain(harness_options):
            assert harness_options.topology == "pgaf-pair"
    ''')
    result = pytester.runpytest("--topology", "pgaf-pair", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    assert "not under --topology pgaf-pair: the ordinary suites under pg_auto_failover are not built" in \
        result.stdout.str()


@pytest.mark.parametrize(("topology", "kept", "dropped"), [("pgaf-group3", "test_ham_pgaf.py", "test_ham_patroni.py"),
                                                         ("patroni-group3", "test_ham_patroni.py", "test_ham_pgaf.py")])
def test_ham_suites_under_a_topology_run_that_managers_tests_only(topology: str, kept: str, dropped: str) -> None:
    """``run --profile ham --topology X``: suites/ham keeps the tests of X's manager and deselects the other's."""
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "suites/ham", f"--topology={topology}"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    ids = [line for line in res.stdout.splitlines() if "::" in line]
    assert ids and all(dropped not in i for i in ids) and any(kept in i for i in ids), res.stdout[-2000:]
    assert "deselected" in res.stdout
