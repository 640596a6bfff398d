"""Node drivers (profile ``lpq``): ``node-pg`` (node-postgres, ``pg``) and ``postgres-js``
(``postgres``), each client with its own long-lived ``node`` helper (``node_helper.js``, JSON lines,
:mod:`harness.clients.lpq.helper`). The packages are pinned in ``tools/drivers/node/package-lock.json``
and installed by ``scripts/setup.sh`` (``npm ci``).

Translation (nothing more): postgres.js gets ``host``/``port`` arrays, ``database``, ``username``,
``password``, ``connect_timeout`` (s) and ``target_session_attrs`` (absent for ``any``, which it
does not name). node-postgres takes one ``host``/``port`` (no host list: *not offered*),
``connectionTimeoutMillis``."""

from __future__ import annotations

import os
import shutil
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
from harness.paths import tools_home
from harness.resources import checkout_root

HELPER_JS = Path(__file__).with_name("node_helper.js")


def node_modules_candidates() -> list[Path]:
    """Where the pinned Node drivers are looked for: ``<tools home>/drivers/node/node_modules``
    (``failover-harness setup``), then a checkout's ``tools/drivers/node/node_modules`` (``make setup``)."""
    found = [tools_home() / "drivers" / "node" / "node_modules"]
    root = checkout_root()
    if root is not None:
        found.append(root / "tools" / "drivers" / "node" / "node_modules")
    return found


def node_modules() -> Path:
    """The first folder of :func:`node_modules_candidates` holding both drivers (ConfigError naming
    the fix when none does)."""
    candidates = node_modules_candidates()
    for path in candidates:
        if (path / "pg").is_dir() and (path / "postgres").is_dir():
            return path
    raise ConfigError(f"the Node drivers are not installed in {candidates[0]}; run `failover-harness setup`")


def start_helper(name: str) -> JsonLinesHelper:
    """A new ``node node_helper.js`` process with the pinned drivers on its ``NODE_PATH``."""
    node = shutil.which("node")
    if node is None:
        raise ConfigError("node is not installed (Debian: apt-get install nodejs); run `failover-harness setup`")
    env = {**os.environ, "NODE_PATH": str(node_modules())}
    return JsonLinesHelper([node, str(HELPER_JS)], name=name, env=env)


class NodeClient(HostListAdapter):
    """A Node driver behind its helper process."""

    package = "?"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.helper = start_helper(f"node-{self.package}")
        version = (self.helper.hello.get("versions") or {}).get(self.package)
        self.driver = f"{self.package} {version} (Node {self.helper.hello.get('node')})"

    def options(self, spec: HostListSpec) -> dict[str, Any]:
        """The driver's own options for ``spec``."""
        raise NotImplementedError

    def describe(self, spec: HostListSpec) -> str:
        shown = {k: ("***" if k == "password" else v) for k, v in self.options(spec).items()}
        return f"{self.package}({shown})"

    def _connect(self, spec: HostListSpec) -> Any:
        reply = self.helper.call("open", driver=self.package, options=self.options(spec))
        if not reply.get("ok"):
            raise HostListOpenError(str(reply.get("error")), sqlstate=reply.get("sqlstate"),
                                    reason="timeout" if "TIMEOUT" in str(reply.get("error")).upper() else "error")
        self._last_host = reply.get("host")
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


class PostgresJsClient(NodeClient):
    """postgres.js (``postgres``)."""

    package = "postgres"
    session_attrs = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")

    def options(self, spec: HostListSpec) -> dict[str, Any]:
        o: dict[str, Any] = {"host": [h for h, _ in spec.hosts], "port": [p for _, p in spec.hosts],
                             "database": spec.dbname, "username": spec.user, "password": spec.password}
        if spec.connect_timeout is not None:
            o["connect_timeout"] = spec.connect_timeout
        if spec.target_session_attrs != "any":
            o["target_session_attrs"] = spec.target_session_attrs
        return o


class NodePgClient(NodeClient):
    """node-postgres (``pg``): one host."""

    package = "pg"
    host_list = False
    session_attrs = ("any",)

    def options(self, spec: HostListSpec) -> dict[str, Any]:
        (host, port), *_ = spec.hosts
        o: dict[str, Any] = {"host": host, "port": port, "database": spec.dbname, "user": spec.user,
                             "password": spec.password}
        if spec.connect_timeout is not None:
            o["connectionTimeoutMillis"] = int(spec.connect_timeout * 1000)
        return o


def postgres_js(history: Any = None, process: Any = None, **options: Any) -> PostgresJsClient:
    """Factory of ``postgres-js``."""
    return PostgresJsClient(history=history, process=process, **options)


def node_pg(history: Any = None, process: Any = None, **options: Any) -> NodePgClient:
    """Factory of ``node-pg``."""
    return NodePgClient(history=history, process=process, **options)
