"""Java drivers through ONE generic JDBC helper (``java/JdbcHelper.java``, JSON lines; protocol in
docs/clients.md) - reusable by any profile that needs a JDBC driver (e.g. an ACR adapter over
pgjdbc): :func:`start_jdbc_helper` takes the class path. The helper is compiled once with ``javac``
into ``<harness home>/java/<sha256 of the source>/`` and reused while the source is unchanged.

``pgjdbc`` (profile ``lpq``): Debian's ``libpostgresql-jdbc-java`` (``/usr/share/java/postgresql.jar``;
``FAILOVER_HARNESS_PGJDBC`` overrides). Translation (nothing more): the host list becomes the URL
``jdbc:postgresql://h1:p1,h2:p2/db``, ``target_session_attrs`` the documented ``targetServerType``
(``any``, ``primary``, ``secondary``, ``preferSecondary``; read-write → ``primary``, read-only /
standby → ``secondary``, prefer-standby → ``preferSecondary``), ``connect_timeout`` its
``connectTimeout`` (s), ``load_balance_hosts=random`` its ``loadBalanceHosts=true``."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from harness.clients.lpq.helper import JsonLinesHelper
from harness.clients.lpq.protocol import (
    HostListAdapter,
    HostListClientError,
    HostListOpenError,
    HostListSpec,
)
from harness.errors import ConfigError
from harness.paths import harness_home

SOURCE = Path(__file__).with_name("java") / "JdbcHelper.java"
PGJDBC_JAR = "/usr/share/java/postgresql.jar"
TARGET_SERVER_TYPE = {"any": "any", "read-write": "primary", "primary": "primary", "read-only": "secondary",
                      "standby": "secondary", "prefer-standby": "preferSecondary"}


def compiled_helper() -> Path:
    """The folder holding ``JdbcHelper.class`` for the current source (compiled on first use)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = harness_home() / "java" / digest
    if (out / "JdbcHelper.class").exists():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise ConfigError("javac is not installed (Debian: apt-get install default-jdk-headless); "
                          "run failover-harness setup")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([javac, "-d", str(tmp), str(SOURCE)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ConfigError(f"javac could not compile {SOURCE}: {proc.stderr.strip()[:300]}")
    try:
        tmp.rename(out)
    except OSError:  # another process compiled it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def start_jdbc_helper(class_path: list[str], *, name: str = "jdbc", driver_class: str | None = None) -> JsonLinesHelper:
    """A new generic JDBC helper (``java -cp HELPER:class_path JdbcHelper``); ``hello`` names the
    drivers on the class path (and ``driver_version`` of ``driver_class``)."""
    java = shutil.which("java")
    if java is None:
        raise ConfigError("java is not installed (Debian: apt-get install default-jre-headless); "
                          "run failover-harness setup")
    for jar in class_path:
        if not Path(jar).exists():
            raise ConfigError(f"{jar} does not exist (pgjdbc: apt-get install libpostgresql-jdbc-java; "
                              "or run failover-harness setup)")
    cp = os.pathsep.join([str(compiled_helper()), *class_path])
    helper = JsonLinesHelper([java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp, "JdbcHelper"], name=name)
    if driver_class:
        helper.hello = helper.call("hello", timeout=60, driver_class=driver_class)
    return helper


class PgjdbcClient(HostListAdapter):
    """pgjdbc behind the generic JDBC helper."""

    random_order = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        jar = os.environ.get("FAILOVER_HARNESS_PGJDBC", PGJDBC_JAR)
        self.helper = start_jdbc_helper([str(Path(jar).resolve())], name="pgjdbc", driver_class="org.postgresql.Driver")
        version = self.helper.hello.get("driver_version") or (self.helper.hello.get("drivers") or {}).get(
            "org.postgresql.Driver")
        self.driver = f"pgjdbc {version} (Java {self.helper.hello.get('java')})"

    def url(self, spec: HostListSpec) -> str:
        """``jdbc:postgresql://h1:p1,h2:p2/db``."""
        return f"jdbc:postgresql://{','.join(f'{h}:{p}' for h, p in spec.hosts)}/{spec.dbname}"

    def properties(self, spec: HostListSpec) -> dict[str, str]:
        """The pgjdbc connection properties for ``spec``."""
        props = {"user": spec.user, "password": spec.password or "",
                 "targetServerType": TARGET_SERVER_TYPE[spec.target_session_attrs]}
        if spec.connect_timeout is not None:
            props["connectTimeout"] = f"{max(1, round(spec.connect_timeout))}"
        if spec.load_balance_hosts == "random":
            props["loadBalanceHosts"] = "true"
        return props

    def describe(self, spec: HostListSpec) -> str:
        return f"{self.url(spec)} {dict(self.properties(spec), password='***')}"

    def _connect(self, spec: HostListSpec) -> Any:
        reply = self.helper.call("open", url=self.url(spec), properties=self.properties(spec))
        if not reply.get("ok"):
            raise HostListOpenError(str(reply.get("error")), sqlstate=reply.get("sqlstate"),
                                    reason="timeout" if "timeout" in str(reply.get("error")).lower() else "error")
        return reply["conn"]

    def _execute(self, handle: Any, sql: str) -> list[tuple[Any, ...]]:
        reply = self.helper.call("execute", conn=handle, sql=sql)
        if not reply.get("ok"):
            raise HostListClientError(str(reply.get("error")), sqlstate=reply.get("sqlstate"))
        return [tuple(r) for r in reply.get("rows") or []]

    def _close(self, handle: Any) -> None:
        self.helper.call("close", conn=handle, timeout=10)

    def _stop(self) -> None:
        self.helper.close()


def pgjdbc(history: Any = None, process: Any = None, **options: Any) -> PgjdbcClient:
    """Factory of ``pgjdbc``."""
    return PgjdbcClient(history=history, process=process, **options)
