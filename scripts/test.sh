#!/usr/bin/env bash
# The README's second command: set up ./.venv, check the generated gRPC code is fresh, type-check the
# modules pyproject.toml's [tool.mypy] lists (strict), lint with ruff ([tool.ruff]), run the suite.
# Extra arguments go to one pytest run instead, e.g. `bash scripts/test.sh -m "not slow"` or a test file.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/gen_proto.py --check
.venv/bin/python -m mypy
.venv/bin/python -m ruff check .
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
# The whole suite. The unit tests are CPU-bound and independent: two workers (pytest-xdist) use both cores.
# The integration and Spark tests run clusters of processes that already share both cores: one at a time.
status=0
.venv/bin/python -m pytest tests/unit -n 2 || status=$?
.venv/bin/python -m pytest tests/integration tests/spark || status=$?
exit "$status"
