#!/usr/bin/env bash
# The README's second command: set up ./.venv, check the generated gRPC code is fresh, type-check the
# modules pyproject.toml's [tool.mypy] lists (strict), lint with ruff ([tool.ruff]), run the suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/gen_proto.py --check
.venv/bin/python -m mypy
.venv/bin/python -m ruff check .
exec .venv/bin/python -m pytest "$@"
