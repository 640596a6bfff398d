#!/bin/bash
# failover-harness node entrypoint (PostgreSQL 15; the official postgres:15 image and the local
# stand-in alike). Everything it needs is in the node's folder FH_DIR, bind-mounted at the same
# path as on the host, which the harness fills before each start:
#   initdb.args, pg_hba.conf, datadir.conf, bootstrap.sql, pgpass  - how to create a data directory
#   postgresql.conf                                                - the node's configuration
#   clone   (marker) - the data directory is a fresh copy of the principal (pg_basebackup)
#   rewind  (marker) - rewind it onto the principal first (pg_rewind; re-clone if that cannot)
#   role             - principal or standby (standby.signal after a clone, rewind or re-clone)
# Clone and rewind go through FH_REPL_PORT: the node's replication proxy (the fault proxy).
# Output goes to FH_DIR/postgres.log; the server runs as user postgres, listening where
# postgresql.conf says (127.0.0.1 only).
set -euo pipefail
: "${FH_DIR:?}" "${FH_REPL_PORT:?}" "${FH_PORT:?}"
PGDATA="$FH_DIR/data"
BIN=/usr/lib/postgresql/15/bin
exec >>"$FH_DIR/postgres.log" 2>&1
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
note() { echo "fh-node: $*"; }
mkdir -p "$PGDATA"
chown -R postgres:postgres "$FH_DIR"
chmod 700 "$PGDATA"
chmod 600 "$FH_DIR/pgpass"
export PGPASSFILE="$FH_DIR/pgpass"
SOURCE="host=127.0.0.1 port=$FH_REPL_PORT user=postgres dbname=postgres connect_timeout=2"

clone() {
  local deadline=$((SECONDS + 60))
  find "$PGDATA" -mindepth 1 -delete
  until as_pg "$BIN/pg_basebackup" -D "$PGDATA" -h 127.0.0.1 -p "$FH_REPL_PORT" -U postgres -X stream \
      -c fast --no-sync; do
    ((SECONDS < deadline)) || { note "pg_basebackup through port $FH_REPL_PORT failed for 60 s"; exit 1; }
    find "$PGDATA" -mindepth 1 -delete
    sleep 0.2
  done
}

if [[ ! -s "$PGDATA/PG_VERSION" && ! -e "$FH_DIR/clone" ]]; then
  note "initdb"
  # shellcheck disable=SC2046  # the options are words
  as_pg "$BIN/initdb" -D "$PGDATA" $(cat "$FH_DIR/initdb.args") >/dev/null
  cp "$FH_DIR/pg_hba.conf" "$PGDATA/pg_hba.conf"
  cat "$FH_DIR/datadir.conf" >>"$PGDATA/postgresql.conf"
  chown postgres:postgres "$PGDATA"/*.conf
  as_pg "$BIN/postgres" --single -D "$PGDATA" postgres <"$FH_DIR/bootstrap.sql" >/dev/null
elif [[ -e "$FH_DIR/clone" ]]; then
  note "clone through port $FH_REPL_PORT"
  clone
  rm -f "$FH_DIR/clone"
elif [[ -e "$FH_DIR/rewind" ]]; then
  note "rewind through port $FH_REPL_PORT"
  rm -f "$PGDATA/standby.signal" "$PGDATA/recovery.signal"  # its crash recovery runs single-user: no standby mode
  if ! as_pg "$BIN/pg_rewind" -D "$PGDATA" --no-sync --source-server="$SOURCE" >"$FH_DIR/rewind.out" 2>&1; then
    cat "$FH_DIR/rewind.out"
    tail -n 1 "$FH_DIR/rewind.out" >"$FH_DIR/recloned"
    note "pg_rewind failed: clone through port $FH_REPL_PORT"
    clone
  fi
  rm -f "$FH_DIR/rewind"
fi
if [[ "$(cat "$FH_DIR/role" 2>/dev/null)" == standby ]]; then
  : >"$PGDATA/standby.signal"
  chown postgres:postgres "$PGDATA/standby.signal"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups \
  "$BIN/postgres" -D "$PGDATA" -c config_file="$FH_DIR/postgresql.conf"
