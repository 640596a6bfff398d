"""pg8000 (profile ``lpq``, name ``pg8000``): a pure-Python driver that takes a single ``host`` and
``port`` - it declares no host list, so every host-list scenario is *not offered* (the matrix says
so instead of failing it). With one host it connects with ``timeout=connect_timeout``."""

from __future__ import annotations

from typing import Any

import pg8000.dbapi
import pg8000.native

from harness.clients.lpq.protocol import (
    HostListAdapter,
    HostListClientError,
    HostListOpenError,
    HostListSpec,
    one_line,
)


class Pg8000Client(HostListAdapter):
    """``pg8000.native.Connection(host=, port=, ...)``."""

    driver = f"pg8000 {pg8000.__version__} (Python)"
    host_list = False

    def _connect(self, spec: HostListSpec) -> Any:
        (host, port), = spec.hosts
        try:
            return pg8000.native.Connection(spec.user, host=host, port=port, database=spec.dbname,
                                            password=spec.password, timeout=spec.connect_timeout)
        except (pg8000.native.Error, OSError) as exc:
            raise HostListOpenError(one_line(exc)) from None

    def _execute(self, handle: Any, sql: str) -> list[tuple[Any, ...]]:
        try:
            rows = handle.run(sql) or []
        except (pg8000.native.Error, OSError) as exc:
            args = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
            raise HostListClientError(one_line(exc), sqlstate=args.get("C")) from None
        return [tuple(None if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in r)
                for r in rows]

    def _close(self, handle: Any) -> None:
        handle.close()


def make(history: Any = None, process: Any = None, **options: Any) -> Pg8000Client:
    """Factory of ``pg8000``."""
    return Pg8000Client(history=history, process=process, **options)
