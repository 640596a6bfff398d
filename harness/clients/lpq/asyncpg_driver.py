"""asyncpg (profile ``lpq``, name ``asyncpg``): ``asyncpg.connect(host=[...], port=[...],
target_session_attrs=..., timeout=...)`` - asyncpg's own multi-host support (no libpq).
``connect_timeout`` becomes asyncpg's ``timeout`` (its documented "connection timeout in
seconds"); no ``connect_timeout`` keeps asyncpg's default (60 s). asyncpg has no random host order.
Each client runs one event loop on its own thread; calls block the caller like a sync driver."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import asyncpg

from harness.clients.lpq.protocol import (
    HostListAdapter,
    HostListClientError,
    HostListOpenError,
    HostListSpec,
    one_line,
)


class AsyncpgClient(HostListAdapter):
    """asyncpg on a private event loop."""

    driver = f"asyncpg {asyncpg.__version__} (Python)"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="asyncpg-loop", daemon=True)
        self._thread.start()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def describe(self, spec: HostListSpec) -> str:
        return (f"asyncpg.connect(host={[h for h, _ in spec.hosts]}, port={[p for _, p in spec.hosts]}, "
                f"database={spec.dbname!r}, user={spec.user!r}, password='***', "
                f"target_session_attrs={spec.target_session_attrs!r}"
                + (f", timeout={spec.connect_timeout:g})" if spec.connect_timeout is not None else ")"))

    def _connect(self, spec: HostListSpec) -> Any:
        kwargs: dict[str, Any] = {"host": [h for h, _ in spec.hosts], "port": [p for _, p in spec.hosts],
                                  "database": spec.dbname, "user": spec.user, "password": spec.password,
                                  "target_session_attrs": spec.target_session_attrs}
        if spec.connect_timeout is not None:
            kwargs["timeout"] = spec.connect_timeout
        try:
            return self._run(asyncpg.connect(**kwargs))
        except (TimeoutError, asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
            raise HostListOpenError(one_line(exc) or type(exc).__name__,
                                    sqlstate=getattr(exc, "sqlstate", None),
                                    reason="timeout" if isinstance(exc, asyncio.TimeoutError) else "error") from None

    def _execute(self, handle: Any, sql: str) -> list[tuple[Any, ...]]:
        try:
            rows = self._run(handle.fetch(sql))
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise HostListClientError(one_line(exc), sqlstate=getattr(exc, "sqlstate", None)) from None
        return [tuple(None if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in r)
                for r in rows]

    def _close(self, handle: Any) -> None:
        try:
            self._run(handle.close(timeout=5))
        except (TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            handle.terminate()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


def make(history: Any = None, process: Any = None, **options: Any) -> AsyncpgClient:
    """Factory of ``asyncpg``."""
    return AsyncpgClient(history=history, process=process, **options)
