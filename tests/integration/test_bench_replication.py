"""`txnsim bench replication` on a short run: three replicas against one side by side, the followers' lag
sampled from the nodes' /metrics, leaders SIGKILLed and their partition served again, and the three targets'
verdicts printed through `txnsim bench` (--json). Speed is not judged here."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from txnsim.zookeeper import zookeeper_available

_MISSING = zookeeper_available()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=f"no ZooKeeper here: {_MISSING}")]


def test_txnsim_bench_replication_measures_cost_lag_and_failover():
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "bench", "replication", "--repeat", "2",
                           "--seconds", "1", "--failover-rounds", "3", "--json", "--no-plot"],
                          capture_output=True, text=True, timeout=600, cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    (bench,) = json.loads(done.stdout)["benchmarks"]
    cost, lag, failover = bench["tables"]
    rows = {row["measure"]: row for row in cost["rows"]}
    for measure in ("commit_transaction() p50 ms", "records/s committing every 100 ms"):
        one, three = (float(rows[measure][side].replace(",", "")) for side in ("1 replica, acks=1",
                                                                            "3 replicas, acks=all"))
        assert one > 0 and three > 0, rows[measure]
    assert lag["rows"], "no follower lag sampled while the three-replica producer ran"
    assert all(int(row["max records"]) >= 0 for row in lag["rows"] if row["max records"] != "-")
    (kills,) = failover["rows"]
    assert kills["kills"] == "3" and 0 < float(kills["p99 ms"].replace(",", "")) < 30_000
    assert len(bench["targets"]) == 3
