"""What the reference MySQL proxy knows of one client session (PER-2, PER-5..8): current database,
names of system and user variables it changed (from the server's session-state tracking, and by
parsing statements where the client did not ask for tracking), prepared statements with their
parameter types, temporary tables, open transaction, cursors and unfinished long data."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# SET [SESSION|LOCAL] x = ..., SET @@session.x = ..., SET @u = ..., SET NAMES ..., SET CHARACTER SET ...
_SET = re.compile(r"^\s*SET\s+(?!TRANSACTION\b|GLOBAL\b|@@GLOBAL\.|PASSWORD\b|ROLE\b|DEFAULT\s+ROLE\b|STATEMENT\b)",
                  re.I)
_ASSIGN = re.compile(r"(?:^|,)\s*(?:(SESSION|LOCAL)\s+|@@(?:SESSION\.|LOCAL\.)?)?(@?)`?([A-Za-z_$][\w$.]*)`?\s*:?=",
                     re.I)
_NAMES = re.compile(r"^\s*SET\s+(NAMES|CHARACTER\s+SET|CHARSET)\b", re.I)
_USER_ASSIGN = re.compile(r"@`?([A-Za-z_$][\w$.]*)`?\s*:=")
_INTO_USER = re.compile(r"\bINTO\s+((?:@`?[\w$.]+`?\s*,?\s*)+)", re.I)
_USE = re.compile(r"^\s*USE\s+`?([^`\s;]+)`?\s*;?\s*$", re.I)
_CREATE_TEMP = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?TEMPORARY\s+TABLE", re.I)
_DROP_TEMP = re.compile(r"^\s*DROP\s+TEMPORARY\s+TABLE", re.I)
_PREPARE = re.compile(r"^\s*PREPARE\s+`?([\w$]+)`?\s+FROM\b", re.I)
_DEALLOCATE = re.compile(r"^\s*(?:DEALLOCATE|DROP)\s+PREPARE\s+`?([\w$]+)`?", re.I)
_STRINGS = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"")

CHARSET_VARS = ("character_set_client", "character_set_connection", "character_set_results", "collation_connection")
#: Replayed last, in this order: the character set before its collation, sql_mode at the very end
#: (it changes how later literals are read).
LATE = ("character_set_client", "character_set_connection", "character_set_results", "collation_connection",
        "sql_mode")
#: Variables the server tracks but a session cannot (or need not) set back.
NOT_REPLAYED = {"last_insert_id", "insert_id", "timestamp", "identity", "warning_count", "error_count",
                "session_track_system_variables", "session_track_state_change", "session_track_schema",
                "session_track_transaction_info", "in_transaction", "last_gtid", "gtid_seq_no", "server_id",
                "pseudo_thread_id", "rand_seed1", "rand_seed2", "tx_read_only", "transaction_read_only"}


@dataclass
class Statement:
    """One prepared statement as the client knows it (client id) and as the current server does."""

    sql: bytes
    server_id: int
    params: int
    columns: int
    types: bytes | None = None  # the parameter types block the client last sent
    types_sent: bool = True  # the current server statement has received types
    long_data: bool = False  # COM_STMT_SEND_LONG_DATA sent, execute not yet (PER-8)
    cursor: bool = False  # an open cursor (PER-8)


@dataclass
class SessionState:
    """Everything a session's server connection holds that must be rebuilt on a new server."""

    database: str | None = None
    sysvars: set[str] = field(default_factory=set)
    uservars: set[str] = field(default_factory=set)
    statements: dict[int, Statement] = field(default_factory=dict)
    sql_prepared: dict[str, str] = field(default_factory=dict)  # PREPARE name FROM ...: the statement
    temp_tables: int = 0
    in_transaction: bool = False

    def note_query(self, sql: str) -> None:
        """Learn from the text of a COM_QUERY the client sent (the parsing fallback)."""
        bare = _STRINGS.sub("''", sql)
        if _NAMES.match(bare):
            self.sysvars.update(CHARSET_VARS)
        elif _SET.match(bare):
            body = re.sub(r"^\s*SET\s+", "", bare, flags=re.I)
            for _scope, at, name in _ASSIGN.findall(body):
                if at:
                    self.uservars.add(name)
                elif not name.lower().startswith("global."):
                    self.sysvars.add(name.lower().split(".")[-1])
        for name in _USER_ASSIGN.findall(bare):
            self.uservars.add(name)
        for group in _INTO_USER.findall(bare):
            self.uservars.update(n.strip("`") for n in re.findall(r"@`?([\w$.]+)`?", group))
        m = _PREPARE.match(bare)
        if m:
            self.sql_prepared[m.group(1).lower()] = sql.strip().rstrip(";")
        m = _DEALLOCATE.match(bare)
        if m:
            self.sql_prepared.pop(m.group(1).lower(), None)
        m = _USE.match(bare)
        if m:
            self.database = m.group(1)
        if _CREATE_TEMP.match(bare):
            self.temp_tables += 1
        elif _DROP_TEMP.match(bare):
            self.temp_tables = max(0, self.temp_tables - 1)

    def note_tracked(self, variables: dict[str, str], schema: str | None) -> None:
        """Learn from the server's session-state tracking of an OK packet."""
        for name in variables:
            self.sysvars.add(name.lower())
        if schema is not None:
            self.database = schema or None

    def replay_order(self) -> list[str]:
        """System variables to set back, in a safe order."""
        names = sorted(n for n in self.sysvars if n not in NOT_REPLAYED and n not in LATE)
        return names + [n for n in LATE if n in self.sysvars]

    def reset(self) -> None:
        """COM_RESET_CONNECTION / COM_CHANGE_USER: the server forgot everything but the database."""
        self.sysvars.clear()
        self.uservars.clear()
        self.statements.clear()
        self.sql_prepared.clear()
        self.temp_tables = 0
        self.in_transaction = False

    @property
    def blocking_reason(self) -> tuple[str, str] | None:
        """Why this session cannot be kept now ``(rule, reason)``, or None."""
        if self.temp_tables:
            return "PER-5", "temporary tables"
        if any(s.long_data for s in self.statements.values()):
            return "PER-8", "unfinished long data"
        if any(s.cursor for s in self.statements.values()):
            return "PER-8", "open cursor"
        if self.in_transaction:
            return "PER-7", "open transaction"
        return None
