"""HikariCP for the app profile, through the generic JDBC helper (:mod:`harness.clients.lpq.jdbc`,
``datasource_open``): a ``HikariDataSource`` over pgjdbc with the pair's host list
(``jdbc:postgresql://h1:p1,h2:p2/db?targetServerType=primary``), configured through its setters.
Debian packages: ``libhikaricp-java`` (``/usr/share/java/HikariCP.jar``, with ``libslf4j-java``) and
``libpostgresql-jdbc-java``. HikariCP validates a connection at checkout when it has been idle
longer than ``aliveBypassWindowMs`` (500 ms; ``Connection.isValid``)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from harness.clients.app.protocol import READ_SQL, WRITE_SQL, AppTarget, PoolSettings, RequestFailed
from harness.clients.lpq.jdbc import PGJDBC_JAR, start_jdbc_helper
from harness.errors import ConfigError

HIKARI_JAR = "/usr/share/java/HikariCP.jar"
SLF4J_JARS = ("/usr/share/java/slf4j-api.jar", "/usr/share/java/slf4j-nop.jar")


def _jar_version(jar: str) -> str:
    """The version a jar's Maven ``pom.properties`` records (``2.7.9``), else ``?``."""
    import zipfile

    try:
        with zipfile.ZipFile(jar) as z:
            for name in z.namelist():
                if name.endswith("/pom.properties"):
                    for line in z.read(name).decode("utf-8", "replace").splitlines():
                        if line.startswith("version="):
                            return line.partition("=")[2].strip()
    except (OSError, zipfile.BadZipFile):
        pass
    return "?"


class HikariPool:
    """``HikariDataSource`` (``maximumPoolSize``, ``connectionTimeout``) in a JDBC helper process."""

    def __init__(self, target: AppTarget, *, max_size: int = 4) -> None:
        missing = [j for j in (HIKARI_JAR, PGJDBC_JAR) if not Path(j).exists()]
        if missing:
            raise ConfigError(f"{', '.join(missing)} missing: apt-get install libhikaricp-java "
                              "libpostgresql-jdbc-java (or run scripts/setup.sh)")
        jars = [HIKARI_JAR, PGJDBC_JAR] + [j for j in SLF4J_JARS if Path(j).exists()]
        self.helper = start_jdbc_helper(jars, name="hikaricp", driver_class="org.postgresql.Driver")
        hosts = ",".join(f"{h}:{p}" for h, p in target.hosts)
        url = (f"jdbc:postgresql://{hosts}/{target.dbname}?targetServerType=primary"
               f"&connectTimeout={target.connect_timeout}")
        reply = self.helper.call("datasource_open", timeout=30, **{"class": "com.zaxxer.hikari.HikariDataSource"},
                                 setters={"JdbcUrl": url, "Username": target.user, "Password": target.password,
                                          "MaximumPoolSize": max_size, "MinimumIdle": max_size,
                                          "ConnectionTimeout": 10000, "AutoCommit": False})
        if not reply.get("ok"):
            raise ConfigError(f"HikariCP did not start: {reply.get('error')}")
        self.datasource = reply["datasource"]
        self.settings = PoolSettings("hikaricp", max_size, 0, True,
                                     recovery_s=float(target.connect_timeout * len(target.hosts) + 1),
                                     library=f"HikariCP {reply.get('version') or _jar_version(HIKARI_JAR)} + pgjdbc "
                                             f"{self.helper.hello.get('driver_version') or '?'}",
                                     extra={"connectionTimeout_ms": 10000})

    def _call(self, op: str, **fields: Any) -> dict[str, Any]:
        return self.helper.call(op, timeout=60, **fields)

    def request(self, f: str, key: int, process: str) -> str | None:
        opened = self._call("open", datasource=self.datasource)
        if not opened.get("ok"):
            raise RequestFailed(str(opened.get("error")), None, "fail")
        conn, addr = opened["conn"], opened.get("address")
        try:
            sql, params = (WRITE_SQL, [key, process]) if f == "write" else (READ_SQL, [key])
            done = self._call("execute", conn=conn, sql=sql.replace("%s", "?"), params=params)
            if done.get("ok"):
                done = self._call("commit", conn=conn)
            if not done.get("ok"):
                with contextlib.suppress(Exception):
                    self._call("rollback", conn=conn)
                server_said = bool(done.get("sqlstate")) and not str(done.get("sqlstate")).startswith("08")
                raise RequestFailed(str(done.get("error")), addr, "fail" if f == "read" or server_said else "info")
            return addr
        finally:
            self._call("close", conn=conn)  # back to the pool (HikariCP evicts a broken one)

    def close(self) -> None:
        try:
            self._call("datasource_close", datasource=self.datasource)
        finally:
            self.helper.close()


def hikaricp(target: AppTarget, **kw: Any) -> HikariPool:
    """HikariCP over pgjdbc with the pair's host list."""
    return HikariPool(target, **kw)
