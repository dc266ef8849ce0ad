#!/usr/bin/env bash
# Create ./.venv (if missing) and install txnsim with its test tools into it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.txnsim-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet --config-settings editable_mode=compat -e '.[test]'
  touch "$stamp"
fi
