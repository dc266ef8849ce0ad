"""`txnsim pipeline`, as a user runs it: Spark driver and a txnsim node SIGKILLed, totals still exact."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

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
