"""Session-state tracking from SQL text (PER-2, PER-5, PER-8): a small lexer that splits a query
string into statements (quotes, dollar quotes, comments, E'' strings) and a classifier that turns
one successful statement into its effect on the session: a session GUC set or reset, a prepared
statement, a temporary table, a cursor, a LISTEN, a DISCARD.

Effects are applied only when the server confirms the statement (CommandComplete) and, for
transactional state, only when the transaction commits (see :mod:`.state`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_WORD = re.compile(r"[A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*")
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


@dataclass
class Token:
    """One lexical token: ``kind`` is ``word`` (lower-cased), ``ident`` (double-quoted, verbatim),
    ``string``, ``number`` or ``punct``."""

    kind: str
    value: str


@dataclass
class Statement:
    """One statement of a query string: its source text and tokens (comments removed)."""

    text: str
    tokens: list[Token] = field(default_factory=list)

    def words(self, n: int) -> list[str]:
        """The first ``n`` tokens' values, lower-cased words (for keyword matching)."""
        return [t.value if t.kind == "word" else "\0" for t in self.tokens[:n]]


def split_statements(sql: str) -> list[Statement]:
    """Split a query string into its non-empty statements, the way the server would."""
    out: list[Statement] = []
    tokens: list[Token] = []
    start = 0
    i = 0
    n = len(sql)
    depth = 0  # parentheses, only to keep ';' inside them (never valid there anyway)
    while i < n:
        c = sql[i]
        if c in " \t\r\n\f":
            i += 1
        elif c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif c == "/" and sql.startswith("/*", i):
            level = 1
            i += 2
            while i < n and level:
                if sql.startswith("/*", i):
                    level += 1
                    i += 2
                elif sql.startswith("*/", i):
                    level -= 1
                    i += 2
                else:
                    i += 1
        elif c == "'" or (c in "eE" and sql.startswith("'", i + 1)):
            escapes = c != "'"
            j = i + (2 if escapes else 1)
            buf = []
            while j < n:
                ch = sql[j]
                if escapes and ch == "\\" and j + 1 < n:
                    buf.append(sql[j + 1])
                    j += 2
                    continue
                if ch == "'":
                    if sql.startswith("''", j):
                        buf.append("'")
                        j += 2
                        continue
                    j += 1
                    break
                buf.append(ch)
                j += 1
            tokens.append(Token("string", "".join(buf)))
            i = j
        elif c == '"':
            j = i + 1
            buf = []
            while j < n:
                if sql[j] == '"':
                    if sql.startswith('""', j):
                        buf.append('"')
                        j += 2
                        continue
                    j += 1
                    break
                buf.append(sql[j])
                j += 1
            tokens.append(Token("ident", "".join(buf)))
            i = j
        elif c == "$" and (m := _DOLLAR.match(sql, i)):
            tag = m.group(0)
            j = sql.find(tag, m.end())
            end = n if j < 0 else j + len(tag)
            tokens.append(Token("string", sql[m.end():j if j >= 0 else n]))
            i = end
        elif c == ";" and depth == 0:
            if tokens:
                out.append(Statement(sql[start:i].strip(), tokens))
            tokens = []
            i += 1
            start = i
        elif (m := _WORD.match(sql, i)):
            tokens.append(Token("word", m.group(0).lower()))
            i = m.end()
        elif c.isdigit() or (c == "." and i + 1 < n and sql[i + 1].isdigit()):
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] in "._+-" and sql[j - 1] in "eE"
                             or sql[j] == "."):
                j += 1
            tokens.append(Token("number", sql[i:j]))
            i = j
        else:
            if c == "(":
                depth += 1
            elif c == ")":
                depth = max(0, depth - 1)
            tokens.append(Token("punct", c))
            i += 1
    if tokens:
        out.append(Statement(sql[start:].strip(), tokens))
    return out


# ---------------------------------------------------------------------------------------------
# Effects

@dataclass
class Effect:
    """The effect of one successful statement on session state. ``kind`` is one of:
    ``set`` (key, text), ``reset`` (key), ``reset_all``, ``prepare`` (key=name, text),
    ``deallocate`` (key or None = all), ``temp_create`` (key), ``temp_drop`` (names),
    ``declare`` (key, hold), ``close`` (key or None = all), ``listen`` / ``unlisten`` (key or None),
    ``discard`` (key = all/temp/plans/sequences)."""

    kind: str
    key: str | None = None
    text: str = ""
    hold: bool = False
    names: list[str] = field(default_factory=list)


def _name(tok: Token) -> str:
    return tok.value


def _dotted_name(tokens: list[Token], i: int) -> tuple[str, int]:
    """A possibly qualified name starting at ``i``; returns (last component, index after)."""
    if i >= len(tokens) or tokens[i].kind not in ("word", "ident"):
        return "", i
    name = tokens[i].value
    i += 1
    while i + 1 < len(tokens) and tokens[i].value == "." and tokens[i + 1].kind in ("word", "ident"):
        name = tokens[i + 1].value
        i += 2
    return name, i


def _guc_name(tokens: list[Token], i: int) -> tuple[str, int]:
    """A GUC name (``a`` or ``a.b``) at ``i``, lower-cased as the server does."""
    if i >= len(tokens) or tokens[i].kind not in ("word", "ident"):
        return "", i
    parts = [tokens[i].value.lower()]
    i += 1
    while i + 1 < len(tokens) and tokens[i].value == "." and tokens[i + 1].kind in ("word", "ident"):
        parts.append(tokens[i + 1].value.lower())
        i += 2
    return ".".join(parts), i


_SPECIAL_SET = {
    ("time", "zone"): "timezone",
    ("names",): "client_encoding",
    ("schema",): "search_path",
    ("role",): "role",
    ("session", "authorization"): "session_authorization",
    ("xml", "option"): "xmloption",
}


def _special(words: list[str], i: int) -> tuple[str | None, int]:
    for key, guc in _SPECIAL_SET.items():
        if tuple(words[i:i + len(key)]) == key:
            return guc, i + len(key)
    return None, i


def classify(stmt: Statement) -> list[Effect]:
    """The session-state effects of ``stmt`` if it succeeds (PER-2/5/8 tracking)."""
    toks = stmt.tokens
    w = [t.value if t.kind == "word" else "\0" for t in toks]
    if not w:
        return []
    head = w[0]
    if head == "set":
        i = 1
        if len(w) > 1 and w[1] == "local":
            return []
        if len(w) > 1 and w[1] == "session":
            if w[2:4] == ["characteristics", "as"]:
                effects = []
                rest = w[4:]
                if "isolation" in rest:
                    effects.append(Effect("set", "default_transaction_isolation", stmt.text))
                if "read" in rest:
                    effects.append(Effect("set", "default_transaction_read_only", stmt.text))
                if "deferrable" in rest:
                    effects.append(Effect("set", "default_transaction_deferrable", stmt.text))
                return effects
            if w[2:3] != ["authorization"]:
                i = 2
        if len(w) > i and w[i] in ("transaction", "constraints"):
            return []
        guc, j = _special(w, i)
        if guc is None:
            guc, j = _guc_name(toks, i)
            if not guc:
                return []
        if guc == "session_authorization" and w[j:j + 1] == ["default"]:
            return [Effect("reset", "session_authorization"), Effect("reset", "role")]
        if guc == "role" and w[j:j + 1] == ["none"]:
            return [Effect("reset", "role")]
        if j < len(toks) and toks[j].value in ("to", "="):
            j += 1
        if w[j:j + 1] == ["default"] and j + 1 == len(toks):
            return [Effect("reset", guc)]
        if guc == "session_authorization":
            return [Effect("reset", "role"), Effect("set", guc, stmt.text)]
        return [Effect("set", guc, stmt.text)]
    if head == "reset":
        if w[1:2] == ["all"]:
            return [Effect("reset_all")]
        guc, j = _special(w, 1)
        if guc is None:
            guc, j = _guc_name(toks, 1)
        if guc == "session_authorization":
            return [Effect("reset", "session_authorization"), Effect("reset", "role")]
        return [Effect("reset", guc)] if guc else []
    if head == "prepare" and w[1:2] != ["transaction"] and len(toks) > 1:
        return [Effect("prepare", _name(toks[1]), stmt.text)]
    if head == "deallocate":
        i = 2 if w[1:2] == ["prepare"] else 1
        if w[i:i + 1] == ["all"]:
            return [Effect("deallocate", None)]
        return [Effect("deallocate", _name(toks[i]))] if i < len(toks) else []
    if head == "declare" and len(toks) > 1:
        if "cursor" in w:
            c = w.index("cursor")
            hold = w[c + 1:c + 3] == ["with", "hold"]
            return [Effect("declare", _name(toks[1]), hold=hold)]
        return []
    if head == "close":
        if w[1:2] == ["all"]:
            return [Effect("close", None)]
        return [Effect("close", _name(toks[1]))] if len(toks) > 1 else []
    if head == "listen" and len(toks) > 1:
        return [Effect("listen", _name(toks[1]))]
    if head == "unlisten":
        if len(toks) > 1 and toks[1].value == "*":
            return [Effect("unlisten", None)]
        return [Effect("unlisten", _name(toks[1]))] if len(toks) > 1 else []
    if head == "discard" and len(w) > 1:
        what = "temp" if w[1] == "temporary" else w[1]
        return [Effect("discard", what)]
    if head == "create":
        i = 1
        if w[1:3] == ["or", "replace"]:
            i = 3
        temp = False
        if w[i:i + 1] in (["global"], ["local"]):
            i += 1
        if w[i:i + 1] in (["temp"], ["temporary"]):
            temp = True
            i += 1
        if w[i:i + 1] == ["unlogged"]:
            i += 1
        if w[i:i + 1] in (["table"], ["view"], ["sequence"]):
            i += 1
            if w[i:i + 3] == ["if", "not", "exists"]:
                i += 3
            if not temp and i + 2 < len(toks) and w[i] == "pg_temp" and toks[i + 1].value == ".":
                temp = True
            name, j = _dotted_name(toks, i)
            if temp and name:
                if "commit" in w and w[w.index("commit") + 1:w.index("commit") + 2] == ["drop"]:
                    return []  # ON COMMIT DROP: gone when the (required) transaction ends
                return [Effect("temp_create", name)]
        return []
    if head in ("select", "with") and "into" in w:
        k = w.index("into")
        j = k + 1
        temp = False
        if w[j:j + 1] in (["temp"], ["temporary"]):
            temp = True
            j += 1
        if w[j:j + 1] == ["table"]:
            j += 1
        name, _ = _dotted_name(toks, j)
        if temp and name:
            return [Effect("temp_create", name)]
        return []
    if head == "drop" and w[1:2] in (["table"], ["view"], ["sequence"]):
        i = 2
        if w[i:i + 2] == ["if", "exists"]:
            i += 2
        names = []
        while i < len(toks):
            name, i = _dotted_name(toks, i)
            if not name:
                break
            names.append(name)
            if i < len(toks) and toks[i].value == ",":
                i += 1
            else:
                break
        return [Effect("temp_drop", names=names)] if names else []
    return []
