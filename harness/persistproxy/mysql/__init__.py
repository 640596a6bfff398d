"""The reference MySQL-protocol persistent-connection proxy (the MariaDB profile; PER-1..PER-8 on MariaDB):
:class:`MySQLPersistentProxy` with :class:`MySQLProxyConfig`. See ``docs/persistent-proxy-mysql.md``."""

from __future__ import annotations

from .proxy import MySQLPersistentProxy, MySQLProxyConfig

__all__ = ["MySQLPersistentProxy", "MySQLProxyConfig"]
