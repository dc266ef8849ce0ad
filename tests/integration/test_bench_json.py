"""`txnsim bench --json`: the results as one JSON object a script can read, progress kept off stdout."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_bench_json_is_one_object_with_each_benchmarks_tables_and_targets():
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "bench", "failover", "--failover-rounds", "1",
                           "--json"], capture_output=True, text=True, timeout=300, cwd=repo)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["command"] == "txnsim bench failover --failover-rounds 1"
    (bench,) = result["benchmarks"]
    assert bench["name"] == "failover" and bench["tables"]
    rows = bench["tables"][0]["rows"]
    assert rows and all(isinstance(row, dict) and row for row in rows)
    assert all({"target", "met", "detail"} <= set(t) for t in bench["targets"])
