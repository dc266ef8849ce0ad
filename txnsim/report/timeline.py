"""A run's records as series on one time axis: seconds after the run's start.

Pure functions over plain records (the chaos history, the fault schedule, the pipeline's
transactions), so what a chart shows can be checked without drawing it.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from txnsim.chaos.checker import txn_outcomes
from txnsim.chaos.history import CommitStarted, Event, FaultEvent, Outcome, TxnBegun, TxnEnded
from txnsim.chaos.nemesis import Fault

#: the series of the transactions chart, in stacking order
TXN_SERIES = ("committed", "aborted on purpose", "aborted after an error", "unknown")


@dataclass(slots=True)
class FaultRow:
    """One planned fault and what the nemesis did with it (times in seconds after the start)."""

    number: int
    planned: Fault
    injected_at_s: float | None = None
    healed_at_s: float | None = None
    error: str | None = None

    @property
    def status(self) -> str:
        if self.injected_at_s is None:
            return f"failed: {self.error}" if self.error else "not reached (the run ended first)"
        if self.healed_at_s is None:
            return f"not healed: {self.error}" if self.error else "not healed"
        return "healed" if not self.error else f"healed after a failed attempt ({self.error})"

    def interval(self) -> tuple[float, float] | None:
        """When the node was down (the planned heal if it never healed), for shading charts."""
        if self.injected_at_s is None:
            return None
        end = self.healed_at_s if self.healed_at_s is not None else self.injected_at_s + self.planned.heal_after_s
        return self.injected_at_s, max(end, self.injected_at_s)


def fault_rows(schedule: Sequence[Fault], events: Iterable[Event], started_at: float) -> list[FaultRow]:
    """The schedule with each fault's inject and heal times from the history.

    The nemesis carries faults out one at a time in schedule order and records one inject
    event per fault it reached, so the n-th inject event belongs to the n-th planned fault;
    a heal belongs to the latest injected fault of its node.
    """
    rows = [FaultRow(i, fault) for i, fault in enumerate(schedule, 1)]
    injected = 0
    for e in events:
        if not isinstance(e, FaultEvent):
            continue
        at = round(e.at - started_at, 3)
        if e.phase == "inject":
            if injected >= len(rows):
                continue
            row = rows[injected]
            injected += 1
            if e.error is None:
                row.injected_at_s = at
            else:
                row.error = e.error
        else:
            row_of_node = next((r for r in reversed(rows[:injected])
                                if r.planned.node == e.node and r.injected_at_s is not None), None)
            if row_of_node is None:
                continue
            if e.error is None:
                row_of_node.healed_at_s = at
            else:
                row_of_node.error = e.error
    return rows


def txn_outcome_points(events: Sequence[Event], started_at: float) -> list[tuple[float, str]]:
    """(time, series) per transaction, one of TXN_SERIES, as the checker counts its outcome.

    The time is when its client learnt the outcome; for an unknown outcome when commit was
    asked, and for a transaction abandoned before that when it began.
    """
    outcomes = txn_outcomes(events)
    begun: dict[str, float] = {}
    commit_asked: dict[str, float] = {}
    ended: dict[str, TxnEnded] = {}
    for e in events:
        if isinstance(e, TxnBegun):
            begun.setdefault(e.txn, e.at)
        elif isinstance(e, CommitStarted):
            commit_asked[e.txn] = e.at
        elif isinstance(e, TxnEnded):
            ended[e.txn] = e
    points: list[tuple[float, str]] = []
    for txn, outcome in outcomes.items():
        end = ended.get(txn)
        at = end.at if end is not None else commit_asked.get(txn, begun.get(txn, started_at))
        if outcome is Outcome.COMMITTED:
            series = "committed"
        elif outcome is Outcome.ABORTED:
            series = "aborted on purpose" if end is not None and end.on_purpose else "aborted after an error"
        else:
            series = "unknown"
        points.append((max(at - started_at, 0.0), series))
    return sorted(points)


@dataclass(frozen=True, slots=True)
class Binned:
    """Counts per series in consecutive bins of `bin_s` seconds starting at 0."""

    bin_s: float
    starts: list[float]
    counts: dict[str, list[int]]

    def total(self, series: str) -> int:
        return sum(self.counts[series])


def bin_width(span_s: float, bins: int = 60) -> float:
    """Whole seconds, so that a run fits in about `bins` bars."""
    return float(max(1, math.ceil(span_s / bins)))


def binned(points: Iterable[tuple[float, str]], series: Sequence[str], bin_s: float | None = None,
           span_s: float = 0.0) -> Binned:
    """Count `points` (time, series name) per bin; the bins cover at least `span_s` seconds."""
    points = list(points)
    end = max([span_s, *(t for t, _ in points)])
    width = bin_s or bin_width(end)
    n = int(end // width) + 1
    counts = {name: [0] * n for name in series}
    for t, name in points:
        counts[name][min(int(max(t, 0.0) // width), n - 1)] += 1
    return Binned(width, [round(i * width, 3) for i in range(n)], counts)
