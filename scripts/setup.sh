#!/usr/bin/env bash
# Create ./.venv (if missing) and install txnsim with its test tools into it. Idempotent:
# reinstalls only when pyproject.toml or the set of top-level packages changed (an editable
# install maps the packages that existed when it was made).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.txnsim-installed
wanted="$(cat pyproject.toml; ls -d */__init__.py 2>/dev/null | sort)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet --config-settings editable_mode=lenient -e '.[test]'
  printf '%s' "$wanted" > "$stamp"
fi
