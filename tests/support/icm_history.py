"""Synthetic ICM histories (docs/icm.md event shapes) for the ICM-1..7 checker tests: a builder that
records the cluster layout, state changes, partitions and browser opens the way the stand-in, the
fault vocabulary, the routers and the browser record them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from harness.history.core import Event, History
from harness.topology.icm import DEFAULT_LAYOUT, availability_index


class IcmHistory:
    """``h = IcmHistory(); h.state("s1", sessions=40); h.open("mail.nsf", chosen="s2"); h.events()``.

    Each event is stamped 10 ms after the previous one, unless ``ticks`` gives the step before each
    event (0: the same timestamp as the previous one - a log's resolution)."""

    def __init__(self, layout: dict[str, tuple[str, ...]] | None = None, ticks: Iterator[float] | None = None) -> None:
        self.layout = dict(layout or DEFAULT_LAYOUT)
        self.h = History()
        self.t = 1000.0
        self.ticks = ticks
        self.down_servers: set[str] = set()
        self._n = 0
        self._fault = 0
        servers = [{"name": s, "databases": list(dbs),
                    "ports": {sc: {"proxy": f"p-{s}-{sc}", "listen": f"127.0.0.1:{7000 + i * 2 + j}"}
                              for j, sc in enumerate(("http", "https"))}}
                   for i, (s, dbs) in enumerate(self.layout.items())]
        self.rec("icm.cluster.up", servers=servers, order=list(self.layout))
        for s in self.layout:
            self.state(s)

    def rec(self, type_: str, **fields: Any) -> Event:
        """Record one event 10 ms after the previous one (or the next of ``ticks``)."""
        self.t += 0.01 if self.ticks is None else next(self.ticks, 0.0)
        return self.h.record(type_, t=self.t, **fields)

    def events(self) -> list[Event]:
        """The history so far."""
        return self.h.events()

    def state(self, server: str, sessions: int = 0, capacity: int = 100, availability_threshold: int = 0,
              max_users: int = 0, restricted: int = 0, with_index: bool = True) -> None:
        """``icm.server.state`` as the stand-in records it (``with_index`` False: without ``availability``)."""
        index = {"availability": availability_index(sessions, capacity)} if with_index else {}
        self.rec("icm.server.state", server=server, sessions=sessions, capacity=capacity,
                 availability_threshold=availability_threshold, max_users=max_users, restricted=restricted, **index)

    def router(self, name: str = "reference", mode: str = "redirect",
               limitations: dict[str, str] | None = None) -> None:
        """``icm.router.start``: the router under test and what it declares it cannot express."""
        self.rec("icm.router.start", router=name, mode=mode, limitations=dict(limitations or {}), http="h",
                 https="s")

    def mark(self, server: str, database: str, mark: str | None) -> None:
        """``icm.replica.mark``."""
        self.rec("icm.replica.mark", server=server, database=database, mark=mark, source="harness")

    def cut(self, port: str) -> int:
        """A partition of ``s1:http`` begins (returns the fault id for :meth:`heal`)."""
        self._fault += 1
        self.rec("fault.start", fault="partition", id=self._fault, node=port, params={"how": "blackhole"})
        return self._fault

    def heal(self, fid: int, port: str) -> None:
        """The partition ends."""
        self.rec("fault.end", fault="partition", id=fid, node=port, seconds=0.1, error=None)

    def down(self, server: str) -> None:
        """``icm.server.down``."""
        self.down_servers.add(server)
        self.rec("icm.server.down", server=server)

    def up(self, server: str) -> None:
        """``icm.server.up``."""
        self.down_servers.discard(server)
        self.rec("icm.server.up", server=server)

    def open(self, database: str = "mail.nsf", chosen: str | None = "s1", scheme: str = "https", *,
             process: str = "app", target: str = "router", probe: list[str] | None = None,
             probe_scheme: str | None = None,
             status: int | None = None, auth: str = "login", logins: int | None = None, redirect: bool = True,
             served: bool = True, decision: list[dict[str, Any]] | None = None, via: str | None = None,
             conns: bool = True, probe_late: bool = False) -> str:
        """One browser open: the request, the router's probes (``probe``: servers pinged, default every
        holder; a connection at its proxy and the server's ``icm.ping``), a redirect to ``chosen`` (or
        none when ``redirect`` is False: a proxy router), the chosen server's answer, the result.
        ``via`` is the pings' path as the stand-in records it (None: not recorded), ``conns`` whether
        the fault proxy's connections are recorded, ``probe_late`` pings only after the
        decision (after the redirect and the answer)."""
        self._n += 1
        rid = f"{process}-{self._n}"
        self.rec("icm.client.request", process=process, user=process, request_id=rid, url="u", scheme=scheme,
                 database=database, target=target)
        pings = list(self.layout if probe is None else probe) if target == "router" else []

        def ping() -> None:
            for server in pings:
                sc = probe_scheme or scheme
                if conns:
                    self.rec("conn.accepted", proxy=f"p-{server}-{sc}", conn_id=self._n, client="127.0.0.1:1")
                self.rec("icm.ping", server=server, scheme=sc, request_id=rid, **({"via": via} if via else {}))

        if target == "router":
            if not probe_late:
                ping()
            if decision is not None:
                self.rec("icm.router.decision", request_id=rid, database=database, scheme=scheme,
                         candidates=decision, chosen=chosen)
        if chosen is not None and redirect and target == "router":
            self.rec("icm.client.redirect", process=process, request_id=rid, location="l", server=chosen)
        final = status if status is not None else (200 if chosen is not None and served else None)
        if chosen is not None and served and final == 200:
            if auth == "login":
                self.rec("icm.served", server=chosen, scheme=scheme, database=database, status=401, request_id=rid,
                         user=process, auth="challenge")
            self.rec("icm.served", server=chosen, scheme=scheme, database=database, status=200, request_id=rid,
                     user=process, auth=auth)
        if probe_late:
            ping()
        self.rec("icm.client.result", process=process, request_id=rid, status=final,
                 served_by=chosen if final == 200 else None, error=None if final else "ConnectError",
                 logins=(1 if auth == "login" and final == 200 else 0) if logins is None else logins)
        return rid
