"""The report of one `txnsim pipeline` run: its crashes, the order transactions committed and
retried over time, Spark's micro-batches, ownership changes, and income per minute checked."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import plotly.graph_objects as go

from txnsim.ownership import owned_over_time
from txnsim.pipeline.runner import PipelineConfig, PipelineResult
from txnsim.report.figures import batches_figure, income_figure, mark_events, outcomes_figure, ownership_figure
from txnsim.report.render import render
from txnsim.report.timeline import binned

ORDER_SERIES = ("committed", "aborted and retried")


def _minute(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%H:%M")


@dataclass(frozen=True, slots=True)
class IncomeRow:
    """One event-time minute; income in units (not cents); `written`: how many times it was read back."""

    minute: str
    orders: int | None
    expected: float | None
    read_back: float | None
    written: int
    ok: bool


def income_rows(result: PipelineResult) -> list[IncomeRow]:
    rows = []
    for minute in sorted(set(result.expected) | set(result.read_back)):
        income, count = result.expected.get(minute, (None, None))
        seen = result.read_back.get(minute, [])
        rows.append(IncomeRow(_minute(minute), count, None if income is None else income / 100,
                              seen[0][0] / 100 if seen else None, len(seen),
                              len(seen) == 1 and (income, count) == seen[0]))
    return rows


def pipeline_figures(result: PipelineResult) -> dict[str, go.Figure]:
    """The charts of a run by element id: the data -> figures step, testable without a browser."""
    end = max([result.elapsed_s, *(t for t, _, _ in result.batches), *(t for t, _, _ in result.order_txns)])
    bins = binned(((t, outcome) for t, outcome, _ in result.order_txns), ORDER_SERIES, span_s=end)
    rows = income_rows(result)
    return {
        "order-txns": mark_events(outcomes_figure(bins, [], "order transactions per interval (crashes dashed)",
                                                  ORDER_SERIES), result.events),
        "micro-batches": mark_events(batches_figure(result.batches), result.events),
        "ownership": mark_events(ownership_figure(owned_over_time(result.ownership), [], end_s=end), result.events),
        "income": income_figure([r.minute for r in rows], [r.expected for r in rows], [r.read_back for r in rows]),
    }


def pipeline_report(config: PipelineConfig, result: PipelineResult) -> str:
    """The whole report as one HTML string (plotly.js inlined: it opens offline)."""
    orders = {series: sum(1 for _, outcome, _ in result.order_txns if outcome == series) for series in ORDER_SERIES}
    return render(
        "pipeline.html.j2",
        title=f"txnsim pipeline, {config.orders} orders over {config.minutes} minutes",
        config=config, result=result, ok=result.ok, income_rows=income_rows(result), order_counts=orders,
        ownership=result.ownership, figures=pipeline_figures(result),
    )
