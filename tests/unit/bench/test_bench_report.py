"""Result tables as markdown, the generated sections of docs/benchmarks.md, and the machine line."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from txnsim.bench.machine import busy_seconds_from_proc_stat, cpu_model_from_cpuinfo
from txnsim.bench.producer_bench import AckCounter
from txnsim.bench.report import (
    BenchResult,
    ResultTable,
    Verdict,
    format_ms,
    format_ratio,
    replace_section,
    section_body,
    section_names,
    to_markdown,
)
from txnsim.cli.bench_cmd import BENCHMARKS, IN_ALL, chart_dir, command_line, selected_benchmarks
from txnsim.cli.main import build_parser

TABLE = ResultTable("Throughput", ("producer", "records/s"), (("baseline", "1,000"), ("a|b", "950")), ("a note",))


def test_markdown_table_has_a_header_alignment_row_and_escaped_pipes():
    lines = to_markdown(TABLE).splitlines()
    assert lines[0] == "**Throughput**"
    assert lines[2] == "| producer | records/s |"
    assert lines[3] == "|---|---:|"
    assert lines[5] == "| a\\|b | 950 |"
    assert lines[-1] == "a note"


def test_a_row_with_the_wrong_number_of_cells_is_refused():
    with pytest.raises(ValueError, match="2 columns"):
        ResultTable("t", ("a", "b"), (("only one",),))


def test_ratio_and_milliseconds_formats():
    assert format_ratio(0.953) == "0.953 (-4.7%)"
    assert format_ratio(1.02) == "1.020 (+2.0%)"
    assert format_ratio(float("nan")) == "n/a"
    assert format_ms(0.00123) == "1.23"
    assert format_ms(0.0456) == "45.6"
    assert format_ms(1.5) == "1,500"


def test_section_body_names_command_date_machine_and_verdicts():
    result = BenchResult("producer", (TABLE,), (Verdict("loses at most 5%", False, "ratio 0.93"),))
    body = section_body(result, command="txnsim bench producer", date="2025-01-01", machine="2 CPUs")
    assert "Command: `txnsim bench producer`" in body
    assert "Date: 2025-01-01" in body and "Machine: 2 CPUs" in body
    assert "- MISSED: loses at most 5% (ratio 0.93)" in body


def test_replace_section_swaps_only_its_own_section():
    document = ("# Benchmarks\n\nintro\n\n<!-- bench:producer:begin -->\nold producer\n<!-- bench:producer:end -->\n"
                "\nanalysis stays\n\n<!-- bench:failover:begin -->\nold failover\n<!-- bench:failover:end -->\n")
    updated = replace_section(document, "producer", "new producer\n")
    assert "new producer" in updated and "old producer" not in updated
    assert "old failover" in updated and "analysis stays" in updated and updated.startswith("# Benchmarks\n\nintro")


def test_replace_section_appends_a_missing_section_under_its_heading():
    updated = replace_section("# Benchmarks\n", "consumer", "tables\n", heading="Consumer throughput")
    assert updated == ("# Benchmarks\n\n## Consumer throughput\n\n"
                       "<!-- bench:consumer:begin -->\ntables\n<!-- bench:consumer:end -->\n")
    assert section_names(updated) == ["consumer"]
    assert replace_section(updated, "consumer", "again\n").count("bench:consumer:begin") == 1


def test_replace_section_takes_a_body_with_backslashes_literally():
    assert "a\\|b" in replace_section("<!-- bench:x:begin -->\n<!-- bench:x:end -->", "x", "a\\|b")


def test_cpu_model_comes_from_the_first_model_name_line():
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\n"
    assert cpu_model_from_cpuinfo(cpuinfo) == "AMD EPYC 7B13"
    assert cpu_model_from_cpuinfo("processor\t: 0\n") == "unknown CPU"


def test_command_line_repeats_only_the_options_given():
    args = argparse.Namespace(benchmark=["all"], seconds=5.0, repeat=5, failover_rounds=None, records=None,
                              output=Path("docs/benchmarks.md"))
    assert command_line(args) == "txnsim bench all --seconds 5 --repeat 5 --output docs/benchmarks.md"
    args = argparse.Namespace(benchmark=["rpw", "commit"], repeat=None, no_plot=True)
    assert command_line(args) == "txnsim bench rpw commit --no-plot"


def test_no_name_runs_every_benchmark_but_code_and_charts_go_where_asked():
    parse = build_parser(["bench"]).parse_args
    assert selected_benchmarks(parse(["bench"]).benchmark) == IN_ALL
    assert "code" not in IN_ALL and set(IN_ALL) | {"code"} == set(BENCHMARKS)
    assert selected_benchmarks(parse(["bench", "rpw", "peer", "rpw"]).benchmark) == ("rpw", "peer")
    assert chart_dir(parse(["bench"])) == Path("txnsim-bench")
    assert chart_dir(parse(["bench", "--output", "docs/benchmarks.md"])) == Path("docs/images/bench")
    assert chart_dir(parse(["bench", "--plot", "here"])) == Path("here")
    assert chart_dir(parse(["bench", "--no-plot"])) is None


class _Future:
    def __init__(self, done: bool, ok: bool = True) -> None:
        self.is_done, self._ok = done, ok

    def succeeded(self) -> bool:
        return self.is_done and self._ok


def test_ack_counter_counts_done_futures_and_fails_what_never_completed():
    counter = AckCounter()
    for future in (_Future(True), _Future(True, ok=False), _Future(False), _Future(True)):
        counter.add(future)
    counter.sweep()
    assert (counter.acknowledged, counter.failed) == (1, 1)  # stops at the first future still pending
    counter.finish()
    assert (counter.acknowledged, counter.failed) == (2, 2)


def test_busy_seconds_leave_out_idle_and_iowait():
    stat = "cpu  100 5 50 1000 20 3 2 0 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n"
    assert busy_seconds_from_proc_stat(stat, ticks_per_second=100) == pytest.approx(1.6)
    with pytest.raises(ValueError):
        busy_seconds_from_proc_stat("intr 1 2 3\n", ticks_per_second=100)


def test_section_body_says_how_busy_the_machine_was():
    body = section_body(BenchResult("failover", (TABLE,)), command="c", date="d", machine="m", cpu="others 1%")
    assert "Machine: m  \nCPU: others 1%\n" in body


def test_a_failing_benchmark_of_several_is_reported_and_the_others_still_run(monkeypatch, capsys):
    from txnsim.bench.report import BenchResult, ResultTable
    from txnsim.cli import bench_cmd

    def runner(name, args):
        def run(progress):
            if name == "peer":
                raise RuntimeError("librdkafka's mock cluster would not start")
            return BenchResult(name, (ResultTable(f"{name} table", ("a",), (("1",),)),))
        return run
    monkeypatch.setattr(bench_cmd, "_runner", runner)
    monkeypatch.setattr(bench_cmd, "_warn_if_busy", lambda cpus, out: None)

    args = build_parser(["bench"]).parse_args(["bench", "commit", "peer", "rpw", "--no-plot", "--json"])
    assert bench_cmd.run_bench(args) == 1
    out = json.loads(capsys.readouterr().out)
    assert [b["name"] for b in out["benchmarks"]] == ["commit", "rpw"] and out["failed"] == ["peer"]
