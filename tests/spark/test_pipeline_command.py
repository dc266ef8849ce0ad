"""`txnsim pipeline`, as a user runs it: Spark driver and a txnsim node SIGKILLed, totals still exact."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.report.html_doc import read_report, trace

pytestmark = pytest.mark.slow


def test_the_pipeline_demo_passes_its_own_check_through_both_crashes(tmp_path):
    run = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "pipeline", "--orders", "900", "--minutes", "3",
                          "--rate", "150", "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Spark driver SIGKILLed while tasks were writing a micro-batch" in run.stdout
    assert "(the query's transaction coordinator) SIGKILLed mid-batch" in run.stdout
    assert "exactly once: 3 minutes, each written once" in run.stdout
    assert "WRONG" not in run.stdout

    # the report beside the cluster, checkpoint and driver log: both crashes, each minute ok, and the charts' data
    printed = [line.removeprefix("report: ") for line in run.stdout.splitlines() if line.startswith("report: ")]
    assert printed == [str(tmp_path / "pipeline-report.html")]
    doc = read_report(Path(printed[0]))
    assert sum("SIGKILL" in what for what in doc.column("events", "what")) == 2
    assert doc.column("income-per-minute", "") == ["ok"] * 3
    assert sum(trace(doc, "order-txns", "committed")["y"]) == 900 // 20 + 1, "each order transaction and the closer"
    assert {t["name"] for t in doc.figures["micro-batches"]["data"]} == {"driver run 1", "driver run 2"}
    assert any(row[2] == "acquired" for row in doc.tables["ownership-changes"])


def test_the_pipeline_stays_exactly_once_on_three_hosts_of_their_own(tmp_path):
    from txnsim.hosts import namespaces_unavailable
    from txnsim.zookeeper import zookeeper_available
    missing = zookeeper_available() or namespaces_unavailable()
    if missing:
        pytest.skip(f"hosts of their own cannot be made here: {missing}")
    run = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "pipeline", "--namespaces", "--orders", "900",
                          "--minutes", "3", "--rate", "150", "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "nodes on hosts of their own up" in run.stdout
    assert "Spark driver SIGKILLed while tasks were writing a micro-batch" in run.stdout
    assert "(the query's transaction coordinator) SIGKILLed mid-batch" in run.stdout
    assert "exactly once: 3 minutes, each written once" in run.stdout
