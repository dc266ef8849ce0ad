"""Series -> Plotly figures. Each figure's data (x, y per trace) is what its table-side
function computed; layout only adds titles, colours and the shaded fault intervals."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from txnsim.report.timeline import TXN_SERIES, Binned

SERIES_COLOURS = {"committed": "#2e7d32", "aborted on purpose": "#90a4ae", "aborted after an error": "#ef6c00",
                  "unknown": "#c62828", "aborted and retried": "#ef6c00"}
FAULT_COLOURS = {"kill": "#e53935", "pause": "#fb8c00", "restart": "#8e24aa"}

#: a fault interval to shade: (start s, end s, label, fault kind)
Band = tuple[float, float, str, str]


def _layout(figure: go.Figure, title: str, x_title: str, y_title: str) -> go.Figure:
    figure.update_layout(title=title, template="plotly_white", height=360, margin=dict(l=60, r=20, t=50, b=50),
                         legend=dict(orientation="h", y=-0.2, traceorder="normal"), xaxis_title=x_title, yaxis_title=y_title)
    return figure


def _shade(figure: go.Figure, bands: Sequence[Band]) -> None:
    for start, end, label, kind in bands:
        figure.add_vrect(x0=start, x1=max(end, start + 0.05), fillcolor=FAULT_COLOURS.get(kind, "#9e9e9e"),
                         opacity=0.15, line_width=0, layer="below", annotation_text=label, annotation_position="top left",
                         annotation_font_size=10)


def outcomes_figure(bins: Binned, bands: Sequence[Band], title: str,
                    series: Sequence[str] = TXN_SERIES) -> go.Figure:
    """Stacked bars: transactions ended per bin, by outcome, with the faults shaded behind."""
    figure = go.Figure()
    centres = [start + bins.bin_s / 2 for start in bins.starts]
    for name in series:
        figure.add_trace(go.Bar(name=name, x=centres, y=bins.counts[name], width=bins.bin_s * 0.9,
                                marker_color=SERIES_COLOURS.get(name),
                                hovertemplate=f"{name}: %{{y}}<br>t+%{{x}} s<extra></extra>"))
    figure.update_layout(barmode="stack")
    _shade(figure, bands)
    return _layout(figure, title, f"seconds after the start ({bins.bin_s:g} s per bar)", "transactions")


def ownership_figure(points: Mapping[int, Sequence[tuple[float, int]]], bands: Sequence[Band],
                     end_s: float) -> go.Figure:
    """One step line per node: how many logs it owns, changing at each ownership change."""
    figure = go.Figure()
    for node in sorted(points):
        xs = [t for t, _ in points[node]]
        ys = [count for _, count in points[node]]
        if xs and xs[-1] < end_s:
            xs.append(end_s)
            ys.append(ys[-1])
        figure.add_trace(go.Scatter(name=f"node {node}", x=xs, y=ys, mode="lines", line_shape="hv"))
    _shade(figure, bands)
    return _layout(figure, "logs owned per node (transaction and offsets shards, partitions)",
                   "seconds after the start", "logs owned")


def batches_figure(batches: Sequence[tuple[float, int, int]]) -> go.Figure:
    """Spark micro-batches as they finished: (time, driver run, input rows), a colour per driver run."""
    figure = go.Figure()
    for run in sorted({r for _, r, _ in batches}):
        mine = [(t, rows) for t, r, rows in batches if r == run]
        figure.add_trace(go.Bar(name=f"driver run {run}", x=[t for t, _ in mine], y=[rows for _, rows in mine],
                                width=0.5))
    return _layout(figure, "Spark micro-batches (input rows of each, when it finished)",
                   "seconds after the start", "input rows")


def income_figure(minutes: Sequence[str], expected: Sequence[float | None],
                  read_back: Sequence[float | None]) -> go.Figure:
    """Income per event-time minute: computed from the orders beside what read_committed read back."""
    figure = go.Figure([go.Bar(name="from the orders", x=list(minutes), y=list(expected), marker_color="#1565c0"),
                        go.Bar(name="read back (read_committed)", x=list(minutes), y=list(read_back),
                               marker_color="#2e7d32")])
    figure.update_layout(barmode="group")
    return _layout(figure, "income per minute", "event-time minute (UTC)", "income")


def mark_events(figure: go.Figure, events: Sequence[tuple[float, str]]) -> go.Figure:
    """A dashed vertical line at each crash (red) and restart (grey) among a run's steps."""
    for at, text in events:
        if "SIGKILL" in text or "restart" in text:
            figure.add_vline(x=at, line_dash="dash", line_color="#e53935" if "SIGKILL" in text else "#757575",
                             line_width=1)
    return figure
