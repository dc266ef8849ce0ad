"""How `txnsim simulate` shows a run and a sweep: rich tables for people, dicts for --json.

Only presentation lives here; every number comes from a SimResult or a SweepResult.
"""
from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from txnsim.simulate.faults import FAULT_KINDS, Fault
from txnsim.simulate.registry import MODELS
from txnsim.simulate.shrink import Shrunk
from txnsim.simulate.simulation import SimConfig, SimResult
from txnsim.simulate.sweep import SweepResult


def replay_command(config: SimConfig) -> str:
    """The command that regenerates `config`'s run from its seed (an explicit schedule needs the file)."""
    argv = ["txnsim", "simulate", "--replay", str(config.seed), "--model", config.model]
    if config.workload:
        argv += ["--workload", config.workload]
    if config.bug:
        argv += ["--bug", config.bug]
    argv += ["--faults", "all" if config.faults == FAULT_KINDS else ",".join(config.faults) or "none"]
    if config.max_steps is not None:
        argv += ["--steps", str(config.max_steps)]
    if config.until_ms is not None:
        argv += ["--seconds", f"{config.until_ms / 1000:g}"]
    return shlex.join(argv)


def file_replay_command(path: Path) -> str:
    return shlex.join(["txnsim", "simulate", "--replay", str(path)])


def schedule_table(schedule: Sequence[Fault], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("at", justify="right")
    table.add_column("fault")
    table.add_column("target")
    table.add_column("parameters")
    for fault in schedule:
        table.add_row(f"{fault.at_ms / 1000:.3f}s", fault.kind, fault.target,
                      " ".join(f"{k}={v}" for k, v in fault.params))
    return table


def run_summary(result: SimResult, wall_seconds: float) -> Group:
    config = result.config
    what = Table.grid(padding=(0, 2))
    what.add_column(style="bold")
    what.add_column()
    what.add_row("model", f"{config.model} (workload {config.workload or next(iter(MODELS[config.model].WORKLOADS))}"
                          f"{', bug ' + config.bug if config.bug else ''})")
    what.add_row("seed", str(config.seed))
    what.add_row("faults", f"{len(result.schedule)} scheduled, {result.faults_applied} applied "
                           f"({', '.join(config.faults) or 'none'})" if config.schedule is None else
                           f"{len(result.schedule)} from the saved schedule, {result.faults_applied} applied")
    what.add_row("ran", f"{result.steps} steps, {result.now_ms / 1000:.3f} simulated seconds, in {wall_seconds:.2f} s "
                        f"of wall time ({result.steps / wall_seconds if wall_seconds else 0:,.0f} steps/s)")
    what.add_row("checked", f"{', '.join(result.invariants)} after each of {result.checks} steps; "
                            f"Jepsen's anomalies at the end")
    what.add_row("trace hash", result.trace_hash)
    counters = Table(title="counters", title_justify="left", show_header=False)
    counters.add_column()
    counters.add_column(justify="right")
    for name, value in result.counters.items():
        counters.add_row(name, str(value))
    return Group(what, counters)


def failure_summary(result: SimResult, shrunk: Shrunk | None, trace_path: Path | None) -> Group:
    failure = result.failure
    assert failure is not None
    parts: list[Any] = [Text.from_markup(
        f"[bold red]VIOLATION[/bold red] of [bold]{escape(failure.invariant)}[/bold] at step {failure.step} "
        f"({failure.at_ms / 1000:.3f} simulated s{', in the final checks' if failure.final else ''}), "
        f"seed {result.config.seed}")]
    parts.append(Text(f"  {failure.message}"))
    if shrunk is not None:
        parts.append(schedule_table(shrunk.result.schedule,
                                    f"shrunk schedule: {shrunk.faults_before} -> {shrunk.faults_after} faults in "
                                    f"{shrunk.runs} re-runs"))
        if shrunk.result.failure is not None:
            parts.append(Text(f"shrunk run fails at step {shrunk.result.failure.step}: "
                              f"{shrunk.result.failure.message}"))
    if trace_path is not None:
        parts.append(Text(f"trace written to {trace_path}"))
        parts.append(Text(f"replay it:        {file_replay_command(trace_path)}"))
    parts.append(Text(f"rerun from seed:  {replay_command(result.config)}"))
    return Group(*parts)


def run_json(result: SimResult, wall_seconds: float, shrunk: Shrunk | None = None,
             trace_path: Path | None = None) -> dict[str, Any]:
    failure = result.failure
    out: dict[str, Any] = {
        "config": result.config.to_json(), "steps": result.steps, "simulated_ms": result.now_ms,
        "wall_seconds": round(wall_seconds, 3), "trace_hash": result.trace_hash,
        "invariants": list(result.invariants), "checks": result.checks, "counters": result.counters,
        "faults_scheduled": len(result.schedule), "faults_applied": result.faults_applied,
        "violation": None if failure is None else {
            "invariant": failure.invariant, "message": failure.message, "step": failure.step,
            "at_ms": failure.at_ms, "final": failure.final},
    }
    if shrunk is not None:
        out["shrunk"] = {"runs": shrunk.runs, "faults_before": shrunk.faults_before,
                         "schedule": [f.to_json() for f in shrunk.result.schedule],
                         "trace_hash": shrunk.result.trace_hash}
    if trace_path is not None:
        out["trace_file"] = str(trace_path)
        out["replay"] = file_replay_command(trace_path)
    if failure is not None:
        out["rerun"] = replay_command(result.config)
    return out


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.completed / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.1f} seeds/s")


def sweep_progress() -> Progress:
    return Progress(TextColumn("[bold]seeds"), BarColumn(), MofNCompleteColumn(), _RateColumn(),
                    TextColumn("[red]{task.fields[violations]} violations"), TimeElapsedColumn())


def sweep_table(result: SweepResult, template: SimConfig) -> Group:
    outcomes = result.outcomes
    summary = Table(title="sweep", title_justify="left", show_header=False)
    summary.add_column(style="bold")
    summary.add_column(justify="right")
    steps = sum(o.steps for o in outcomes)
    simulated_s = sum(o.simulated_ms for o in outcomes) / 1000
    transactions = sum(o.transactions for o in outcomes)
    summary.add_row("seeds run", str(len(outcomes)))
    summary.add_row("seeds/minute", f"{result.seeds_per_minute:,.0f}")
    summary.add_row("steps", f"{steps:,}")
    summary.add_row("simulated seconds", f"{simulated_s:,.1f}")
    summary.add_row("transactions", f"{transactions:,}")
    summary.add_row("wall seconds", f"{result.wall_seconds:.2f}")
    summary.add_row("failed seeds", str(len(result.failures)))
    parts: list[Any] = [summary]
    if result.failures:
        failures = Table(title="failures", title_justify="left")
        for column in ("seed", "invariant", "step", "message"):
            failures.add_column(column)
        for o in result.failures:
            message = o.message or ""
            failures.add_row(str(o.seed), o.invariant or "", str(o.step),
                             escape(message if len(message) <= 100 else message[:97] + "..."))
        parts.append(failures)
        parts.append(Text("run a failed seed again with its timeline (or with --seed N to shrink it): "
                          + replay_command(replace(template, seed=result.failures[0].seed))))
    return Group(*parts)


def sweep_json(result: SweepResult) -> dict[str, Any]:
    outcomes = result.outcomes
    return {"seeds_run": len(outcomes), "seeds_asked": result.asked, "interrupted": result.interrupted,
            "seeds_per_minute": round(result.seeds_per_minute, 1),
            "steps": sum(o.steps for o in outcomes), "simulated_ms": sum(o.simulated_ms for o in outcomes),
            "wall_seconds": round(result.wall_seconds, 3),
            "failures": [{"seed": o.seed, "invariant": o.invariant, "step": o.step, "message": o.message}
                         for o in result.failures],
            "hashes": {str(o.seed): o.trace_hash for o in outcomes}}

