"""Charts of benchmark tables: numbers read back from formatted cells, the default chart of a table that
declares none, real PNG files drawn by matplotlib, and the published markdown read back into tables."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from txnsim.bench.chart_spec import (
    Bars,
    NoChart,
    RatioBars,
    RatioSeries,
    Sweep,
    Target,
    chart_data,
    default_spec,
    parse_interval,
    parse_number,
)
from txnsim.bench.markdown_tables import sections, tables
from txnsim.bench.plot import chart_filename, write_charts
from txnsim.bench.replot import DECLARED, replot, with_declared_chart
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_ratio, section_body, to_markdown

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

THROUGHPUT = ResultTable(
    "Producer throughput: 100-byte values, 3 partitions, 2 s per run, median of 6 interleaved rounds",
    ("producer", "records/s", "ratio to baseline", "95% CI of ratio", "commits/s"),
    (("idempotent (baseline)", "113,861", "1.000 (+0.0%)", "1.000 .. 1.000", "-"),
     ("transactional, commits every 10 ms", "81,820", "0.720 (-28.0%)", "0.596 .. 0.858", "27.9"),
     ("transactional, commits every 100 ms", "113,475", "1.050 (+5.0%)", "0.894 .. 1.237", "5.3")),
    ("a note",),
    chart=RatioBars((RatioSeries("ratio to baseline", "95% CI of ratio"),), targets=(Target(0.95, "target"),)))
COMMIT_COST = ResultTable(
    "Commit latency vs records per transaction (3 partitions per transaction)",
    ("records per txn", "txns", "commit p50 ms", "commit p99 ms", "p50 vs smallest", "until readable p50 ms"),
    (("10", "100", "1.46", "14.2", "1.000 (+0.0%)", "8.58"),
     ("1,000", "50", "1.73", "8.44", "1.181 (+18.1%)", "9.07"),
     ("10,000", "20", "1.62", "4.72", "1.108 (+10.8%)", "9.34")))


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (which must come first)."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize("cell, number", [
    ("113,861", 113861.0), ("1.050 (+5.0%)", 1.05), ("0.720 (-28.0%)", 0.72), ("27%", 27.0), ("1.11x", 1.11),
    ("-3.5", -3.5), ("2,187", 2187.0), ("8.20", 8.2), ("-", None), ("n/a", None), ("", None), ("none", None),
])
def test_a_cell_gives_the_number_it_starts_with(cell: str, number: float | None) -> None:
    assert parse_number(cell) == number


def test_a_formatted_ratio_reads_back_as_the_ratio() -> None:
    assert parse_number(format_ratio(0.953)) == pytest.approx(0.953)


def test_a_confidence_interval_cell_reads_back_as_its_bounds() -> None:
    assert parse_interval("0.894 .. 1.237") == (0.894, 1.237)
    assert parse_interval("1,000 .. 2,500") == (1000.0, 2500.0)
    assert parse_interval("1.050 (+5.0%)") is None
    assert parse_interval("-") is None


def test_a_ratio_column_with_a_ci_after_it_gets_ratio_bars_by_default() -> None:
    spec = default_spec(THROUGHPUT.columns, THROUGHPUT.rows)
    assert isinstance(spec, RatioBars)
    assert spec.series == (RatioSeries(2, 3),)
    assert "ratio to baseline" in spec.value_label


def test_repeated_ratio_headers_each_pair_with_their_own_interval() -> None:
    columns = ("design", "producer msgs/s", "ratio to baseline", "95% CI of ratio", "consumer msgs/s",
               "ratio to baseline", "95% CI of ratio", "p50 ratio to baseline")
    spec = default_spec(columns, [("a", "1", "1.0", "1.0 .. 1.0", "2", "1.0", "1.0 .. 1.0", "1.0")])
    assert isinstance(spec, RatioBars)
    assert [(s.ratio, s.ci) for s in spec.series] == [(2, 3), (5, 6)]  # the last ratio has no interval
    data = chart_data("t", columns, [("a", "1", "1.2", "1.1 .. 1.3", "2", "0.9", "0.8 .. 1.0", "1.0")], spec)
    assert data is not None and [s.label for s in data.series] == ["producer msgs/s", "consumer msgs/s"]
    assert data.series[1].intervals == ((0.8, 1.0),)


def test_a_numeric_first_column_with_latency_medians_gets_a_sweep_of_the_medians() -> None:
    spec = default_spec(COMMIT_COST.columns, COMMIT_COST.rows)
    assert isinstance(spec, Sweep)
    assert spec.x == 0 and spec.ys == (2, 5)  # "p50 vs smallest" is a ratio, not a latency
    assert spec.log_x  # 10 .. 10,000
    data = chart_data(COMMIT_COST.title, COMMIT_COST.columns, COMMIT_COST.rows, None)
    assert data is not None and data.x == (10.0, 1000.0, 10000.0)
    assert data.series[0].values == (1.46, 1.73, 1.62)


def test_a_table_with_neither_gets_no_chart() -> None:
    columns, rows = ("failure", "attempts"), (("NotCoordinatorError", "35"),)
    assert default_spec(columns, rows) == NoChart()
    assert chart_data("t", columns, rows, None) is None
    assert chart_data("t", ("a", "b"), (("x", "-"),), Bars(("b",), "b")) is None  # nothing to draw


def test_a_chart_naming_a_missing_column_fails_when_the_table_is_made() -> None:
    with pytest.raises(ValueError, match="'ratio to before'"):
        ResultTable("t", ("code", "ratio to baseline"), (("a", "1.0"),),
                    chart=RatioBars((RatioSeries("ratio to before"),)))


def test_cells_without_a_number_leave_a_gap_in_the_chart() -> None:
    data = chart_data(THROUGHPUT.title, THROUGHPUT.columns, THROUGHPUT.rows,
                      Bars(("records/s", "commits/s"), "per second"))
    assert data is not None
    assert data.series[1].values == (None, 27.9, 5.3)


def test_charts_are_written_as_pngs_readable_at_docs_width(tmp_path: Path) -> None:
    failover = ResultTable("Failover: 3 rounds", ("interval", "p50 ms", "max ms"),
                           (("kill -> served", "84.3", "165"), ("restart -> served", "538", "744")),
                           chart=Bars(("p50 ms", "max ms"), "milliseconds", log_scale=True))
    parts = ResultTable("Log writes per message", ("design", "__transaction_state", "data partition"),
                        (("a", "3.00", "1.00"), ("b", "0.00", "1.00")),
                        chart=Bars(("__transaction_state", "data partition"), "batches", stacked=True))
    plain = ResultTable("What the probe saw", ("failure", "attempts"), (("x", "1"),))
    result = BenchResult("demo", (THROUGHPUT, COMMIT_COST, plain, failover, parts), (Verdict("t", True, "d"),))
    written = write_charts(result, tmp_path / "charts")
    assert sorted(written) == [0, 1, 3, 4]  # the plain table is not worth a picture
    assert written[0].name == "demo-producer-throughput.png"
    for path in written.values():
        width, height = png_size(path)
        assert width == 800 and 200 <= height <= 1000, (path, width, height)
        assert path.stat().st_size > 5_000  # bars, text and axes drawn, not an empty canvas


def test_two_tables_with_the_same_name_get_two_files() -> None:
    taken: set[str] = set()
    assert chart_filename("code", "Before/after, peer: txnsim's own producer", taken) == "code-before-after-peer.png"
    assert chart_filename("x", "Throughput: a", taken) == "x-throughput.png"
    assert chart_filename("x", "Throughput: b", taken) == "x-throughput-2.png"
    long = "Commit latency vs records per transaction (3 partitions per transaction)"
    assert chart_filename("p", long, taken) == "p-commit-latency-vs-records-per-transaction.png"


def test_sections_link_their_charts_relative_to_the_markdown_file() -> None:
    body = section_body(BenchResult("producer", (THROUGHPUT, COMMIT_COST)), command="txnsim bench producer",
                        date="today", machine="2 CPUs", charts={1: "images/bench/producer-commit.png"})
    assert "![Commit latency vs records per transaction (3 partitions per transaction)]" \
           "(images/bench/producer-commit.png)" in body
    assert body.count("![") == 1


def test_generated_markdown_reads_back_into_the_same_tables() -> None:
    document = ("# Benchmarks\n\n<!-- bench:producer:begin -->\n"
                + section_body(BenchResult("producer", (THROUGHPUT, COMMIT_COST), (Verdict("t", False, "d"),)),
                               command="c", date="d", machine="m")
                + "<!-- bench:producer:end -->\n")
    (found,) = [tables(body) for body in sections(document).values()]
    assert [(t.title, t.columns, t.rows, t.notes) for t in found] == \
           [(t.title, t.columns, t.rows, t.notes) for t in (THROUGHPUT, COMMIT_COST)]
    escaped = ResultTable("Pipes", ("a", "b"), (("x|y", "1"),))
    assert tables(to_markdown(escaped))[0].rows == (("x|y", "1"),)


def test_replot_draws_a_published_files_charts_and_links_them_once(tmp_path: Path) -> None:
    body = section_body(BenchResult("producer", (THROUGHPUT, COMMIT_COST), (Verdict("t", True, "d"),)),
                        command="c", date="d", machine="m")
    document = f"# Benchmarks\n\nhand-written\n\n<!-- bench:producer:begin -->\n{body}<!-- bench:producer:end -->\n"
    once, written = replot(document, tmp_path, tmp_path / "images")
    assert [p.name for p in written] == ["producer-producer-throughput.png",
                                        "producer-commit-latency-vs-records-per-transaction.png"]
    assert all(png_size(p)[0] == 800 for p in written)
    assert "![Producer throughput](images/producer-producer-throughput.png)" in once
    assert once.startswith("# Benchmarks\n\nhand-written\n") and "- met: t (d)" in once
    twice, _written = replot(once, tmp_path, tmp_path / "images")
    assert twice == once


def test_every_published_table_gets_the_chart_its_benchmark_declares() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs" / "benchmarks.md"
    checked = 0
    for name, body in sections(docs.read_text()).items():
        for index, table in enumerate(tables(body)):
            if name in DECLARED:
                assert with_declared_chart(table, DECLARED[name], index).chart is not None, (name, table.title)
                checked += 1
    assert checked >= 10


def test_a_numeric_first_column_without_medians_gets_a_sweep_of_its_rates() -> None:
    columns = ("nodes", "txns/s", "commits/s", "CPU µs/txn")
    rows = (("1", "1,200", "1,100", "50"), ("2", "2,000", "1,900", "55"), ("3", "2,600", "2,500", "60"))
    spec = default_spec(columns, rows)
    assert spec == Sweep(0, (1, 2), x_label="nodes", value_label="per second")
    assert default_spec(("nodes", "note"), (("1", "a"), ("2", "b"))) == NoChart()
