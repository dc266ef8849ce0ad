"""The Spark benchmark's arithmetic: progress reports and commit timings into runs, runs into verdicts."""
from __future__ import annotations

import json

import pytest

from txnsim.bench.spark_bench import (
    BatchCommit,
    CopyRun,
    commit_cost_table,
    copy_run,
    parse_timings,
    throughput_table,
    verdicts,
)


def progress(rows: int, trigger_ms: int, add_batch_ms: int) -> dict:
    return {"numInputRows": rows, "durationMs": {"triggerExecution": trigger_ms, "addBatch": add_batch_ms}}


def run(rows_per_s: float, commit_s: float = 0.01, rows: int = 1000) -> CopyRun:
    return CopyRun(rows=rows, batches=1, batch_s=rows / rows_per_s, wall_s=2 * rows / rows_per_s,
                   add_batch_s=(0.5,), commits=(BatchCommit(0, rows, commit_s),))


def test_parse_timings_reads_one_commit_per_line_in_batch_order():
    text = "\n".join(json.dumps({"batch": b, "rows": 10 * b, "commit_s": 0.001 * b}) for b in (2, 0, 1)) + "\n\n"
    assert parse_timings(text) == [BatchCommit(0, 0, 0.0), BatchCommit(1, 10, 0.001), BatchCommit(2, 20, 0.002)]


def test_parse_timings_of_an_empty_file_is_no_commits():
    assert parse_timings("") == []


def test_copy_run_rates_rows_by_the_time_spent_in_micro_batches():
    reports = [progress(600, 300, 200), progress(400, 200, 150), progress(0, 500, 0)]
    measured = copy_run(reports, [BatchCommit(0, 600, 0.01), BatchCommit(1, 400, 0.02)], wall_s=2.0)
    assert (measured.rows, measured.batches) == (1000, 2)  # the empty trigger is not a micro-batch with rows
    assert measured.batch_s == pytest.approx(1.0)  # ... but its time counts: the query spent it
    assert measured.rows_per_s == pytest.approx(1000.0)
    assert measured.wall_rows_per_s == pytest.approx(500.0)
    assert measured.add_batch_s == (0.2, 0.15)


def test_the_throughput_target_is_judged_on_paired_rounds():
    runs = {"at-least-once": [run(1000), run(2000), run(1000)],
            "exactly-once": [run(950), run(1840), run(800)]}
    throughput, commit_cost = verdicts(runs, {1_000: [run(1, 0.010)], 100_000: [run(1, 0.012)]})
    assert throughput.met  # ratios 0.95, 0.92, 0.80: median 0.92
    assert "median ratio 0.920" in throughput.detail
    assert commit_cost.met and commit_cost.detail == "1.20x"


def test_a_commit_that_grows_with_rows_misses_the_target():
    runs = {"at-least-once": [run(1000)], "exactly-once": [run(850)]}
    throughput, commit_cost = verdicts(runs, {1_000: [run(1, 0.010)], 100_000: [run(1, 0.020)]})
    assert not throughput.met and not commit_cost.met


def test_tables_have_a_row_per_guarantee_and_per_batch_size():
    runs = {"at-least-once": [run(1000), run(1000)], "exactly-once": [run(900), run(1100)]}
    table = throughput_table(runs, records=1000, batch_rows=100, repeat=2)
    assert [row[0] for row in table.rows] == ["at-least-once (baseline)", "exactly-once"]
    assert table.rows[0][2] == "1.000 (+0.0%)"
    sized = commit_cost_table({1_000: [run(1, 0.010, rows=1_000)], 10_000: [run(1, 0.015, rows=10_000)]})
    assert [row[:4] for row in sized.rows] == [("1,000", "1,000", "1", "10.0"), ("10,000", "10,000", "1", "15.0")]
