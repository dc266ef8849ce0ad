"""`txnsim chaos` end to end: the workload under kills and pauses on a real 3-node cluster
finds no anomaly, and the run really was broken and really did copy records."""
from __future__ import annotations

import pytest

from txnsim.chaos import ChaosConfig, run_chaos
from txnsim.chaos.history import FaultEvent


@pytest.mark.slow
def test_a_short_chaos_run_with_kills_and_pauses_finds_no_anomalies(tmp_path):
    config = ChaosConfig(duration_s=60, nodes=3, seed=1, faults=("kill", "pause"), fault_interval_ms=3_000,
                         data_dir=tmp_path / "cluster")
    schedule = config.schedule()
    assert {f.kind for f in schedule} == {"kill", "pause"} and len(schedule) >= 5

    run = run_chaos(config)

    result = run.result
    assert result is not None
    assert run.final.complete, "the final read did not reach the last stable offsets"
    assert run.drained, "the workers did not copy every committed input record after the faults"
    assert {name: f.example for name, f in result.findings.items() if f.count} == {}
    healed = [(e.kind, e.node) for e in run.history.events()
              if isinstance(e, FaultEvent) and e.phase == "heal" and e.error is None]
    assert healed == [(f.kind, f.node) for f in schedule], "every fault was injected and healed, in order"
    copied = result.totals["input records copied (distinct values in chaos-out)"]
    assert copied == result.totals["records read back from chaos-in"] > 100
    assert result.totals["copy transactions aborted on purpose"] > 0
