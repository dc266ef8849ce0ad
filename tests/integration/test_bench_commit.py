"""`txnsim bench commit` with a few transactions per size: a row per partition count with sane latencies, the
issue's verdicts printed, and the command wired into `txnsim bench` (--json). Speed is not judged here."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from txnsim.bench import commit_bench


@pytest.mark.slow
def test_commit_latency_is_measured_for_every_partition_count():
    result = commit_bench.run(transactions=3)

    (table,) = result.tables
    columns = {name: i for i, name in enumerate(table.columns)}
    assert [int(row[0]) for row in table.rows] == list(commit_bench.PARTITION_COUNTS)
    for row in table.rows:
        assert row[columns["txns"]] == "3"
        commit = float(row[columns["commit p50 ms"]].replace(",", ""))
        readable = float(row[columns["until readable p50 ms"]].replace(",", ""))
        assert 0 < commit <= readable < 30_000, "readable only after the commit returned"
    lines = [v.line() for v in result.verdicts]
    assert len(lines) == 4 and all(line.startswith(("met: ", "MISSED: ")) for line in lines)
    assert any("at 4 partitions" in line for line in lines)


@pytest.mark.slow
def test_txnsim_bench_commit_prints_its_table_as_json():
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "bench", "commit", "--repeat", "2", "--json",
                           "--no-plot"], capture_output=True, text=True, timeout=300, cwd=repo)
    assert done.returncode == 0, done.stderr
    (bench,) = json.loads(done.stdout)["benchmarks"]
    assert bench["name"] == "commit" and len(bench["tables"][0]["rows"]) == len(commit_bench.PARTITION_COUNTS)
    assert len(bench["targets"]) == 4
    assert "charts" not in bench, "--no-plot drew charts"
