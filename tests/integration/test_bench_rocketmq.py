"""`txnsim bench rocketmq` end to end with tiny sizes: every run completes on a real cluster, the
tables are whole and the section lands in a markdown file. Speed is not judged here."""
from __future__ import annotations

from txnsim.bench import log_census, rocketmq_bench
from txnsim.bench.report import replace_section, section_body
from txnsim.cli.bench_cmd import HEADINGS


def test_the_rocketmq_scenario_runs_every_design_and_writes_its_section(tmp_path):
    result = rocketmq_bench.run(seconds=0.3, repeat=1, latency_messages=3, fsync_messages=3)

    assert [v.met for v in result.verdicts] == [True, True, True], [v.line() for v in result.verdicts]
    main, where, writes, checks = result.tables
    assert [row[0] for row in main.rows] == [d.label for d in rocketmq_bench.DESIGNS]
    assert [row[1] for row in checks.rows] == ["0%", "10%", "0%", "10%"]
    columns = {name: i for i, name in enumerate(writes.columns)}
    by_design = {row[0]: row for row in writes.rows}
    for design in rocketmq_bench.DESIGNS:
        row = by_design[design.label]
        assert float(row[columns[log_census.DATA]]) == 1.0, "each message lands in its partition once"
    # a copy is an ordinary batch; a message written in place, and the baseline's, is closed by a marker
    assert float(by_design[rocketmq_bench.ROCKETMQ.label][columns[log_census.MARKERS]]) == 0.0
    assert float(by_design[rocketmq_bench.KAFKA.label][columns[log_census.MARKERS]]) == 1.0
    assert float(by_design[rocketmq_bench.BASELINE.label][columns[log_census.HALF]]) == 0.0

    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n")
    body = section_body(result, command="txnsim bench rocketmq", date="today", machine="here")
    doc.write_text(replace_section(doc.read_text(), "rocketmq", body, heading=HEADINGS["rocketmq"]))
    text = doc.read_text()
    assert "## RocketMQ-style transactions" in text and "<!-- bench:rocketmq:end -->" in text
    assert "Check-back" in text
