"""`txnsim bench --json`: the results as one JSON object a script can read, progress kept off stdout."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bench_json_is_one_object_with_each_benchmarks_tables_and_targets(tmp_path):
    done = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "bench", "failover", "--failover-rounds", "1",
                           "--json"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["command"] == "txnsim bench failover --failover-rounds 1"
    (bench,) = result["benchmarks"]
    assert bench["name"] == "failover" and bench["tables"]
    rows = bench["tables"][0]["rows"]
    assert rows and all(isinstance(row, dict) and row for row in rows)
    assert all({"target", "met", "detail"} <= set(t) for t in bench["targets"])
    # charts by default, into ./txnsim-bench/ of the directory it ran in, each named in the JSON
    charts = [tmp_path / path for path in bench["charts"]]
    assert charts and all(path.parent == tmp_path / "txnsim-bench" for path in charts)
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in charts)
