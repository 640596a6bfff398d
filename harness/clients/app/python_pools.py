"""Python pools of the app profile: SQLAlchemy 2 ``QueuePool`` (pre_ping on/off), psycopg_pool
``ConnectionPool`` (check on/off), asyncpg's ``create_pool``. Each is configured as an application
would configure it, over psycopg 3 (SQLAlchemy, psycopg_pool) or asyncpg, to the pair's host list."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg

from harness.clients.app.protocol import (
    READ_SQL,
    WRITE_SQL,
    AppTarget,
    PoolSettings,
    RequestFailed,
    local_address_of_fd,
    one_line,
)


def _outcome(f: str, exc: BaseException) -> str:
    """A server-side error (SQLSTATE, connection fine) certainly had no effect: ``fail``; a broken
    connection during a write leaves its outcome unknown: ``info``; a failed read is ``fail``."""
    inner = getattr(exc, "orig", None) or exc
    if f == "read" or (isinstance(inner, psycopg.Error) and getattr(inner, "sqlstate", None)
                       and not isinstance(inner, psycopg.OperationalError)):
        return "fail"
    return "info"


class SQLAlchemyPool:
    """SQLAlchemy 2 engine (``QueuePool``: ``pool_size`` + ``max_overflow``), ``pool_pre_ping`` on or off."""

    def __init__(self, target: AppTarget, *, pre_ping: bool, pool_size: int = 4, max_overflow: int = 2,
                 pool_timeout: float = 10) -> None:
        import sqlalchemy

        self.engine = sqlalchemy.create_engine(
            "postgresql+psycopg://", creator=lambda: psycopg.connect(target.dsn),
            pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=pre_ping, pool_timeout=pool_timeout)
        hosts = len(target.hosts)
        self.settings = PoolSettings(
            "sqlalchemy-preping" if pre_ping else "sqlalchemy", pool_size, max_overflow, pre_ping,
            recovery_s=float(target.connect_timeout * hosts + 1), library=f"SQLAlchemy {sqlalchemy.__version__}",
            extra={"pool_pre_ping": pre_ping, "pool_timeout": pool_timeout})

    def request(self, f: str, key: int, process: str) -> str | None:
        conn_addr = None
        try:
            with self.engine.begin() as c:
                raw = c.connection.dbapi_connection
                conn_addr = local_address_of_fd(raw.pgconn.socket) if raw is not None else None
                if f == "write":
                    c.exec_driver_sql(WRITE_SQL, (key, process))
                else:
                    c.exec_driver_sql(READ_SQL, (key,)).scalar()
        except Exception as exc:  # noqa: BLE001 - every failure of the pool is a failed request
            raise RequestFailed(one_line(exc), conn_addr, _outcome(f, exc)) from exc
        return conn_addr

    def close(self) -> None:
        self.engine.dispose()


class PsycopgPool:
    """psycopg_pool ``ConnectionPool`` (``min_size``/``max_size``), ``check=ConnectionPool.check_connection``
    on or off."""

    def __init__(self, target: AppTarget, *, check: bool, max_size: int = 4, timeout: float = 10) -> None:
        import psycopg_pool

        self.pool = psycopg_pool.ConnectionPool(
            target.dsn, min_size=2, max_size=max_size, timeout=timeout, open=True,
            check=psycopg_pool.ConnectionPool.check_connection if check else None, name="fh-app")
        self.settings = PoolSettings(
            "psycopg-pool-check" if check else "psycopg-pool", max_size, 0, check,
            recovery_s=float(target.connect_timeout * len(target.hosts) + 1),
            library=f"psycopg_pool {psycopg_pool.__version__}", extra={"check": check, "timeout": timeout})

    def request(self, f: str, key: int, process: str) -> str | None:
        conn_addr = None
        try:
            with self.pool.connection() as conn:
                conn_addr = local_address_of_fd(conn.pgconn.socket)
                if f == "write":
                    conn.execute(WRITE_SQL, (key, process))
                else:
                    conn.execute(READ_SQL, (key,)).fetchone()
        except Exception as exc:  # noqa: BLE001 - every failure of the pool is a failed request
            raise RequestFailed(one_line(exc), conn_addr, _outcome(f, exc)) from exc
        return conn_addr

    def close(self) -> None:
        self.pool.close(timeout=2)


class AsyncpgPool:
    """asyncpg ``create_pool`` (``min_size``/``max_size``) on its own event loop thread; asyncpg has no
    checkout validation beyond dropping connections it already knows are closed."""

    def __init__(self, target: AppTarget, *, max_size: int = 4) -> None:
        import asyncpg

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="asyncpg-pool", daemon=True)
        self.thread.start()
        async def create() -> Any:
            return await asyncpg.create_pool(target.url, min_size=2, max_size=max_size,
                                             timeout=target.connect_timeout, command_timeout=10)

        self.pool: Any = self._run(create())
        self.settings = PoolSettings("asyncpg-pool", max_size, 0, False,
                                     recovery_s=float(target.connect_timeout * len(target.hosts) + 1),
                                     library=f"asyncpg {asyncpg.__version__}")

    def _run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _request(self, f: str, key: int, process: str, box: list[str | None]) -> None:
        async with self.pool.acquire() as conn:
            transport = getattr(getattr(conn, "_con", None), "_transport", None)
            peer = transport.get_extra_info("sockname") if transport is not None else None
            box.append(f"{peer[0]}:{peer[1]}" if peer else None)
            async with conn.transaction():
                if f == "write":
                    await conn.execute(WRITE_SQL.replace("%s", "$1", 1).replace("%s", "$2", 1), key, process)
                else:
                    await conn.fetchval(READ_SQL.replace("%s", "$1"), key)

    def request(self, f: str, key: int, process: str) -> str | None:
        box: list[str | None] = []
        try:
            self._run(self._request(f, key, process, box))
        except Exception as exc:  # noqa: BLE001 - every failure of the pool is a failed request
            server_said = getattr(exc, "sqlstate", None) is not None
            raise RequestFailed(one_line(exc), box[0] if box else None,
                                "fail" if f == "read" or server_said else "info") from exc
        return box[0] if box else None

    def close(self) -> None:
        async def close() -> None:
            await self.pool.close()

        try:
            self._run(close(), timeout=5)
        except Exception:  # noqa: BLE001 - closing after a fault may time out; terminate then
            self.pool.terminate()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def sqlalchemy_preping(target: AppTarget, **kw: Any) -> SQLAlchemyPool:
    """SQLAlchemy QueuePool with ``pool_pre_ping=True``."""
    return SQLAlchemyPool(target, pre_ping=True, **kw)


def sqlalchemy_plain(target: AppTarget, **kw: Any) -> SQLAlchemyPool:
    """SQLAlchemy QueuePool, ``pool_pre_ping`` off (the default)."""
    return SQLAlchemyPool(target, pre_ping=False, **kw)


def psycopg_pool_check(target: AppTarget, **kw: Any) -> PsycopgPool:
    """psycopg_pool with ``check=ConnectionPool.check_connection``."""
    return PsycopgPool(target, check=True, **kw)


def psycopg_pool_plain(target: AppTarget, **kw: Any) -> PsycopgPool:
    """psycopg_pool without a check (the default)."""
    return PsycopgPool(target, check=False, **kw)


def asyncpg_pool(target: AppTarget, **kw: Any) -> AsyncpgPool:
    """asyncpg ``create_pool``."""
    return AsyncpgPool(target, **kw)
