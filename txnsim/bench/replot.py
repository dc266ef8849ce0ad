"""Charts of a published benchmarks file drawn again from its tables, without running a benchmark:
each generated section is read back (markdown_tables), its tables get the charts their benchmark
declares, and the section is written again with an image under each chart's table.

`python -m txnsim.bench.replot docs/benchmarks.md docs/images/bench` redraws docs/benchmarks.md's charts.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from txnsim.bench import (
    code_bench,
    consumer_bench,
    consumer_memory,
    failover_bench,
    nodecpu_bench,
    peer_bench,
    producer_bench,
    rocketmq_bench,
    spark_bench,
)
from txnsim.bench.chart_spec import ChartSpec, column_index, spec_columns
from txnsim.bench.markdown_tables import sections, tables
from txnsim.bench.plot import write_charts
from txnsim.bench.report import BenchResult, ResultTable, replace_section, tables_markdown

#: the charts each benchmark declares for its tables, in table order (the last repeats: code has a table per
#: scenario)
DECLARED: Mapping[str, Sequence[ChartSpec]] = {
    "producer": (producer_bench.THROUGHPUT_CHART, producer_bench.COMMIT_COST_CHART),
    "consumer": (consumer_bench.READ_CHART, consumer_bench.READ_CHART, consumer_bench.READ_CHART,
                 consumer_memory.MEMORY_CHART),
    "failover": (failover_bench.KILL_CHART, failover_bench.PAUSE_CHART, failover_bench.ATTEMPTS_CHART),
    "rocketmq": (rocketmq_bench.THROUGHPUT_CHART, rocketmq_bench.PHASES_CHART, rocketmq_bench.WRITES_CHART,
                 rocketmq_bench.CHECK_CHART),
    "peer": (peer_bench.PEER_CHART,),
    "spark": (spark_bench.THROUGHPUT_CHART, spark_bench.COMMIT_COST_CHART),
    "code": (code_bench.CODE_CHART,),
    "nodecpu": (nodecpu_bench.CPU_CHART,),
}


def with_declared_chart(table: ResultTable, specs: Sequence[ChartSpec], index: int) -> ResultTable:
    """`table` with the chart declared for its place, if that chart's columns are all in it (else the default)."""
    if not specs:
        return table
    spec = specs[min(index, len(specs) - 1)]
    try:
        for column in spec_columns(spec):
            column_index(table.columns, column)
    except ValueError:
        return table
    return replace(table, chart=spec)


def replot(document: str, markdown_dir: Path, image_dir: Path) -> tuple[str, list[Path]]:
    """`document` with every generated section's charts drawn into `image_dir` and linked (relative to
    `markdown_dir`, where the document lives); the text around the tables is kept as it was."""
    written: list[Path] = []
    for name, body in sections(document).items():
        found = tuple(with_declared_chart(t, DECLARED.get(name, ()), i) for i, t in enumerate(tables(body)))
        charts = write_charts(BenchResult(name, found), image_dir)
        written += charts.values()
        links = {i: os.path.relpath(path, markdown_dir) for i, path in charts.items()}
        document = replace_section(document, name, _with_tables(body, found, links))
    return document, written


def _with_tables(body: str, found: Sequence[ResultTable], links: Mapping[int, str]) -> str:
    """The section body with its tables (from the first title to the verdicts) rendered again, charts linked."""
    lines = body.rstrip("\n").splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("**")), len(lines))
    verdicts = next((i for i, line in enumerate(lines) if line.startswith(("- met:", "- MISSED:"))), len(lines))
    middle = tables_markdown(found, links)
    return "\n".join([*lines[:first], *middle, *lines[verdicts:]]).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("markdown", type=Path, help="the benchmarks file, e.g. docs/benchmarks.md")
    parser.add_argument("image_dir", type=Path, help="where the charts go, e.g. docs/images/bench")
    args = parser.parse_args(argv)
    document, written = replot(args.markdown.read_text(), args.markdown.parent, args.image_dir)
    args.markdown.write_text(document)
    print(f"drew {len(written)} charts into {args.image_dir} and linked them in {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
