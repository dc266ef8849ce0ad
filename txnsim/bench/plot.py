"""Charts of benchmark tables as PNG files (`txnsim bench --plot DIR`), drawn with matplotlib.

Every table of a BenchResult that is worth a picture (chart_spec: its own spec or the default) gets one
file, NAME-<title slug>.png. Figures are made with matplotlib's object API on its Agg canvas, never
pyplot: no display, no global figure state, nothing left open between charts.
"""
from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from txnsim.bench.chart_spec import ChartData, Series, chart_data
from txnsim.bench.report import BenchResult, ResultTable

#: 8 x 100 dpi: 800 pixels wide, the width of a rendered markdown page, so text stays readable unscaled
WIDTH_IN, DPI = 8.0, 100
#: matplotlib's default cycle (tab10) minus the red, kept for target lines
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
TARGET_COLOURS = ("#d62728", "#8b0000", "#ff9896")
#: a value's label stays readable where it crosses a baseline or target line
LABEL_BOX = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}


def write_charts(result: BenchResult, directory: Path) -> dict[int, Path]:
    """Draw every chart of `result` into `directory` (created); the file of each table that got one, by index."""
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[int, Path] = {}
    taken: set[str] = set()
    for index, table in enumerate(result.tables):
        data = table_chart(table)
        if data is None:
            continue
        path = directory / chart_filename(result.name, table.title, taken)
        draw(data, path)
        written[index] = path
    return written


def table_chart(table: ResultTable) -> ChartData | None:
    return chart_data(table.title, table.columns, table.rows, table.chart)


def chart_filename(benchmark: str, title: str, taken: set[str]) -> str:
    """'producer' + 'Producer throughput: 100-byte values, ...' -> 'producer-producer-throughput.png': the
    title up to its first colon (a long one up to a comma or parenthesis) names the table, numbered when two
    tables of a benchmark would share a name."""
    head = title.split(":", 1)[0]
    if len(head) > 48:
        head = re.split(r"[(,]", head, maxsplit=1)[0]
    slug = re.sub(r"[^a-z0-9]+", "-", head.lower()).strip("-")
    if len(slug) > 48:
        slug = slug[:48].rsplit("-", 1)[0]
    slug = slug or "table"
    name, number = f"{benchmark}-{slug}", 2
    while name in taken:
        name, number = f"{benchmark}-{slug}-{number}", number + 1
    taken.add(name)
    return name + ".png"


def draw(data: ChartData, path: Path) -> None:
    title = textwrap.fill(data.title, 110)
    rows = len(data.categories) * (max(1.0, 0.7 * len(data.series)) if data.kind in ("ratio", "bars") else 1.0)
    height = 3.4 if data.kind == "sweep" else max(2.6, 1.5 + 0.42 * rows)
    figure = Figure(figsize=(WIDTH_IN, height + 0.17 * title.count("\n")), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    figure.suptitle(title, x=0.01, horizontalalignment="left", fontsize=9.5)
    if data.kind == "sweep":
        _sweep(axes, data)
    else:
        _horizontal_bars(axes, data)
    axes.grid(True, axis="x" if data.kind != "sweep" else "both", alpha=0.3)
    axes.set_axisbelow(True)
    if len(data.series) > 1 or data.targets or data.kind == "ratio":
        entries = len(axes.get_legend_handles_labels()[0])
        figure.legend(loc="outside lower center", ncols=min(entries, 4), fontsize=8, frameon=False)
    figure.savefig(path, format="png", dpi=DPI)


def _nan(value: float | None, log: bool = False) -> float:
    return math.nan if value is None or (log and value <= 0) else value


def _legend(label: str) -> str:
    """matplotlib leaves labels that start with "_" out of the legend (as "__transaction_state"): not these."""
    return "\u00a0" + label if label.startswith("_") else label


def _short(value: float) -> str:
    """A bar's label: three significant digits, thousands separated."""
    if value == 0:
        return "0"
    digits = max(0, 2 - int(math.floor(math.log10(abs(value)))))
    return f"{value:,.{digits}f}"


def _horizontal_bars(axes: Axes, data: ChartData) -> None:
    """Ratio bars (with CI whiskers and the baseline at 1), grouped value bars or stacked parts, one row each."""
    count, log = len(data.series), data.log_value
    height = 0.8 / count if data.kind != "stacked" else 0.6
    if log:
        _log_axis(axes, "x")
    lefts = [0.0] * len(data.categories)
    ends: list[float] = [0.0]
    for number, series in enumerate(data.series):
        offset = 0.0 if data.kind == "stacked" else (number - (count - 1) / 2) * height
        positions = [row + offset for row in range(len(data.categories))]
        values = [_nan(v, log) for v in series.values]
        left = lefts if data.kind == "stacked" else None
        axes.barh(positions, values, height=height * 0.9, left=left, label=_legend(series.label),
                  color=COLOURS[number % len(COLOURS)])
        ends += _whiskers(axes, series, positions) if data.kind == "ratio" else []
        if data.kind == "stacked":
            lefts = [lft + (v if not math.isnan(v) else 0.0) for lft, v in zip(lefts, values)]
        else:
            ends += _labels(axes, series, positions, whiskers=data.kind == "ratio")
    if data.kind == "stacked":
        for row, total in enumerate(lefts):
            axes.annotate(_short(total), (total, row), xytext=(3, 0), textcoords="offset points", va="center",
                          fontsize=8, bbox=LABEL_BOX)
        ends += lefts
    axes.set_yticks(range(len(data.categories)), [textwrap.fill(c, 30) for c in data.categories], fontsize=8.5)
    axes.invert_yaxis()  # the table's first row on top
    if data.kind == "ratio":
        axes.axvline(1.0, color="black", linestyle="--", linewidth=1, label="baseline (1.0)")
        ends.append(1.0)
    _target_lines(axes, data, vertical=True)
    ends += [t.value for t in data.targets]
    drawn = [e for e in ends if not math.isnan(e) and (e > 0 or not log)]
    if log and drawn:  # room for the labels past the longest bar, and the shortest bar visible
        axes.set_xlim(min(drawn) / 2, max(drawn) * 1.8)
    elif drawn:
        axes.set_xlim(0, max(drawn) * 1.15 or 1.0)
    axes.set_xlabel(data.value_label)


def _whiskers(axes: Axes, series: Series, positions: Sequence[float]) -> list[float]:
    if series.intervals is None:
        return []
    points = [(p, v, ci) for p, v, ci in zip(positions, series.values, series.intervals)
              if v is not None and ci is not None and ci[1] > ci[0]]
    if not points:
        return []
    axes.errorbar([v for _p, v, _ci in points], [p for p, _v, _ci in points],
                  xerr=[[max(0.0, v - ci[0]) for _p, v, ci in points], [max(0.0, ci[1] - v) for _p, v, ci in points]],
                  fmt="none", ecolor="black", elinewidth=1, capsize=3)
    return [ci[1] for _p, _v, ci in points]


def _labels(axes: Axes, series: Series, positions: Sequence[float], whiskers: bool) -> list[float]:
    """Each bar's value written past its end (past its whisker, for a ratio), so no one reads it off the axis."""
    ends = []
    intervals = series.intervals or (None,) * len(series.values)
    for position, value, interval in zip(positions, series.values, intervals):
        if value is None:
            continue
        end = max(value, interval[1]) if whiskers and interval is not None else value
        text = f"{value:.3f}" if whiskers else _short(value)
        axes.annotate(text, (end, position), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8,
                      bbox=LABEL_BOX)
        ends.append(end)
    return ends


def _sweep(axes: Axes, data: ChartData) -> None:
    for number, series in enumerate(data.series):
        axes.plot(data.x, [_nan(v, data.log_value) for v in series.values], marker="o", label=_legend(series.label),
                  color=COLOURS[number % len(COLOURS)])
    if data.log_x:
        axes.set_xscale("log")
    if data.log_value:
        _log_axis(axes, "y")
    else:
        axes.set_ylim(bottom=0)
    axes.set_xticks(data.x, list(data.categories), fontsize=8.5)
    axes.minorticks_off()
    _target_lines(axes, data, vertical=False)
    axes.set_xlabel(data.x_label)
    axes.set_ylabel(data.value_label)


def _log_axis(axes: Axes, which: str) -> None:
    """A log scale ticked at 1, 2 and 5 of each decade, written as plain numbers (20, not 2x10^1)."""
    axis = axes.xaxis if which == "x" else axes.yaxis
    (axes.set_xscale if which == "x" else axes.set_yscale)("log")
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:,g}"))
    axis.set_minor_formatter(FuncFormatter(lambda _value, _position: ""))


def _target_lines(axes: Axes, data: ChartData, vertical: bool) -> None:
    for number, target in enumerate(data.targets):
        colour = TARGET_COLOURS[number % len(TARGET_COLOURS)]
        line = axes.axvline if vertical else axes.axhline
        line(target.value, color=colour, linestyle=":", linewidth=1.8, label=target.label)
