"""The pools both proxying ICM routers configure (harness/clients/icm/pools.py): replica holders only
(ICM-1), each active with its Server_MaxUsers / RESTRICTED (ICM-4), then each again as a backup
(ICM-6), through the server's fault-proxy address."""

from __future__ import annotations

from dataclasses import dataclass

from harness.clients.icm.pools import PoolEntry, pool_entries, pool_name


@dataclass
class _Settings:
    max_users: int
    restricted: int


class _Cluster:
    def holders(self, database: str) -> list[str]:
        return {"mail.nsf": ["s1", "s3"], "crm.nsf": []}[database]

    def address(self, server: str, scheme: str) -> tuple[str, int]:
        return "127.0.0.1", {"s1": 7001, "s2": 7002, "s3": 7003}[server] + (100 if scheme == "https" else 0)

    def settings(self, server: str) -> _Settings:
        return {"s1": _Settings(0, 2), "s3": _Settings(7, 0)}[server]


def test_pool_name() -> None:
    assert pool_name("http", "mail.nsf") == "http_mail"
    assert pool_name("https", "names") == "https_names"


def test_holders_active_then_backup_with_their_settings() -> None:
    assert pool_entries(_Cluster(), "https", "mail.nsf") == [
        PoolEntry("s1", "127.0.0.1", 7101, False, max_users=0, restricted=2),
        PoolEntry("s3", "127.0.0.1", 7103, False, max_users=7, restricted=0),
        PoolEntry("s1", "127.0.0.1", 7101, True),
        PoolEntry("s3", "127.0.0.1", 7103, True),
    ]


def test_no_holder_no_entry() -> None:
    assert pool_entries(_Cluster(), "http", "crm.nsf") == []
