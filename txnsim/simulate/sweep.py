"""Many seeds at once: each seed is an independent run in one of a set of worker processes.

A worker returns only a small `SeedOutcome` (no trace lines), so a sweep of thousands of
seeds costs little more than the runs themselves. Seeds are reported in seed order
whatever order the workers finish in, so a sweep's table is itself deterministic.
"""
from __future__ import annotations

import collections
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait

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
            _in_workers(template, seed_list, min(jobs, len(seed_list)), done)
    except KeyboardInterrupt:
        interrupted = True
    outcomes.sort(key=lambda o: o.seed)
    return SweepResult(outcomes, time.perf_counter() - started, len(seed_list), interrupted)


def _in_workers(template: SimConfig, seeds: list[int], jobs: int, done: Callable[[SeedOutcome], None]) -> None:
    """Run `seeds` in `jobs` worker processes, each with a pipe of its own: a seed goes down, its outcome comes
    back, the next seed goes down. No lock is shared between the workers and this process, so stopping is
    only killing them: multiprocessing.Pool's terminate() could wait for ever on its task queue's lock, held
    by a worker blocked reading a task that would never come (a Ctrl-C before the first task was sent)."""
    context = multiprocessing.get_context()
    workers: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
    pending = collections.deque(seeds)
    try:  # from the first fork on: whatever ends this, the workers are killed
        # While the workers are forked, SIGINT is blocked (they keep the mask until they ignore it, so none sees
        # a Ctrl-C first: only this process decides what a Ctrl-C does) and a Ctrl-C is only noted: blocked
        # here, it still reaches the progress display's thread, and its KeyboardInterrupt would otherwise be
        # raised here between a fork and the line that keeps the new worker, leaving it running
        noted: list[bool] = []
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, lambda _signum, _frame: noted.append(True)) if in_main else None
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for _ in range(jobs):
                mine, theirs = context.Pipe()
                worker = context.Process(target=_worker, args=(template, theirs), daemon=True)
                worker.start()
                theirs.close()
                workers.append((worker, mine))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            if in_main:
                signal.signal(signal.SIGINT, previous)
        if noted:
            raise KeyboardInterrupt
        busy: dict[Connection, multiprocessing.process.BaseProcess] = {}
        for process, conn in workers:
            if pending:
                conn.send(pending.popleft())
                busy[conn] = process
        while busy:
            # a short timeout, not a blocking wait: a Ctrl-C that came while SIGINT was blocked here went to
            # another thread (the progress display's), which cannot interrupt this wait; this thread raises the
            # KeyboardInterrupt as soon as it runs again
            for ready in wait(list(busy), timeout=0.1):
                assert isinstance(ready, Connection)
                try:
                    answer = ready.recv()
                except EOFError:
                    raise RuntimeError(f"a sweep worker died (exit code {busy[ready].exitcode})") from None
                if isinstance(answer, str):  # the worker's run raised: its traceback
                    raise RuntimeError(f"a seed's run failed in a sweep worker:\n{answer}")
                done(answer)
                if pending:
                    ready.send(pending.popleft())
                else:
                    ready.send(None)
                    del busy[ready]
    finally:
        for process, _conn in workers:
            if process.is_alive():
                process.kill()
        for process, conn in workers:
            process.join()
            conn.close()


def _worker(template: SimConfig, conn: Connection) -> None:
    """A worker: Ctrl-C goes to the whole process group, and only the parent acts on it. Runs the seeds it is
    sent until it is sent None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    while (seed := conn.recv()) is not None:
        try:
            outcome: SeedOutcome | str = run_seed(template, seed)
        except Exception:
            outcome = traceback.format_exc()
        conn.send(outcome)
