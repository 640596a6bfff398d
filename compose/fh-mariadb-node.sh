#!/bin/bash
# failover-harness node entrypoint (MariaDB 10.11; the official mariadb:10.11 image and the local
# stand-in alike). Everything it needs is in the node's folder FH_DIR, bind-mounted at the same path as
# on the host, which the harness fills before each start:
#   data/            - the data directory (a copy of the harness's template, or a mariadb-backup re-clone)
#   postgresql.conf  - the node's my.cnf (the harness's name for every engine's configuration file):
#                      127.0.0.1 only, its port, socket and pid file in FH_DIR, GTID binlog, semi-sync
# Whom the node replicates from is set over SQL by the harness once the server answers (CHANGE MASTER
# TO its replication proxy). Output goes to FH_DIR/postgres.log; the server runs as user mysql, as PID 1
# of the container (exec), so that its command line names the configuration file on the host too.
set -euo pipefail
: "${FH_DIR:?}"
exec >>"$FH_DIR/postgres.log" 2>&1
chown -R mysql:mysql "$FH_DIR"
chmod 644 "$FH_DIR/postgresql.conf"  # mariadbd ignores a world-writable option file
exec setpriv --reuid=mysql --regid=mysql --init-groups \
  mariadbd --defaults-file="$FH_DIR/postgresql.conf" --datadir="$FH_DIR/data"
