"""What a benchmark table's chart shows, declared beside the table, and the numbers read back from its
formatted cells ("113,861", "1.050 (+5.0%)", "0.894 .. 1.237"). Pure: no matplotlib here, so a benchmark
declares its charts without importing a plotting library, and the rules are testable on their own.

A table without a spec still gets a chart when one makes sense (`default_spec`): a "ratio to ..." column
followed by a "... CI ..." column makes ratio bars with CI whiskers; a first column that is a number in
every row makes a sweep of the table's "p50" (else "/s") columns against it. New benchmarks get charts
without work.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

#: a column by its header, or by its index (for a header a table repeats, as rocketmq's "ratio to baseline")
Column = str | int


@dataclass(frozen=True, slots=True)
class Target:
    """A line across the chart at `value` (in the value axis's unit), e.g. an issue's target."""

    value: float
    label: str


@dataclass(frozen=True, slots=True)
class RatioSeries:
    ratio: Column
    #: the column holding the ratio's confidence interval ("0.894 .. 1.237"), drawn as whiskers
    ci: Column | None = None
    #: the legend's name; None: the header of the column before the ratio (e.g. "producer msgs/s")
    label: str | None = None


@dataclass(frozen=True, slots=True)
class RatioBars:
    """One horizontal bar per row (per series), a line at the baseline's 1.0 and at each target."""

    series: tuple[RatioSeries, ...]
    value_label: str = "ratio to baseline (same round)"
    targets: tuple[Target, ...] = ()
    #: the columns whose cells name a row's bar, joined (the first column, unless rows need more to differ)
    row_names: tuple[Column, ...] = (0,)


@dataclass(frozen=True, slots=True)
class Sweep:
    """How columns `ys` change with the number in column `x` (one line per y column)."""

    x: Column
    ys: tuple[Column, ...]
    x_label: str
    value_label: str
    log_x: bool = False
    log_y: bool = False
    targets: tuple[Target, ...] = ()


@dataclass(frozen=True, slots=True)
class Bars:
    """Values of each row side by side (or `stacked`, for parts of a whole), one horizontal bar each."""

    values: tuple[Column, ...]
    value_label: str
    stacked: bool = False
    log_scale: bool = False
    targets: tuple[Target, ...] = ()
    row_names: tuple[Column, ...] = (0,)


@dataclass(frozen=True, slots=True)
class NoChart:
    """This table is not worth a picture."""


ChartSpec = RatioBars | Sweep | Bars | NoChart


# ------------------------------------------------------------ cells back to numbers

_NUMBER = r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
_LEADING_NUMBER = re.compile(rf"\s*({_NUMBER})")
_INTERVAL = re.compile(rf"\s*({_NUMBER})\s*(?:\.\.|–|to)\s*({_NUMBER})")


def parse_number(cell: str) -> float | None:
    """The number a formatted cell starts with: '113,861' -> 113861, '1.050 (+5.0%)' -> 1.05, '27%' -> 27,
    '1.11x' -> 1.11; None for a cell that holds no number ('-', 'n/a', '')."""
    match = _LEADING_NUMBER.match(cell)
    return float(match.group(1).replace(",", "")) if match else None


def parse_interval(cell: str) -> tuple[float, float] | None:
    """'0.894 .. 1.237' -> (0.894, 1.237); None for a cell that is not an interval."""
    match = _INTERVAL.match(cell)
    if not match:
        return None
    return float(match.group(1).replace(",", "")), float(match.group(2).replace(",", ""))


def column_index(columns: Sequence[str], column: Column) -> int:
    """The index of `column` among `columns`; ValueError naming both when there is no such column."""
    if isinstance(column, int):
        if not 0 <= column < len(columns):
            raise ValueError(f"chart names column {column}, but the table has {len(columns)} columns")
        return column
    try:
        return list(columns).index(column)
    except ValueError:
        raise ValueError(f"chart names column {column!r}, which is not among {list(columns)}") from None


def spec_columns(spec: ChartSpec) -> tuple[Column, ...]:
    """Every column a spec reads (to check them once, when the table is made)."""
    if isinstance(spec, RatioBars):
        return (*spec.row_names, *(c for s in spec.series for c in (s.ratio, s.ci) if c is not None))
    if isinstance(spec, Sweep):
        return (spec.x, *spec.ys)
    if isinstance(spec, Bars):
        return (*spec.row_names, *spec.values)
    return ()


# ------------------------------------------------------------ the default

def _is_ratio(header: str) -> bool:
    return header.lower().startswith("ratio")


def _is_interval(header: str) -> bool:
    return "CI" in header.split() or "confidence" in header.lower()


def default_spec(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> ChartSpec:
    """Ratio bars when a "ratio ..." column has a CI column after it (before the next ratio column); else a
    sweep when the first column is a number in every row of two or more: of the p50 columns if there are
    any, else of the rate columns ("/s"); else none."""
    series: list[RatioSeries] = []
    for index, header in enumerate(columns):
        if not _is_ratio(header):
            continue
        for after in range(index + 1, len(columns)):
            if _is_ratio(columns[after]):
                break
            if _is_interval(columns[after]):
                series.append(RatioSeries(index, after))
                break
    if series:
        return RatioBars(tuple(series), value_label=_ratio_label(columns[_index(series[0].ratio)]))
    xs = [parse_number(row[0]) for row in rows]
    if len(rows) < 2 or any(x is None for x in xs):
        return NoChart()
    known = [x for x in xs if x is not None]
    wide = min(known) > 0 and max(known) / min(known) >= 100  # 10 .. 10,000: a log axis spreads them
    x_label = columns[0] + (" (log scale)" if wide else "")
    medians = [i for i, header in enumerate(columns) if i > 0 and "p50" in header]
    if medians:  # in the first one's unit ("ms"): not a "p50 vs smallest" ratio beside them
        unit = columns[medians[0]].split()[-1]
        ys = tuple(i for i in medians if columns[i].split()[-1] == unit)
        return Sweep(0, ys, x_label, f"p50 ({unit})" if unit != "p50" else "p50", log_x=wide)
    rates = tuple(i for i, header in enumerate(columns) if i > 0 and header.endswith("/s"))
    if rates:
        return Sweep(0, rates, x_label, columns[rates[0]] if len(rates) == 1 else "per second", log_x=wide)
    return NoChart()


def _index(column: Column) -> int:
    assert isinstance(column, int), "the default spec names columns by index"
    return column


def _ratio_label(header: str) -> str:
    return f"{header} (same round)" if header.lower().startswith("ratio to") else header


# ------------------------------------------------------------ a spec applied to a table

@dataclass(frozen=True, slots=True)
class Series:
    label: str
    #: one value per category (bars) or per x (sweep); None where the cell held no number
    values: tuple[float | None, ...]
    #: the confidence interval of each value, where the table gives one
    intervals: tuple[tuple[float, float] | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class ChartData:
    """A chart's numbers, ready to draw: what `plot` needs and nothing about how a table is formatted."""

    kind: Literal["ratio", "bars", "stacked", "sweep"]
    title: str
    #: the rows' labels (bars) or the x values' labels (sweep)
    categories: tuple[str, ...]
    series: tuple[Series, ...]
    value_label: str
    targets: tuple[Target, ...] = ()
    x: tuple[float, ...] = ()
    x_label: str = ""
    log_x: bool = False
    log_value: bool = False


def chart_data(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]],
               spec: ChartSpec | None) -> ChartData | None:
    """The chart of a table (its own spec, or the default); None when it has none or no number to show."""
    spec = default_spec(columns, rows) if spec is None else spec
    data: ChartData
    if isinstance(spec, RatioBars | Bars):
        names = [column_index(columns, c) for c in spec.row_names]
        categories = tuple(", ".join(row[i] for i in names) for row in rows)
    if isinstance(spec, RatioBars):
        series = []
        for s in spec.series:
            ratio = column_index(columns, s.ratio)
            label = s.label or (columns[ratio - 1] if ratio > 1 and len(spec.series) > 1 else
                                "median ratio, 95% CI whiskers" if s.ci is not None else "median ratio")
            values = tuple(parse_number(row[ratio]) for row in rows)
            intervals = None
            if s.ci is not None:
                ci = column_index(columns, s.ci)
                intervals = tuple(parse_interval(row[ci]) for row in rows)
            series.append(Series(label, values, intervals))
        data = ChartData("ratio", title, categories, tuple(series), spec.value_label, spec.targets)
    elif isinstance(spec, Bars):
        series = [Series(columns[i], tuple(parse_number(row[i]) for row in rows))
                  for i in (column_index(columns, c) for c in spec.values)]
        data = ChartData("stacked" if spec.stacked else "bars", title, categories, tuple(series),
                         spec.value_label, spec.targets, log_value=spec.log_scale)
    elif isinstance(spec, Sweep):
        x_index = column_index(columns, spec.x)
        kept = [row for row in rows if parse_number(row[x_index]) is not None]
        xs = tuple(float(parse_number(row[x_index]) or 0.0) for row in kept)
        series = [Series(columns[i], tuple(parse_number(row[i]) for row in kept))
                  for i in (column_index(columns, c) for c in spec.ys)]
        data = ChartData("sweep", title, tuple(row[x_index] for row in kept), tuple(series), spec.value_label,
                         spec.targets, x=xs, x_label=spec.x_label, log_x=spec.log_x, log_value=spec.log_y)
    else:
        return None
    if not any(v is not None for s in data.series for v in s.values):
        return None
    return data
