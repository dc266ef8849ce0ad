"""`txnsim chaos` end to end: the workload under kills and pauses on a real 3-node cluster
finds no anomaly, and the run really was broken and really did copy records."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.report.html_doc import read_report, trace
from txnsim.chaos import ANOMALIES, ChaosConfig, run_chaos
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


@pytest.mark.slow
def test_txnsim_chaos_writes_a_report_of_its_faults_ownership_transactions_and_anomalies(tmp_path):
    data = tmp_path / "cluster"
    argv = ["--duration", "8", "--seed", "1", "--faults", "kill,pause", "--fault-interval-ms", "2000"]
    run = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "chaos", *argv, "--data-dir", str(data)],
                         capture_output=True, text=True, timeout=240, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    printed = [line.removeprefix("report: ") for line in run.stdout.splitlines() if line.startswith("report: ")]
    assert printed == [str((data / "chaos-report.html").absolute())]
    doc = read_report(Path(printed[0]))

    schedule = ChaosConfig(duration_s=8, seed=1, faults=("kill", "pause"), fault_interval_ms=2000).schedule()
    assert [f.kind for f in schedule] == ["kill", "pause"]
    assert doc.column("fault-schedule", "fault") == [f.kind for f in schedule]
    assert doc.column("fault-schedule", "node") == [str(f.node) for f in schedule]
    assert doc.column("fault-schedule", "planned at") == [f"t+{f.at_s:.2f} s" for f in schedule]
    # a restart that is slow on a loaded machine delays the next fault, possibly past the end of the run
    outcomes = doc.column("fault-schedule", "outcome")
    assert outcomes[0] == "healed" and outcomes[1] in ("healed", "not reached (the run ended first)"), outcomes

    assert doc.column("anomalies", "anomaly") == list(ANOMALIES)
    assert set(doc.column("anomalies", "count")) == {"0"} and set(doc.column("anomalies", "example")) == {"none"}

    # the chart counts what the checker counted (and the text summary printed)
    totals = dict(doc.tables["totals"])
    committed = sum(int(n) for what, n in totals.items() if what.endswith("transactions committed"))
    assert committed > 0 and sum(trace(doc, "txn-outcomes", "committed")["y"]) == committed
    aborted = sum(int(n) for what, n in totals.items() if what.endswith("transactions aborted on purpose"))
    assert sum(trace(doc, "txn-outcomes", "aborted on purpose")["y"]) == aborted
    summary = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in run.stdout.splitlines()
               if line.count("│") == 3 and "transactions committed" in line}
    assert sum(int(n) for n in summary.values()) == committed

    # the killed node's logs moved to the others while it was down, and the report shows it
    killed = schedule[0]
    injected, healed = (float(doc.column("fault-schedule", column)[0].removeprefix("t+").removesuffix(" s"))
                        for column in ("injected at", "healed at"))
    moves = [row for row in doc.tables["ownership-changes"] if row[2] == "acquired" and row[1] != str(killed.node)
             and injected <= float(row[0].removeprefix("t").removesuffix(" s")) <= healed + 1.0]
    assert moves, doc.tables["ownership-changes"]
    assert {f"node {n}" for n in range(3)} <= {t["name"] for t in doc.figures["ownership"]["data"]}
