"""The ICM cluster stand-in, the reference router and the HAProxy / nginx adapters on real parts: a
PostgreSQL pair, the fault proxy, TLS with trustme certificates, the real haproxy and nginx."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from harness.clients.icm import haproxy_router, nginx_router, open_router, reference_router
from harness.clients.icm.reference import ReferenceRouter
from harness.errors import ConfigError
from harness.history.core import History
from harness.rules.icm import check_port_probe
from harness.topology.icm import IcmCluster
from harness.topology.icm_relay import HistoryRelay
from harness.topology.local import LocalPair
from harness.topology.process import pid_alive
from harness.topology.run import load_state
from harness.workload.icm import IcmBrowser


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Any, IcmCluster, HistoryRelay]]:
    relay = HistoryRelay()
    with LocalPair(mode="async", history=relay) as pair:
        cluster = IcmCluster(pair, history=relay).up()
        try:
            yield pair, cluster, relay
        finally:
            cluster.down()


@pytest.fixture
def cluster(stack: tuple[Any, IcmCluster, HistoryRelay]) -> Iterator[IcmCluster]:
    _, c, relay = stack
    relay.bind(History())
    c.reset()
    c.bind(relay)
    yield c
    relay.bind(None)


def _events(cluster: IcmCluster, prefix: str) -> list[Any]:
    return cluster.history.target.events(prefix)


def test_a_request_reads_that_servers_own_database(cluster: IcmCluster) -> None:
    b = IcmBrowser(cluster, cluster.history, process="t")
    try:
        for server in cluster.servers:
            r = b.open(cluster.url(server, "https", "/mail.nsf"), "mail.nsf", target="server")
            assert (r.status, r.served_by, r.body["source"], r.logins) == (200, server, f"icm_{server}_mail", 1)
        again = b.open(cluster.url("s1", "http", "/mail.nsf"), "mail.nsf", target="server")
        assert again.logins == 1  # the HTTPS session cookie is another origin's: a new login on http
        missing = b.open(cluster.url("s3", "https", "/crm.nsf"), "crm.nsf", target="server")
        assert missing.status == 404
    finally:
        b.close()
    served = _events(cluster, "icm.served")
    assert [e.get("auth") for e in served[:2]] == ["challenge", "login"]
    assert all(cluster.password("alice") not in json.dumps(e.to_dict()) for e in cluster.history.target.events())


def test_settings_are_checked_and_recorded(cluster: IcmCluster) -> None:
    with pytest.raises(ConfigError, match="restricted"):
        cluster.set_server("s1", restricted=5)
    with pytest.raises(ConfigError, match="holds no replica"):
        cluster.mark("s3", "crm.nsf", "out-of-service")
    with pytest.raises(ConfigError, match="replica mark"):
        cluster.mark("s1", "mail.nsf", "broken")
    cluster.set_server("s2", sessions=25, availability_threshold=80)
    state = _events(cluster, "icm.server.state")[-1]
    assert (state.get("server"), state.get("availability"), state.get("availability_threshold")) == ("s2", 75, 80)


def test_cli_mark_state_reaches_the_cluster(stack: tuple[Any, IcmCluster, HistoryRelay], cluster: IcmCluster,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pair = stack[0]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-m", "harness.cli", "fault", "--run", pair.run_id, "mark-state", "s1",
           "--database", "mail.nsf", "--mark", "pending-delete", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["mark"] == "pending-delete"
    assert cluster.directory()["replicas"]["mail.nsf"]["s1"] == "pending-delete"
    mark = _events(cluster, "icm.replica.mark")[-1]
    assert (mark.get("server"), mark.get("mark"), mark.get("source")) == ("s1", "pending-delete", "cli")
    from harness.cli import main  # the same entry point in this process (a second interpreter costs seconds)

    assert main(cmd[3:7] + ["s3", "--database", "crm.nsf"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "s3/crm.nsf" in err and "Traceback" not in err


def test_a_failed_server_drops_its_connected_client(cluster: IcmCluster) -> None:
    b = IcmBrowser(cluster, cluster.history, process="k")
    try:
        url = cluster.url("s2", "https", "/mail.nsf")
        assert b.open(url, "mail.nsf", target="server").ok
        cluster.kill_server("s2")
        failed = b.open(url, "mail.nsf", target="server")
        assert failed.status is None and failed.error
        cluster.start_server("s2")
        assert b.open(url, "mail.nsf", target="server").logins == 1  # its sessions died with it
    finally:
        b.close()
    assert [e.type for e in cluster.history.target.events("icm.server.")][-2:] == ["icm.server.down", "icm.server.up"]


def test_reference_router_redirects_probes_and_counts(cluster: IcmCluster) -> None:
    h = cluster.history.target
    router = open_router(reference_router, cluster=cluster, history=h)
    b = IcmBrowser(cluster, h, process="r")
    try:
        cluster.set_server("s1", sessions=50)
        r = b.open(router.url("http", "/mail.nsf"), "mail.nsf")
        assert r.location == cluster.url("s2", "http", "/mail.nsf") and r.served_by == "s2"
        pings = [e for e in h.events("icm.ping") if e.get("request_id") == r.request_id]
        assert sorted((e.get("server"), e.get("scheme")) for e in pings) == [("s1", "http"), ("s2", "http"),
                                                                              ("s3", "http")]
        assert b.open(router.url("https", "/nope.nsf"), "nope.nsf").status == 404
        assert router.counters() == {"successful": 1, "unsuccessful": 0, "cluster_busy": 0}
    finally:
        b.close()
        router.stop()


class _BypassingRouter(ReferenceRouter):
    """The reference ICM, but pinging each listener's own address (``server_address``) - past the fault proxy."""

    name = "bypassing"

    def _probe(self, server: str, scheme: str, rid: str | None) -> bool:
        host, port = self.cluster.server_address(server, scheme)
        conn = (http.client.HTTPSConnection(host, port, timeout=self.probe_timeout, context=self._client_context)
                if scheme == "https" else http.client.HTTPConnection(host, port, timeout=self.probe_timeout))
        try:
            conn.request("GET", f"/icm/ping?for={rid or ''}")
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()


def _ping(address: tuple[str, int], rid: str) -> None:
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request("GET", f"/icm/ping?for={rid}")
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_a_ping_past_the_fault_proxy_is_recorded_and_not_counted(stack: tuple[Any, IcmCluster, HistoryRelay],
                                                                 cluster: IcmCluster) -> None:
    """ICM-3: a ping at ``address()`` is ``via: proxy``; one at ``server_address()`` bypasses every fault of
    that port and is ``via: direct`` (the embedded fault proxy names its upstream connections; a real
    toxiproxy-server does not, and ``via`` is then absent). A router probing that way breaks ICM-3."""
    known = getattr(stack[0].links.handle, "kind", None) == "embedded"
    _ping(cluster.address("s2", "http"), "via-proxy")
    _ping(cluster.server_address("s2", "http"), "via-direct")
    vias = {e.get("request_id"): e.get("via") for e in _events(cluster, "icm.ping")}
    expected = {"via-proxy": "proxy", "via-direct": "direct"} if known else {"via-proxy": None, "via-direct": None}
    assert vias == expected
    h = cluster.history.target
    router = open_router(_BypassingRouter, cluster=cluster, history=h)
    b = IcmBrowser(cluster, h, process="x")
    try:
        assert b.open(router.url("http", "/mail.nsf"), "mail.nsf").served_by == "s1"
    finally:
        b.close()
        router.stop()
    v = check_port_probe(h.events())
    if known:
        assert v.valid is False and "bypassing its fault proxy" in v.observed
    else:
        assert v.valid is not True


class _NeverPingingRouter(ReferenceRouter):
    """The reference ICM, but taking every candidate for reachable without a ping (no ICM-3 limitation:
    it claims to probe)."""

    name = "never-pings"

    def _probe(self, server: str, scheme: str, rid: str | None) -> bool:
        return True


def test_a_router_that_claims_to_probe_and_never_does_breaks_icm3(cluster: IcmCluster) -> None:
    h = cluster.history.target
    router = open_router(_NeverPingingRouter, cluster=cluster, history=h)
    b = IcmBrowser(cluster, h, process="n")
    try:
        assert b.open(router.url("https", "/mail.nsf"), "mail.nsf").served_by == "s1"
    finally:
        b.close()
        router.stop()
    assert not h.events("icm.ping")
    v = check_port_probe(h.events())
    assert v.valid is False and "no ping of its https port" in v.observed
    assert "never-pings declares that it probes" in v.observed
    assert h.events("icm.router.start")[0].index in v.evidence


@pytest.mark.parametrize("factory", [haproxy_router, nginx_router], ids=["haproxy", "nginx"])
def test_real_router_serves_both_schemes_and_is_stopped(stack: tuple[Any, IcmCluster, HistoryRelay],
                                                        cluster: IcmCluster, factory: Any) -> None:
    pair = stack[0]
    h = cluster.history.target
    router = open_router(factory, cluster=cluster, history=h)
    b = IcmBrowser(cluster, h, process="p")
    try:
        assert router.limitations and all(k.startswith("ICM-") for k in router.limitations)
        assert any(p.name == router.name and p.pid == router.pid for p in load_state(pair.path).processes)
        for scheme in ("http", "https"):
            r = b.open(router.url(scheme, "/crm.nsf"), "crm.nsf")
            assert r.ok and r.served_by in ("s1", "s2") and r.location is None
        cluster.set_server("s1", restricted=1)  # translated: drain / down
        assert h.events("client.reconfigured")
        assert b.open(router.url("https", "/crm.nsf"), "crm.nsf").served_by == "s2"
    finally:
        b.close()
        pid = router.pid
        router.stop()
    assert pid is not None and not pid_alive(pid)
    assert not any(p.pid == pid for p in load_state(pair.path).processes)


def test_fault_vocabulary_marks_cuts_and_kills(stack: tuple[Any, IcmCluster, HistoryRelay],
                                               cluster: IcmCluster) -> None:
    from harness.faults import Faults

    pair, h = stack[0], cluster.history.target
    with pytest.raises(ConfigError, match="mark-state needs an ICM cluster"):
        Faults(pair, h).mark_state("s1", "mail.nsf")
    faults = Faults(pair, h, cluster=cluster)
    with faults.mark_state("s1", "mail.nsf", "pending-delete"):
        assert cluster.directory()["replicas"]["mail.nsf"]["s1"] == "pending-delete"
    assert cluster.directory()["replicas"]["mail.nsf"]["s1"] is None
    with faults.partition("s1:http", how="refuse"):
        proxy = pair.links.client.get_proxy(cluster.proxy_name("s1:http"))
        assert not proxy.enabled and pair.links.client.get_proxy(cluster.proxy_name("s1:https")).enabled
    with faults.kill("s3"):
        assert not cluster.is_up("s3")
    assert cluster.is_up("s3")
    starts = [(e.get("fault"), e.get("node")) for e in h.events("fault.start")]
    assert starts == [("mark_state", "s1"), ("partition", "s1:http"), ("kill", "s3")]
    refused = h.events("fault.start")[1].get("params")
    assert refused["proxy"] == cluster.proxy_name("s1:http") and refused["listen"].endswith(
        str(cluster.address("s1", "http")[1]))
