"""node-postgres ``Pool`` for the app profile, behind a long-lived Node helper (``node_pool_helper.js``,
JSON lines, :mod:`harness.clients.lpq.helper`). node-postgres has no host list and no
``target_session_attrs``: the pool is given the pair's first node, as an application gives it its
database's one address - after a role change it cannot follow the principal, and the APP rules say
what that costs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from harness.clients.app.protocol import READ_SQL, WRITE_SQL, AppTarget, PoolSettings, RequestFailed
from harness.clients.lpq.helper import JsonLinesHelper
from harness.clients.lpq.node import node_modules
from harness.errors import ConfigError

HELPER_JS = Path(__file__).with_name("node_pool_helper.js")


def _pg_sql(sql: str) -> str:
    """``%s`` placeholders as node-postgres's ``$1, $2``."""
    out, n = sql, 1
    while "%s" in out:
        out = out.replace("%s", f"${n}", 1)
        n += 1
    return out


class NodePgPool:
    """``new Pool({host, port, max, connectionTimeoutMillis, idleTimeoutMillis})`` in a Node helper."""

    def __init__(self, target: AppTarget, *, max_size: int = 4) -> None:
        node = shutil.which("node")
        if node is None:
            raise ConfigError("node is not installed (Debian: apt-get install nodejs); run scripts/setup.sh")
        self.helper = JsonLinesHelper([node, str(HELPER_JS)], name="node-pg-pool",
                                      env={**os.environ, "NODE_PATH": str(node_modules())})
        host, port = target.hosts[0]
        self.helper.call("pool_open", timeout=10, options={
            "host": host, "port": port, "database": target.dbname, "user": target.user,
            "password": target.password, "max": max_size, "idleTimeoutMillis": 30000,
            "connectionTimeoutMillis": target.connect_timeout * 1000})
        version = (self.helper.hello.get("versions") or {}).get("pg")
        self.settings = PoolSettings("node-pg-pool", max_size, 0, False,
                                     recovery_s=float(target.connect_timeout + 1),
                                     library=f"pg {version} Pool (Node {self.helper.hello.get('node')})",
                                     extra={"hosts": 1})

    def request(self, f: str, key: int, process: str) -> str | None:
        reply: dict[str, Any] = self.helper.call("request", timeout=60, f=f, key=key, process=process,
                                                 write_sql=_pg_sql(WRITE_SQL), read_sql=_pg_sql(READ_SQL))
        if not reply.get("ok"):
            outcome = "fail" if f == "read" or reply.get("sqlstate") else "info"
            raise RequestFailed(str(reply.get("error")), reply.get("conn"), outcome)
        return reply.get("conn")

    def close(self) -> None:
        try:
            self.helper.call("pool_close", timeout=5)
        finally:
            self.helper.close()


def node_pg_pool(target: AppTarget, **kw: Any) -> NodePgPool:
    """node-postgres ``Pool`` (one host)."""
    return NodePgPool(target, **kw)
