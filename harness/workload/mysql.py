"""MySQL-protocol side of the workloads (docs/mariadb.md): open a PyMySQL session from the harness's
engine-neutral connection string (``host=a,b port=x,y dbname= user= password=
target_session_attrs=read-write``), finding the writable node the way libpq does (each host in
order, once; a read-only one is skipped), and classify what a failed statement means for DUR-1
(``fail``: certainly not applied; ``info``: outcome unknown)."""

from __future__ import annotations

from typing import Any

import pymysql

#: Client-side error numbers of a session that broke with a statement possibly in flight.
LOST = {2006, 2013, 2014, 2055}
#: Server error numbers that say a statement certainly did not take effect (read-only node, ...).
DEFINITE_SERVER = range(1000, 2000)


def parse_dsn(dsn: str) -> dict[str, str]:
    """``key=value`` words of a harness connection string (values have no spaces)."""
    out: dict[str, str] = {}
    for word in dsn.split():
        if "=" in word:
            k, v = word.split("=", 1)
            out[k] = v
    return out


def connect(dsn: str, timeout: float = 2, autocommit: bool = True) -> pymysql.connections.Connection:
    """A session on the first host of ``dsn`` that answers (and, with
    ``target_session_attrs=read-write``, is writable: ``@@global.read_only = 0``)."""
    p = parse_dsn(dsn)
    hosts, ports = p.get("host", "127.0.0.1").split(","), p.get("port", "3306").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    want_rw = p.get("target_session_attrs", "any") == "read-write"
    last: Exception | None = None
    for host, port in zip(hosts, ports, strict=True):
        try:
            conn = pymysql.connect(host=host, port=int(port), user=p.get("user"), password=p.get("password", ""),
                                   database=p.get("dbname"), autocommit=autocommit,
                                   connect_timeout=max(1, int(timeout)), read_timeout=30, write_timeout=30,
                                   ssl_disabled=True)
        except pymysql.MySQLError as exc:
            last = exc
            continue
        if want_rw:
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT @@global.read_only")
                    row = cur.fetchone()
                if row is None or row[0] != 0:
                    conn.close()
                    last = pymysql.err.OperationalError(1290, f"{host}:{port} is read-only")
                    continue
            except pymysql.MySQLError as exc:
                last = exc
                _close(conn)
                continue
        return conn
    raise last if last is not None else pymysql.err.OperationalError(2003, "no host in the connection string")


def outcome_of(exc: BaseException) -> str:
    """``fail`` when the server refused the statement (it certainly did not take effect), ``info``
    when the session broke after it was sent (unknown outcome, not judged by DUR-1)."""
    code = exc.args[0] if getattr(exc, "args", None) and isinstance(exc.args[0], int) else None
    if code in LOST or code is None or code >= 2000:
        return "info"
    return "fail" if code in DEFINITE_SERVER else "info"


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - already broken
        pass


def execute(conn: Any, query: str, args: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement and return its rows (empty for statements without a result)."""
    with conn.cursor() as cur:
        cur.execute(query, args)
        return list(cur.fetchall() or [])
