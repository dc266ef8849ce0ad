#!/usr/bin/env bash
# The README's first command: set up ./.venv, then run `txnsim demo` on an embedded 3-node cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/txnsim demo "$@"
