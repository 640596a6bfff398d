"""The ACR group topology (RULEBOOK ACR-1…9, seed 003): DB2 data-sharing groups, PostgreSQL stand-in.

**(interpretation)** A DB2 for z/OS data-sharing group is several members (DB2 subsystems) over one
shared copy of the data. The stand-in serves every member of a group from *one* PostgreSQL
primary (the principal of a pair, whose synchronous mirror keeps DUR-1 meaningful), each member
behind its own fault-proxy address ``fh-<run>-acr-<member>``: a row committed through member A is
visible through member B because they are the same database, and a member fault is a fault of that
member's address only (kill = the proxy disabled: its connections drop, new connects are refused;
black-hole = a timeout toxic), while the other members serve. The group-wide address (the DB2
group DVIPA, tried last, ACR-6) is one more proxy (``group``); an optional alternate group (ACR-8)
has its own members and group address over the same primary (the stand-in of a group whose data
is kept in step, e.g. a GDPS peer).

The member list with weights (ACR-1, the Sysplex WLB server list) is *published by the server* as
the custom setting ``acr.members`` (``SHOW acr.members``: ``name=host:port/weight`` entries,
``;``-separated, highest weight first; ``acr.alternate`` likewise for the alternate group), the way
``mirroring.partner`` is published for MIR-9, and recorded as an ``acr.members`` event each time it
changes: a failed member leaves the list, a restored one comes back. The server's view of every
session (``server.stmt`` / ``server.session``) comes from its log (:mod:`harness.topology.serverlog`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.capture import CaptureTarget, RefusedConnectCapture
from harness.errors import CaptureUnavailable, ConfigError, ProxyError, TopologyError
from harness.topology.api import Topology
from harness.topology.proxied import CAPTURE_ENV, ProxiedLinks
from harness.topology.serverlog import SETTINGS, StatementLog

PRIMARY, ALTERNATE = "primary", "alternate"
#: The name of a group's group-wide address in member lists and events.
GROUP_ADDRESS = "group"


@dataclass(frozen=True)
class Member:
    """One member address of a group (or the group-wide address, ``name`` = ``group`` / ``agroup``)."""

    name: str
    group: str  # primary / alternate
    host: str
    port: int
    weight: int
    proxy: str
    kind: str = "member"  # member / group-address

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class AcrSpec:
    """What an ACR client is configured with (the ``db2dsdriver.cfg`` of the stand-in): the first
    member to connect to, the group-wide address, the alternate group's addresses, the login. The
    member list proper the client learns from the server (``acr.members``, ACR-1)."""

    members: tuple[Member, ...]  # primary group, configured order (the client's initial list)
    group_address: Member
    alternate: tuple[Member, ...] = ()
    alternate_address: Member | None = None
    dbname: str = ""
    user: str = ""
    password: str = field(default="", repr=False)
    application_name: str = ""

    def conninfo(self, member: Member, **extra: Any) -> str:
        """A libpq connection string for one address (holds the password: never print it)."""
        params = {"host": member.host, "port": member.port, "dbname": self.dbname, "user": self.user,
                  "password": self.password, "application_name": self.application_name, **extra}
        return " ".join(f"{k}={v}" for k, v in params.items() if v not in (None, ""))

    def public(self) -> dict[str, Any]:
        """The spec as it may be recorded (no password)."""
        return {"members": [asdict(m) for m in self.members], "group_address": asdict(self.group_address),
                "alternate": [asdict(m) for m in self.alternate],
                "alternate_address": asdict(self.alternate_address) if self.alternate_address else None,
                "dbname": self.dbname, "user": self.user, "application_name": self.application_name}


def format_members(members: list[Member]) -> str:
    """The ``acr.members`` value: ``name=host:port/weight;…``, highest weight first."""
    ordered = sorted(members, key=lambda m: -m.weight)
    return ";".join(f"{m.name}={m.address}/{m.weight}" for m in ordered)


def parse_members(text: str) -> list[tuple[str, str, int, int]]:
    """``acr.members`` back into ``(name, host, port, weight)``, in published order (ACR-1)."""
    out = []
    for item in filter(None, (p.strip() for p in (text or "").split(";"))):
        name, _, rest = item.partition("=")
        addr, _, weight = rest.partition("/")
        host, _, port = addr.rpartition(":")
        out.append((name, host, int(port), int(weight or 0)))
    return out


class AcrGroups:
    """The primary group (``members`` members) and optional alternate group (``alternate`` members)
    over the principal of a started, proxied ``topology`` (see the module docstring)."""

    def __init__(self, topology: Topology, history: Any = None, members: int = 3, alternate: int = 0,
                 weights: list[int] | None = None) -> None:
        if members < 3:
            raise ConfigError(f"an ACR data-sharing group needs at least 3 members, not {members!r}")
        if not isinstance(topology.links, ProxiedLinks):
            raise ConfigError("the ACR groups need the fault proxy in front of the nodes (default links)")
        self.topology = topology
        self.links: ProxiedLinks = topology.links
        self.history = history
        self.n_members, self.n_alternate = members, alternate
        self.weights = list(weights) if weights else [100 - 10 * i for i in range(members)]
        if len(self.weights) != members:
            raise ConfigError(f"weights must give one weight per member ({members}), not {weights!r}")
        self.addresses: list[Member] = []
        self.down_members: set[str] = set()
        self._log: StatementLog | None = None
        self._capture: RefusedConnectCapture | None = None
        self._unsettle: list[Any] = []
        self._lock = threading.RLock()
        self._toxics: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ lifecycle
    def up(self) -> AcrGroups:
        """Create the member / group-address proxies, turn on the server's statement log, start the
        log tail and the refused-connect capture, publish the member lists."""
        principal = self.topology.principal
        upstream = "{}:{}".format(*principal.server_address)
        run = self.topology.run_id
        plan = [(f"m{i + 1}", PRIMARY, self.weights[i], "member") for i in range(self.n_members)]
        plan.append((GROUP_ADDRESS, PRIMARY, 0, "group-address"))
        if self.n_alternate:
            plan += [(f"a{i + 1}", ALTERNATE, 100 - 10 * i, "member") for i in range(self.n_alternate)]
            plan.append(("agroup", ALTERNATE, 0, "group-address"))
        for name, group, weight, kind in plan:
            proxy = f"fh-{run}-acr-{name}"
            made = self.links.client.create_proxy(proxy, upstream=upstream, listen="127.0.0.1:0", node=name)
            self.links._created.append(made.name)  # the topology's teardown deletes it too
            host, _, port = made.listen.rpartition(":")
            self.addresses.append(Member(name, group, host, int(port), weight, proxy, kind))
        self._configure_server()
        self._start_observers(principal)
        self._record("acr.topology", addresses=[asdict(m) for m in self.addresses],
                     node=principal.name, design="one primary, one fault-proxy address per member")
        self.publish()
        return self

    def _configure_server(self) -> None:
        with self.topology.principal.admin() as conn:
            for key, value in SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {key} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")

    def _start_observers(self, principal: Any) -> None:
        if self.history is None:
            return
        self._log = StatementLog(principal.log_path, self.history.record, principal.name).start()
        self._unsettle.append(self.history.add_settler(self._log.settle))
        targets = [CaptureTarget(m.address, m.proxy, m.name) for m in self.addresses]
        capture = RefusedConnectCapture(targets, lambda ob: self.history.record(ob.type, t=ob.t, **ob.fields))
        try:
            import os

            if os.environ.get(CAPTURE_ENV, "").strip().lower() in ("0", "off", "no", "false"):
                raise CaptureUnavailable(f"turned off by {CAPTURE_ENV}")
            self._capture = capture.start()
            self._record("harness.capture", available=True, method=capture.method, reason=None,
                         targets=[{"listen": t.listen, "proxy": t.proxy, "node": t.node} for t in targets],
                         scope="acr")
            self._unsettle.append(self.history.add_settler(self._settle_capture))
        except CaptureUnavailable as exc:
            self._record("harness.capture", available=False, method=capture.method, reason=str(exc), scope="acr")

    def _settle_capture(self) -> None:
        if self._capture is None:
            return
        reason = self._capture.settle(2.0)
        if reason is not None:
            self._record("harness.capture", available=False, method=self._capture.method, reason=reason, scope="acr")
            self._capture.stop()
            self._capture = None

    def down(self) -> None:
        """Stop the observers (the proxies go with the topology's teardown)."""
        with contextlib.suppress(Exception):
            if self.history is not None:
                self.history.settle()
        for remove in self._unsettle:
            remove()
        self._unsettle.clear()
        if self._log is not None:
            self._log.stop()
            self._log = None
        if self._capture is not None:
            self._capture.stop()
            self._capture = None

    def __enter__(self) -> AcrGroups:
        try:
            return self.up()
        except BaseException:
            self.down()  # the observers it started; the proxies go with the topology
            raise

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ------------------------------------------------------------------ views
    def _record(self, type_: str, **fields: Any) -> None:
        if self.history is not None:
            self.history.record(type_, **fields)

    def address(self, name: str) -> Member:
        """The member (or group address) called ``name``."""
        for m in self.addresses:
            if m.name == name:
                return m
        raise ConfigError(f"no ACR member {name!r}; members: {', '.join(m.name for m in self.addresses)}")

    def members(self, group: str = PRIMARY, up_only: bool = True) -> list[Member]:
        """The members of ``group`` (those not failed, with ``up_only``), configured order."""
        return [m for m in self.addresses if m.group == group and m.kind == "member"
                and not (up_only and m.name in self.down_members)]

    def spec(self, application_name: str = "") -> AcrSpec:
        """What a client is configured with (see :class:`AcrSpec`)."""
        creds = self.topology.engine.credentials
        primary = tuple(self.members(PRIMARY, up_only=False))
        alternate = tuple(self.members(ALTERNATE, up_only=False))
        agroup = next((m for m in self.addresses if m.name == "agroup"), None)
        return AcrSpec(primary, self.address(GROUP_ADDRESS), alternate, agroup, creds.database, creds.user,
                       creds.password, application_name)

    def published(self) -> dict[str, str]:
        """What the server answers to ``SHOW acr.members`` / ``SHOW acr.alternate`` now."""
        with self.topology.principal.admin() as conn:
            return {"members": conn.execute("SHOW acr.members").fetchone()[0],
                    "alternate": conn.execute("SHOW acr.alternate").fetchone()[0]}

    # ------------------------------------------------------------------ member list (ACR-1)
    def publish(self, timeout: float = 5.0) -> None:
        """Publish the current member lists on the server and record them (``acr.members``) once a
        new session reads them (ACR-1)."""
        wanted = {"members": format_members(self.members(PRIMARY)),
                  "alternate": format_members(self.members(ALTERNATE))}
        with self.topology.principal.admin() as conn:
            conn.execute("SET acr.members = ''")  # defines the placeholder, so ALTER SYSTEM takes it
            conn.execute("SET acr.alternate = ''")
            conn.execute(f"ALTER SYSTEM SET acr.members = '{wanted['members']}'")
            conn.execute(f"ALTER SYSTEM SET acr.alternate = '{wanted['alternate']}'")
            conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + timeout
        while (seen := self.published()) != wanted:
            if time.monotonic() > deadline:
                raise TopologyError(f"the server still publishes {seen!r}, not {wanted!r}")
            time.sleep(0.02)
        for group, key in ((PRIMARY, "members"), (ALTERNATE, "alternate")):
            if group == PRIMARY or self.n_alternate:
                self._record("acr.members", group=group, value=seen[key],
                             members=[{"name": n, "address": f"{h}:{p}", "weight": w}
                                      for n, h, p, w in (_parse(seen[key]))],
                             down=sorted(self.down_members))

    # ------------------------------------------------------------------ member faults (raw)
    def fail(self, name: str, how: str = "kill") -> None:
        """Make one address fail: ``kill`` (proxy disabled: connections drop, connects refused) or
        ``blackhole`` (a timeout toxic on both streams: nothing answers); published (ACR-1)."""
        m = self.address(name)
        with self._lock:
            if how == "kill":
                self.links.client.disable_proxy(m.proxy)
            elif how == "blackhole":
                names = []
                for stream in ("upstream", "downstream"):
                    toxic = f"fh-acr-{name}-{stream}"
                    self.links.client.add_toxic(m.proxy, "timeout", name=toxic, stream=stream,
                                                attributes={"timeout": 0})
                    names.append(toxic)
                self._toxics[name] = names
            else:
                raise ConfigError(f"member fault how= must be 'kill' or 'blackhole', not {how!r}")
            if m.kind == "member":
                self.down_members.add(name)
        if m.kind == "member":
            self.publish()

    def restore(self, name: str) -> None:
        """Undo :meth:`fail` for one address (published again, ACR-1)."""
        m = self.address(name)
        with self._lock:
            for toxic in self._toxics.pop(name, []):
                with contextlib.suppress(ProxyError):
                    self.links.client.delete_toxic(m.proxy, toxic)
            self.links.client.enable_proxy(m.proxy)
            self.down_members.discard(name)
        if m.kind == "member":
            self.publish()


def _parse(text: str) -> list[tuple[str, str, int, int]]:
    return parse_members(text)
