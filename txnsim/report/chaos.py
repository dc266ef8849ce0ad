"""The report of one `txnsim chaos` run: fault schedule (planned and applied), ownership
changes, transactions committed and aborted over time, the anomaly table and the totals."""
from __future__ import annotations

from datetime import datetime, timezone

import plotly.graph_objects as go

from txnsim.chaos.checker import ANOMALIES, MEANINGS
from txnsim.chaos.runner import ChaosRun
from txnsim.ownership import owned_over_time
from txnsim.report.figures import Band, outcomes_figure, ownership_figure
from txnsim.report.render import render
from txnsim.report.timeline import TXN_SERIES, FaultRow, binned, fault_rows, txn_outcome_points


def _started_at(run: ChaosRun) -> float:
    """The history's clock at the start (the first event's time for a run recorded without it)."""
    if run.started_at is not None:
        return run.started_at
    events = run.history.events()
    return min((e.at for e in events), default=0.0)


def fault_bands(rows: list[FaultRow]) -> list[Band]:
    bands: list[Band] = []
    for row in rows:
        interval = row.interval()
        if interval is not None:
            bands.append((*interval, f"{row.planned.kind} {row.planned.node}", row.planned.kind))
    return bands


def chaos_figures(run: ChaosRun) -> dict[str, go.Figure]:
    """The charts of a run by element id: the data -> figures step, testable without a browser."""
    started = _started_at(run)
    events = run.history.events()
    bands = fault_bands(fault_rows(run.schedule, events, started))
    last = max((e.at - started for e in events), default=0.0)
    bins = binned(txn_outcome_points(events, started), TXN_SERIES, span_s=max(run.config.duration_s, last))
    return {
        "txn-outcomes": outcomes_figure(bins, bands, "transactions ended per interval, by outcome "
                                                     "(faults shaded)"),
        "ownership": ownership_figure(owned_over_time(run.ownership), bands, end_s=max(run.config.duration_s, last)),
    }


def anomaly_rows(run: ChaosRun) -> list[dict[str, object]]:
    """One row per anomaly name, in the checker's order; a clean one says "none"."""
    assert run.result is not None, "the run was not checked"
    rows = []
    for name in ANOMALIES:
        finding = run.result.findings[name]
        rows.append({"name": name, "meaning": MEANINGS[name], "count": finding.count,
                     "example": finding.example if finding.count else "none"})
    return rows


def chaos_report(run: ChaosRun) -> str:
    """The whole report as one HTML string (plotly.js inlined: it opens offline)."""
    result = run.result
    assert result is not None, "the run was not checked"
    config = run.config
    started = _started_at(run)
    notes = []
    if not run.final.complete:
        notes.append("the final read did not reach the end of every partition: the check is inconclusive")
    if not run.drained:
        notes.append("the workers had not copied every committed input record when the run ended (not an "
                     "anomaly: lost-write only counts records below the committed offsets)")
    started_text = (datetime.fromtimestamp(run.started_wall_s, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
                    if run.started_wall_s is not None else "unknown")
    return render(
        "chaos.html.j2",
        title=f"txnsim chaos, seed {config.seed}",
        config=config, started=started_text, valid=result.valid, anomalies=result.anomalies, notes=notes,
        faults=fault_rows(run.schedule, run.history.events(), started),
        ownership=run.ownership, anomaly_rows=anomaly_rows(run),
        totals=list(result.totals.items()), errors=result.errors.most_common(),
        figures=chaos_figures(run),
    )
