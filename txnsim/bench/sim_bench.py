"""How fast the simulator runs the cluster model: simulated seconds per wall second, on one core, with the
node's shipping drivers (the transaction coordinator, the partition leader, the group coordinator) over the
simulated I/O. Each seed is one whole default run (every fault kind, its final read and checks), in this
process, one after the other, so the figure is one core's: a sweep runs one such process per core.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from txnsim.bench.harness import NullProgress, Progress
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count
from txnsim.bench.stats import median
from txnsim.simulate.simulation import SimConfig, simulate

#: the targets the simulator is held to: FoundationDB's published ratio, and where it aims
TARGET_SIM_PER_WALL = 10.0
AIM_SIM_PER_WALL = 50.0


@dataclass(frozen=True, slots=True)
class SimRun:
    seed: int
    simulated_s: float
    wall_s: float
    cpu_s: float
    steps: int
    failed: bool


def run_seed(seed: int) -> SimRun:
    cpu_start, start = time.process_time(), time.monotonic()
    result = simulate(SimConfig(seed=seed, model="cluster"))
    wall, cpu = time.monotonic() - start, time.process_time() - cpu_start
    return SimRun(seed, result.now_ms / 1000, wall, cpu, result.steps, result.failed)


def run(repeat: int = 5, progress: Progress | None = None) -> BenchResult:
    progress = progress or NullProgress()
    progress.phase(f"simulator: {repeat} seeds of the cluster model, one core", repeat)
    runs = []
    with _quiet_nodes():
        for seed in range(1, repeat + 1):
            runs.append(run_seed(seed))
            progress.advance()
    return BenchResult("sim", (speed_table(runs),), verdicts(runs))


@contextmanager
def _quiet_nodes() -> Iterator[None]:
    """The simulated nodes' recovery and failover warnings are the faults at work (`txnsim simulate` hides them
    too; its trace has them)."""
    loggers = [logging.getLogger(name) for name in ("partitions", "coordinator")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def speed_table(runs: list[SimRun]) -> ResultTable:
    rows = [(str(r.seed), f"{r.simulated_s:.1f}", f"{r.wall_s:.2f}", f"{r.simulated_s / r.wall_s:.1f}",
             f"{r.simulated_s / r.cpu_s:.1f}", format_count(r.steps / r.wall_s), "failed" if r.failed else "held")
            for r in runs]
    rows.append(("median", f"{median([r.simulated_s for r in runs]):.1f}", f"{median([r.wall_s for r in runs]):.2f}",
                 f"{median([r.simulated_s / r.wall_s for r in runs]):.1f}",
                 f"{median([r.simulated_s / r.cpu_s for r in runs]):.1f}",
                 format_count(median([r.steps / r.wall_s for r in runs])), ""))
    return ResultTable(
        f"Simulator speed: the cluster model, seeds 1..{len(runs)}, every fault kind, one core",
        ("seed", "simulated s", "wall s", "simulated s per wall s", "simulated s per CPU s", "steps per wall s",
         "invariants"),
        tuple(rows),
        ("Each seed is `txnsim simulate --seed N` in this process: 3 nodes on the shipping drivers over the "
         "simulated I/O, their clients, the fault schedule, the final read and the checks. The wall time includes "
         "all of it; a sweep (`--seeds A..B --jobs N`) runs one process per core.",))


def verdicts(runs: list[SimRun]) -> tuple[Verdict, ...]:
    speed = median([r.simulated_s / r.wall_s for r in runs])
    return (Verdict(f"the simulator runs at least {TARGET_SIM_PER_WALL:g} simulated seconds per wall second on one "
                    f"core (aiming for {AIM_SIM_PER_WALL:g})", speed >= TARGET_SIM_PER_WALL, f"median {speed:.1f}"),
            Verdict("every seed held every invariant", not any(r.failed for r in runs),
                    ", ".join(f"seed {r.seed} failed" for r in runs if r.failed) or f"{len(runs)} seeds"))
