"""`txnsim simulate`: the system in one process on simulated time, every run replayable from a seed.

One seed: run, print what ran, the invariants checked and the trace hash; on a violation,
shrink the fault schedule, write the shrunk run's trace file and print how to replay it.
`--seeds`: sweep seeds in worker processes, then a table. `--replay SEED|FILE`: run again,
with the timeline of every message. Exit code 0 when nothing was violated, 1 otherwise,
2 for a bad argument (one `error:` line).
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from txnsim.cli.common import console, error
from txnsim.simulate.faults import FAULT_KINDS, MEANINGS, parse_kinds
from txnsim.simulate.registry import DEFAULT_MODEL, MODELS
from txnsim.simulate.report import (
    failure_summary,
    file_replay_command,
    run_json,
    run_summary,
    sweep_json,
    sweep_progress,
    sweep_table,
)
from txnsim.simulate.shrink import DEFAULT_MAX_RUNS, Shrunk, shrink
from txnsim.simulate.simulation import SimConfig, SimResult, make_model, simulate
from txnsim.simulate.sweep import SeedOutcome, parse_seeds, sweep
from txnsim.simulate.trace import hash_lines, load_trace, print_timeline, save_trace

DEFAULT_SECONDS = 10.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "simulate", help="the cluster in one process on simulated time: faults from a seed, replayable",
        description="Run a model of the system on a simulated clock, network and disk under a fault schedule drawn "
                    "from --seed; the same seed gives the same run (the same trace hash) on any machine.",
        epilog="fault kinds: " + "; ".join(f"{k}: {MEANINGS[k]}" for k in FAULT_KINDS)
               + ". models: " + ", ".join(MODELS) + ".")
    parser.add_argument("--seed", type=_int, default=None, help="seed of the run (default: random, printed)")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--steps", type=_positive, default=None, help="stop after this many events")
    length.add_argument("--seconds", type=_positive_float, default=None,
                        help=f"stop after this much simulated time (default {DEFAULT_SECONDS:g})")
    parser.add_argument("--faults", type=_kinds, default=None,
                        help="all, none, or a comma-separated list of kinds (default all)")
    parser.add_argument("--model", default=None, help=f"what to simulate: {', '.join(MODELS)} (default "
                                                      f"{DEFAULT_MODEL})")
    parser.add_argument("--workload", default=None, help="one of the model's workloads (default its first)")
    parser.add_argument("--bug", default=None, help="switch on one planted bug of the model (see --list-bugs)")
    parser.add_argument("--list-bugs", action="store_true", help="print the model's planted bugs and workloads")
    parser.add_argument("--replay", default=None, metavar="SEED|FILE",
                        help="run a seed again (with its options) or a trace file exactly, printing the timeline")
    parser.add_argument("--trace-out", type=Path, default=None,
                        help="write the trace file here (default on a violation: simulate-seed-N.trace.jsonl)")
    parser.add_argument("--timeline", action="store_true", help="print every line of the trace")
    parser.add_argument("--seeds", type=_seeds, default=None, metavar="RANGE",
                        help="sweep seeds: 1..1000, a single seed 5, or a list 1,7,9")
    parser.add_argument("--jobs", type=_positive, default=None, help="worker processes of a sweep (default: CPUs)")
    parser.add_argument("--shrink-runs", type=_int, default=DEFAULT_MAX_RUNS,
                        help=f"re-runs the shrinker may spend on a violation, 0 for none (default {DEFAULT_MAX_RUNS})")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.set_defaults(func=run_simulate_command)
    # a bad argument is one line, like every other error of this command (usage is one --help away); assigned,
    # as add_parser cannot give one subcommand a parser class of its own (hence the ignore)
    parser.error = functools.partial(_one_line_error, parser)  # type: ignore[method-assign]


def _one_line_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.exit(2, f"{parser.prog}: error: {message}\n")


# ------------------------------------------------------------ argument types (argparse prints their errors)

def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _positive(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _kinds(text: str) -> tuple[str, ...]:
    try:
        return parse_kinds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seeds(text: str) -> list[int]:
    try:
        return parse_seeds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _BadArgument(Exception):
    """A combination of arguments that cannot run; its message is the one line shown."""


# ------------------------------------------------------------ the command

def run_simulate_command(args: argparse.Namespace) -> int:
    if str(getattr(args, "log_level", "WARNING")).upper() not in ("DEBUG", "INFO"):
        # the simulated nodes' recovery and failover warnings are expected here; the trace has them
        for name in ("partitions", "coordinator"):
            logging.getLogger(name).setLevel(logging.ERROR)
    try:
        return _run(args)
    except _BadArgument as exc:
        error(str(exc))
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    if args.list_bugs:
        return _list_bugs(args.model or DEFAULT_MODEL)
    if args.replay is not None and (args.seeds is not None or args.seed is not None):
        raise _BadArgument("--replay runs one seed or file; leave out --seed and --seeds")
    if args.replay is not None and not args.replay.lstrip("-").isdigit():
        return _replay_file(args, Path(args.replay))
    template = _config(args)
    if args.seeds is not None:
        if args.seed is not None:
            raise _BadArgument("give --seed or --seeds, not both")
        return _sweep(args, template)
    if args.replay is not None:
        config = replace(template, seed=int(args.replay), keep_trace=True)
        return _single(args, config, timeline=True)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    return _single(args, replace(template, seed=seed, keep_trace=args.timeline or args.trace_out is not None),
                   timeline=args.timeline)


def _config(args: argparse.Namespace) -> SimConfig:
    model = args.model or DEFAULT_MODEL
    config = SimConfig(seed=0, model=model, workload=args.workload, bug=args.bug,
                       faults=FAULT_KINDS if args.faults is None else args.faults,
                       max_steps=args.steps,
                       until_ms=None if args.steps is not None else round(1000 * (args.seconds or DEFAULT_SECONDS)))
    try:
        make_model(config)  # validates the model, its bug and its workload by name
    except ValueError as exc:
        raise _BadArgument(str(exc)) from None
    return config


def _list_bugs(model_name: str) -> int:
    factory = MODELS.get(model_name)
    if factory is None:
        raise _BadArgument(f"no model {model_name!r}; choose from {', '.join(MODELS)}")
    console.print(f"[bold]{model_name}[/bold]: {factory.description}")
    for title, entries in (("bugs", factory.bugs()), ("workloads", factory.workloads())):
        console.print(f"[bold]{title}[/bold]")
        for name, meaning in entries.items():
            console.print(f"  {name}: {meaning}")
    return 0


def _single(args: argparse.Namespace, config: SimConfig, *, timeline: bool) -> int:
    started = time.perf_counter()
    result = simulate(config)
    wall = time.perf_counter() - started
    shrunk: Shrunk | None = None
    trace_path: Path | None = args.trace_out
    kept = result
    if result.failure is not None:
        if args.shrink_runs > 0 and args.replay is None:
            shrunk = shrink(result, max_runs=args.shrink_runs)
            kept = simulate(replace(shrunk.config, keep_trace=True))
        elif not config.keep_trace:
            kept = simulate(replace(config, keep_trace=True))
        trace_path = trace_path or Path(f"simulate-seed-{config.seed}.trace.jsonl")
    if trace_path is not None:
        _write(trace_path, kept)
    if args.json:
        print(json.dumps(run_json(result, wall, shrunk, trace_path), indent=2))
        return 1 if result.failure else 0
    if timeline:
        print_timeline(console, kept.trace_lines)
    console.print(run_summary(result, wall))
    if result.failure is not None:
        console.print(failure_summary(result, shrunk, trace_path))
        return 1
    if trace_path is not None:
        console.print(f"trace written to {trace_path}; replay it with {file_replay_command(trace_path)}")
    return 0


def _write(path: Path, result: SimResult) -> None:
    failure = result.failure
    header = {"config": result.replay_config().to_json(), "trace_hash": result.trace_hash, "steps": result.steps,
              "simulated_ms": result.now_ms,
              "violation": None if failure is None else {"invariant": failure.invariant, "message": failure.message,
                                                         "step": failure.step, "at_ms": failure.at_ms}}
    try:
        save_trace(path, header, result.trace_lines)
    except OSError as exc:
        raise _BadArgument(f"cannot write the trace file {path}: {exc.strerror}") from None


def _replay_file(args: argparse.Namespace, path: Path) -> int:
    if not path.exists():
        raise _BadArgument(f"--replay {path}: no such seed or trace file")
    try:
        saved = load_trace(path)
        config = replace(SimConfig.from_json(saved.header["config"]), keep_trace=True)
        make_model(config)
    except (ValueError, KeyError, TypeError) as exc:
        raise _BadArgument(f"cannot replay {path}: {exc}") from None
    started = time.perf_counter()
    result = simulate(config)
    wall = time.perf_counter() - started
    expected = saved.header.get("trace_hash")
    same = result.trace_hash == expected and hash_lines(saved.lines) == expected
    if args.json:
        out = run_json(result, wall)
        out["replayed"] = str(path)
        out["same_trace_hash"] = same
        print(json.dumps(out, indent=2))
    else:
        print_timeline(console, result.trace_lines)
        console.print(run_summary(result, wall))
        if result.failure is not None:
            console.print(f"[bold red]VIOLATION[/bold red] of [bold]{result.failure.invariant}[/bold] at step "
                          f"{result.failure.step}: {result.failure.message}", highlight=False)
        console.print(f"replayed {path}: " + ("[green]same trace hash[/green]" if same else
                                               f"[red]trace hash differs from the file's {expected}[/red]"))
    if not same:
        return 1
    return 1 if result.failure else 0


def _sweep(args: argparse.Namespace, template: SimConfig) -> int:
    seeds: list[int] = args.seeds
    if args.json:
        result = sweep(template, seeds, args.jobs)
        print(json.dumps(sweep_json(result), indent=2))
        return 130 if result.interrupted else 1 if result.failures else 0
    violations = 0
    with sweep_progress() as progress:
        task = progress.add_task("seeds", total=len(seeds), violations=0)

        def advance(outcome: SeedOutcome) -> None:
            nonlocal violations
            violations += outcome.failed
            progress.update(task, advance=1, violations=violations)
        result = sweep(template, seeds, args.jobs, advance)
    console.print(sweep_table(result, template))
    if result.interrupted:
        console.print(f"interrupted: {len(result.outcomes)} of {result.asked} seeds ran "
                      f"({len(result.failures)} with a violation); the table has those")
        return 130
    return 1 if result.failures else 0

