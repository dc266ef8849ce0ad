"""Shrinking a failing run: the smallest fault schedule and the shortest run that still fail.

Delta debugging (Zeller's ddmin) over the schedule: re-run with subsets of the faults, the
seed and everything else unchanged, keeping a subset when it violates the same invariant.
Then the run is cut short: faults after the violation are dropped, and a run that failed
only in its final checks is tried at half its length, and half again. Every candidate is a
full deterministic run, so the result is the same on every machine; `max_runs` bounds the
cost.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from txnsim.simulate.faults import Fault
from txnsim.simulate.simulation import SimConfig, SimResult, simulate

DEFAULT_MAX_RUNS = 100
#: a final-check failure is not shortened below this many simulated milliseconds
MIN_UNTIL_MS = 200


@dataclass(frozen=True, slots=True)
class Shrunk:
    config: SimConfig
    result: SimResult
    runs: int
    faults_before: int

    @property
    def faults_after(self) -> int:
        return len(self.result.schedule)


class _Budget:
    """Runs candidates until `max_runs`, remembering the last failing run."""

    def __init__(self, invariant: str, best: SimResult, max_runs: int) -> None:
        self.invariant = invariant
        self.best = best
        self.max_runs = max_runs
        self.runs = 0

    def fails(self, config: SimConfig) -> bool:
        if self.runs >= self.max_runs:
            return False
        self.runs += 1
        result = simulate(config)
        if result.failure is not None and result.failure.invariant == self.invariant:
            self.best = result
            return True
        return False


def shrink(failed: SimResult, max_runs: int = DEFAULT_MAX_RUNS) -> Shrunk:
    """The smallest schedule (and shortest run) found that fails `failed`'s invariant."""
    if failed.failure is None:
        raise ValueError("the run did not fail: there is nothing to shrink")
    budget = _Budget(failed.failure.invariant, failed, max_runs)
    config = replace(failed.replay_config(), keep_trace=False)
    faults_before = len(failed.schedule)

    before = tuple(f for f in failed.schedule if f.at_ms <= failed.failure.at_ms)
    if len(before) < len(failed.schedule) and budget.fails(replace(config, schedule=before)):
        config = replace(config, schedule=before)

    def with_schedule(faults: Sequence[Fault]) -> bool:
        return budget.fails(replace(config, schedule=tuple(faults)))

    assert config.schedule is not None
    smallest = ddmin(list(config.schedule), with_schedule)
    if tuple(smallest) != config.schedule:
        config = replace(config, schedule=tuple(smallest))
    config = _shorten(config, budget)
    # the last candidate that failed is usually this very config; if not (nothing shrank), run it once more
    result, runs = budget.best, budget.runs
    if result.config != config:
        result, runs = simulate(config), runs + 1
    return Shrunk(config, result, runs, faults_before)


def _shorten(config: SimConfig, budget: _Budget) -> SimConfig:
    failure = budget.best.failure
    assert failure is not None
    if not failure.final:
        shorter = replace(config, until_ms=failure.at_ms, max_steps=failure.step)
        return shorter if budget.fails(shorter) else config
    until = config.until_ms if config.until_ms is not None else budget.best.now_ms
    while until // 2 >= MIN_UNTIL_MS:
        until //= 2
        schedule = tuple(f for f in (config.schedule or ()) if f.at_ms <= until)
        shorter = replace(config, until_ms=until, max_steps=None, schedule=schedule)
        if not budget.fails(shorter):
            break
        config = shorter
    return config


def ddmin(items: list[Fault], fails: Callable[[list[Fault]], bool]) -> list[Fault]:
    """A 1-minimal failing sublist of `items` (which fails), as far as `fails` allows."""
    if items and fails([]):
        return []
    granularity = 2
    while len(items) >= 2:
        size = -(-len(items) // granularity)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        for chunk in chunks:
            if fails(chunk):
                items, granularity = chunk, 2
                break
        else:
            for i in range(len(chunks)):
                complement = [f for j, c in enumerate(chunks) if j != i for f in c]
                if fails(complement):
                    items, granularity = complement, max(granularity - 1, 2)
                    break
            else:
                if granularity >= len(items):
                    break
                granularity = min(len(items), granularity * 2)
    return items
