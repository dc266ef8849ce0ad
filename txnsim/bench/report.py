"""Benchmark results as tables, rendered for the terminal (rich) and for docs/benchmarks.md.

A markdown file holds one generated section per benchmark between marker comments;
`replace_section` swaps one section's body and leaves every other line of the file alone,
so hand-written analysis around the sections survives a re-run.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rich.table import Table

from txnsim.bench.chart_spec import ChartSpec, column_index, spec_columns


@dataclass(frozen=True, slots=True)
class ResultTable:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()
    #: what its chart shows (`--plot`); None: the default for its columns (chart_spec.default_spec)
    chart: ChartSpec | None = None

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: row {row} has {len(row)} cells for "
                                 f"{len(self.columns)} columns")
        if self.chart is not None:
            for column in spec_columns(self.chart):
                column_index(self.columns, column)  # a chart naming a missing column fails here, not when drawn


@dataclass(frozen=True, slots=True)
class Verdict:
    """One target of an issue and whether this run met it."""

    target: str
    met: bool
    detail: str

    def line(self) -> str:
        return f"{'met' if self.met else 'MISSED'}: {self.target} ({self.detail})"


@dataclass(frozen=True, slots=True)
class BenchResult:
    name: str
    tables: tuple[ResultTable, ...]
    verdicts: tuple[Verdict, ...] = field(default=())


# ------------------------------------------------------------ number formats

def format_count(value: float) -> str:
    return f"{value:,.0f}"


def format_ratio(value: float) -> str:
    """0.953 -> '0.953 (-4.7%)'."""
    if math.isnan(value):
        return "n/a"
    return f"{value:.3f} ({(value - 1) * 100:+.1f}%)"


def format_ms(seconds: float) -> str:
    """Seconds shown as milliseconds with a precision that suits the size."""
    ms = seconds * 1000
    if ms < 10:
        return f"{ms:.2f}"
    if ms < 100:
        return f"{ms:.1f}"
    return f"{ms:,.0f}"


# ------------------------------------------------------------ rendering

def to_rich(table: ResultTable) -> Table:
    rich_table = Table(title=table.title, title_justify="left", caption="\n".join(table.notes) or None,
                       caption_justify="left")
    for index, column in enumerate(table.columns):
        rich_table.add_column(column, justify="left" if index == 0 else "right")
    for row in table.rows:
        rich_table.add_row(*row)
    return rich_table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(table: ResultTable) -> str:
    lines = [f"**{table.title}**", "",
             "| " + " | ".join(_cell(c) for c in table.columns) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(table.columns) - 1)) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    for note in table.notes:
        lines += ["", note]
    return "\n".join(lines)


def chart_link(table: ResultTable, path: str) -> str:
    """A markdown image of the table's chart; `path` relative to the markdown file."""
    return f"![{_cell(table.title.split(':', 1)[0])}]({path})"


def tables_markdown(tables: Sequence[ResultTable], charts: Mapping[int, str] | None = None) -> list[str]:
    """Each table in markdown, followed by its chart where `charts` has one (table index -> relative path)."""
    parts: list[str] = []
    for index, table in enumerate(tables):
        parts += [to_markdown(table), ""]
        if charts and index in charts:
            parts += [chart_link(table, charts[index]), ""]
    return parts


def section_body(result: BenchResult, *, command: str, date: str, machine: str, cpu: str | None = None,
                 charts: Mapping[int, str] | None = None) -> str:
    parts = [f"Command: `{command}`  ", f"Date: {date}  ", f"Machine: {machine}" + ("  " if cpu else "")]
    if cpu:
        parts.append(f"CPU: {cpu}")
    parts.append("")
    parts += tables_markdown(result.tables, charts)
    if result.verdicts:
        parts += [f"- {verdict.line()}" for verdict in result.verdicts]
    return "\n".join(parts).rstrip() + "\n"


# ------------------------------------------------------------ the markdown file

def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


def replace_section(document: str, name: str, body: str, heading: str | None = None) -> str:
    """`document` with section `name` holding `body`; a missing section is appended (under `heading`)."""
    begin, end = _markers(name)
    block = f"{begin}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(document):
        return pattern.sub(lambda _match: block, document, count=1)
    prefix = document.rstrip("\n")
    lead = f"\n\n## {heading}\n\n" if heading else "\n\n"
    return (prefix + lead if prefix else (f"## {heading}\n\n" if heading else "")) + block + "\n"


def section_names(document: str) -> Sequence[str]:
    return re.findall(r"<!-- bench:([\w-]+):begin -->", document)
