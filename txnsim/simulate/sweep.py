"""Many seeds at once: each seed is an independent run in a pool of worker processes.

A worker returns only a small `SeedOutcome` (no trace lines), so a sweep of thousands of
seeds costs little more than the runs themselves. Seeds are reported in seed order
whatever order the workers finish in, so a sweep's table is itself deterministic.
"""
from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from txnsim.simulate.simulation import SimConfig, simulate

#: the most seeds one sweep accepts, so that a typo (1..10000000000) fails fast
MAX_SEEDS = 1_000_000


def parse_seeds(text: str) -> list[int]:
    """`1..1000` (inclusive), `5` (that one seed), `1,7,9`, or a mix: `1..10,42`."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            if ".." in part:
                first_text, last_text = part.split("..", 1)
                first, last = int(first_text), int(last_text)
                if last < first:
                    raise ValueError(f"seed range {part!r} ends before it starts")
                if last - first + 1 + len(seeds) > MAX_SEEDS:
                    raise ValueError(f"seed range {part!r} has more than {MAX_SEEDS} seeds")
                seeds.extend(range(first, last + 1))
            else:
                seeds.append(int(part))
        except ValueError as exc:
            if "seed range" in str(exc):
                raise
            raise ValueError(f"{part!r} is not a seed, a range like 1..1000 or a list like 1,7,9") from None
    if not seeds:
        raise ValueError("no seeds given; use a seed, a range like 1..1000 or a list like 1,7,9")
    return sorted(dict.fromkeys(seeds))


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    seed: int
    steps: int
    simulated_ms: int
    trace_hash: str
    transactions: int
    invariant: str | None = None
    message: str | None = None
    step: int | None = None

    @property
    def failed(self) -> bool:
        return self.invariant is not None


def run_seed(template: SimConfig, seed: int) -> SeedOutcome:
    """One seed of a sweep (runs in a worker process)."""
    result = simulate(replace(template, seed=seed, schedule=None, keep_trace=False))
    failure = result.failure
    transactions = result.counters.get("transactions committed", 0) + result.counters.get("transactions aborted", 0)
    return SeedOutcome(seed, result.steps, result.now_ms, result.trace_hash, transactions,
                       failure.invariant if failure else None, failure.message if failure else None,
                       failure.step if failure else None)


@dataclass(frozen=True, slots=True)
class SweepResult:
    outcomes: list[SeedOutcome]
    wall_seconds: float
    #: seeds asked for; more than len(outcomes) when the sweep was interrupted (Ctrl-C)
    asked: int = 0
    interrupted: bool = False

    @property
    def failures(self) -> list[SeedOutcome]:
        return [o for o in self.outcomes if o.failed]

    @property
    def seeds_per_minute(self) -> float:
        return 60 * len(self.outcomes) / self.wall_seconds if self.wall_seconds > 0 else 0.0


def sweep(template: SimConfig, seeds: Iterable[int], jobs: int | None = None,
          on_outcome: Callable[[SeedOutcome], None] | None = None) -> SweepResult:
    """Run every seed; `jobs` processes (default: one per CPU; 1 runs in this process). A Ctrl-C stops it at
    once: the workers (which ignore SIGINT, so only this process decides) are terminated, and the result holds
    the seeds that finished, marked interrupted."""
    seed_list = list(seeds)
    jobs = jobs or os.cpu_count() or 1
    started = time.perf_counter()
    outcomes: list[SeedOutcome] = []

    def done(outcome: SeedOutcome) -> None:
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    interrupted = False
    try:
        if jobs == 1 or len(seed_list) == 1:
            for seed in seed_list:
                done(run_seed(template, seed))
        else:
            # SIGINT is blocked while the pool forks its workers and starts the threads that fork replacements
            # (they keep the mask), so no worker can see a Ctrl-C before its initializer ignores it
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                pool = multiprocessing.Pool(min(jobs, len(seed_list)), initializer=_ignore_sigint)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            try:
                for outcome in pool.imap_unordered(functools.partial(run_seed, template), seed_list):
                    done(outcome)
                pool.close()
            finally:
                pool.terminate()  # at once: on Ctrl-C the workers' seeds are given up
                pool.join()
    except KeyboardInterrupt:
        interrupted = True
    outcomes.sort(key=lambda o: o.seed)
    return SweepResult(outcomes, time.perf_counter() - started, len(seed_list), interrupted)


def _ignore_sigint() -> None:
    """A worker's start: Ctrl-C goes to the whole process group, and only the parent should act on it. The
    worker was forked with SIGINT blocked (sweep); ignored now, it may be unblocked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
