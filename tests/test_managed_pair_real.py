"""``--topology patroni-pair`` end to end with real Patroni 3, etcd and PostgreSQL 15 (through
pytester: the plugin builds the suite's ``pair`` as a Patroni topology): n1 leads when the fixture
returns, the mirror is Patroni's synchronous standby, a switchover through the fault vocabulary is
Patroni's and moves the principal, an operation only the harness can do is a one-line ConfigError,
and the history says the manager and what the test asked."""

from __future__ import annotations

import pytest

from harness.topology.patroni import check_installed

pytest_plugins = ["pytester"]


def test_pair_fixture_is_a_patroni_pair_whose_roles_patroni_swaps(pytester: pytest.Pytester) -> None:
    check_installed()  # MissingDependencyError (a harness error, never a skip) when Patroni is absent
    pytester.makepyfile('''
        import psycopg
        import pytest
        from harness.errors import ConfigError

        @pytest.mark.rule("DUR-1")
        @pytest.mark.topology(mode="sync", mirror_readable=False)
        def test_managed(pair, faults, history):
            assert pair.topology == "patroni-pair" and pair.principal.name == "n1"
            assert pair.mirror.name == "n2" and pair.mirror.role == "mirror"
            with psycopg.connect(pair.dsn(), autocommit=True, connect_timeout=5) as conn:
                assert conn.execute("SELECT inet_server_port()").fetchone()[0] is not None
                assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
            faults.switchover()
            assert pair.principal.name == "n2"
            with pytest.raises(ConfigError, match="Patroni restarts a stopped server"):
                pair.stop("n1")
            ops = [e.get("op") for e in history.events("ham.op") if e.get("phase") == "end"]
            assert ops == ["switchover"], ops
            assert history.meta["managed"] == {"manager": "patroni", "topology": "patroni-pair",
                                               "mirror_readable_asked": False}
    ''')
    result = pytester.runpytest("--topology", "patroni-pair", "-p", "no:cacheprovider", "-x")
    result.assert_outcomes(passed=1)
