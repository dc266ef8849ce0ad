#!/usr/bin/env bash
# The README's second command: set up ./.venv, check the generated gRPC code is fresh, run the suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/gen_proto.py --check
exec .venv/bin/python -m pytest "$@"
