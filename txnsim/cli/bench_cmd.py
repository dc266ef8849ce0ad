"""`txnsim bench [BENCHMARK ...]`: the benchmark suite, each benchmark on a 3-node cluster of its own, with
progress, result tables, the issues' targets checked, a chart of each table worth one (into ./txnsim-bench/
unless --plot DIR, --output or --no-plot says otherwise), and (with --output) the tables and their charts
written into a markdown file's generated sections. No name, or `all`, runs every benchmark but `code`; one
that fails is reported and the others still run."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from txnsim.bench import code_bench, consumer_bench, failover_bench, peer_bench, producer_bench, rocketmq_bench
from txnsim.bench.machine import CpuShare, this_machine
from txnsim.bench.report import BenchResult, replace_section, section_body, to_rich
from txnsim.cli.common import console, exits_cleanly

BENCHMARKS = ("producer", "consumer", "failover", "spark", "rocketmq", "peer", "code", "rpw", "scaling", "commit",
              "nodecpu", "sim", "replication")
#: what `txnsim bench` (or `all`) runs, quickest first: every benchmark but `code`, which compares this tree with
#: a git revision the user names; about 15 minutes on 2 CPUs, Spark's JVM last
IN_ALL = ("producer", "consumer", "failover", "peer", "commit", "nodecpu", "rpw", "scaling", "sim", "replication",
          "rocketmq", "spark")
#: where the charts go unless --plot DIR or --no-plot says otherwise (criterion's habit: a report by default)
DEFAULT_CHART_DIR = Path("txnsim-bench")
HEADINGS = {"producer": "Producer throughput and commit cost", "consumer": "Consumer throughput",
            "failover": "Failover", "spark": "Spark sink", "rocketmq": "RocketMQ-style transactions",
            "peer": "confluent-kafka against txnsim and against librdkafka's mock cluster",
            "code": "Producer before and after", "rpw": "Read-process-write: exactly-once against at-least-once",
            "scaling": "Coordinator scaling: 100 transactional ids on 1, 2 and 3 nodes",
            "commit": "Commit latency vs partitions per transaction", "nodecpu": "Node CPU per record",
            "sim": "Simulator speed", "replication": "Replication: three replicas against one, and failover"}
DEFAULT_SECONDS = 2.0
#: rocketmq's runs are shorter: it makes 9 of them per round, so 6 rounds stay within about 2 minutes
DEFAULT_ROCKETMQ_SECONDS = 1.25
#: rounds each benchmark runs unless --repeat says otherwise: enough for a median worth reading while each
#: benchmark stays within a few minutes on 2 CPUs
DEFAULT_REPEAT = {"producer": 6, "consumer": 7, "failover": 20, "spark": 7, "rocketmq": 6, "peer": 6, "code": 3,
                  "rpw": 3, "scaling": 3, "commit": 100, "nodecpu": 3,  # commit: transactions per partition count
                  "sim": 5, "replication": 5}  # sim: seeds
DEFAULT_RECORDS = 300_000
#: rows the spark benchmark copies per run, and its maxOffsetsPerTrigger: 10 micro-batches of about 0.35 s
DEFAULT_SPARK_ROWS = 200_000
DEFAULT_BATCH_ROWS = 20_000


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="the benchmark suite on embedded clusters, with charts; every benchmark but "
                                         "code unless named (about 15 minutes)")
    # default "all", not []: Python 3.11's argparse checks a list default against the choices and refuses it
    bench.add_argument("benchmark", nargs="*", choices=(*BENCHMARKS, "all"), default="all",
                       help=f"the benchmarks to run, in order (default: all, which is {', '.join(IN_ALL)})")
    bench.add_argument("--seconds", type=float, default=None,
                       help=f"length of each producer run (default {DEFAULT_SECONDS:g}; "
                            f"{DEFAULT_ROCKETMQ_SECONDS:g} for rocketmq)")
    bench.add_argument("--repeat", type=int, default=None,
                       help="interleaved rounds of each comparison, or kill/restart rounds of failover (default: "
                            + ", ".join(f"{n} for {name}" for name, n in DEFAULT_REPEAT.items()) + ")")
    bench.add_argument("--failover-rounds", type=int, default=None,
                       help="kill/restart rounds of the failover benchmark (overrides --repeat for it)")
    bench.add_argument("--records", type=int, default=None,
                       help=f"records the consumer benchmark writes to each topic (default {DEFAULT_RECORDS:,}), "
                            f"or rows the spark benchmark copies per run (default {DEFAULT_SPARK_ROWS:,})")
    bench.add_argument("--batch-rows", type=int, default=None,
                       help=f"maxOffsetsPerTrigger of the spark benchmark's copies (default {DEFAULT_BATCH_ROWS:,})")
    bench.add_argument("--before", default=None,
                       help="code: the git revision to compare this tree's producer with (e.g. a commit before "
                            "an optimisation)")
    bench.add_argument("--json", action="store_true",
                       help="print the results as one JSON object on stdout (progress goes to stderr)")
    bench.add_argument("--output", type=Path, default=None,
                       help="markdown file whose generated sections get the tables (e.g. docs/benchmarks.md)")
    bench.add_argument("--plot", type=Path, default=None, metavar="DIR",
                       help=f"write a PNG chart of each table worth one into DIR (default ./{DEFAULT_CHART_DIR}, or "
                            "images/bench beside the --output file); with --output, the sections link them")
    bench.add_argument("--no-plot", action="store_true", help="draw no charts")
    bench.set_defaults(func=run_bench)


def command_line(args: argparse.Namespace) -> str:
    """The command as given (options the user left out are left out), for the published tables."""
    words = ["txnsim", "bench", *_names(args.benchmark)]
    for option in ("seconds", "repeat", "failover_rounds", "records", "batch_rows", "before", "output", "plot"):
        value = getattr(args, option, None)
        if value is not None:
            words += [f"--{option.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    if getattr(args, "no_plot", False):
        words.append("--no-plot")
    return shlex.join(words)


def _names(benchmark: str | list[str]) -> list[str]:
    """The positional argument as a list: argparse gives its default ("all") as a string."""
    return [benchmark] if isinstance(benchmark, str) else list(benchmark)


def selected_benchmarks(benchmark: str | list[str]) -> tuple[str, ...]:
    """The benchmarks a call runs, in order, each once: every one of `all` for none or `all`."""
    names = _names(benchmark)
    if not names or "all" in names:
        return IN_ALL
    return tuple(dict.fromkeys(names))


def chart_dir(args: argparse.Namespace) -> Path | None:
    """Where this call's charts go, or None for none: --plot DIR; beside an --output file, in its images/bench/
    (where docs/benchmarks.md keeps them); else ./txnsim-bench/."""
    if args.no_plot:
        return None
    if args.plot is not None:
        return Path(args.plot)
    return args.output.parent / "images" / "bench" if args.output is not None else DEFAULT_CHART_DIR


class RichProgress:
    """The benchmarks' Progress protocol on a rich progress display: one bar per phase."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None

    def phase(self, description: str, total: int) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=self._progress.tasks[self._task].total)
        self._task = self._progress.add_task(description, total=total)

    def advance(self, steps: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, steps)


def _runner(name: str, args: argparse.Namespace) -> Callable[[RichProgress], BenchResult]:
    repeat = args.repeat or DEFAULT_REPEAT[name]
    if name == "producer":
        return lambda p: producer_bench.run(seconds=args.seconds or DEFAULT_SECONDS, repeat=repeat, progress=p)
    if name == "consumer":
        return lambda p: consumer_bench.run(records=args.records or DEFAULT_RECORDS, repeat=repeat, progress=p)
    if name == "peer":
        return lambda p: peer_bench.run(seconds=args.seconds or DEFAULT_SECONDS, repeat=repeat, progress=p)
    if name in ("rpw", "scaling", "commit", "nodecpu"):
        return _issue14_runner(name, args, repeat)
    if name == "replication":
        from txnsim.bench import replication_bench  # starts ZooKeeper: only when asked for

        return lambda p: replication_bench.run(seconds=args.seconds or DEFAULT_SECONDS, repeat=repeat, progress=p,
                                               kills=args.failover_rounds or DEFAULT_REPEAT["failover"])
    if name == "sim":
        from txnsim.bench import sim_bench  # imports the simulator: only when asked for

        return lambda p: sim_bench.run(repeat=repeat, progress=p)
    if name == "code":
        return lambda p: code_bench.run(before=args.before, seconds=args.seconds or DEFAULT_SECONDS, repeat=repeat,
                                        progress=p)
    if name == "rocketmq":
        return lambda p: rocketmq_bench.run(seconds=args.seconds or DEFAULT_ROCKETMQ_SECONDS, repeat=repeat, progress=p)
    if name == "spark":
        from txnsim.bench import spark_bench  # imports pyspark: only when asked for

        return lambda p: spark_bench.run(records=args.records or DEFAULT_SPARK_ROWS,
                                         batch_rows=args.batch_rows or DEFAULT_BATCH_ROWS, repeat=repeat, progress=p)
    rounds = args.failover_rounds or repeat
    return lambda p: failover_bench.run(rounds=rounds, progress=p)


def _issue14_runner(name: str, args: argparse.Namespace, repeat: int) -> Callable[[RichProgress], BenchResult]:
    """The scenarios issue 14 added, imported when asked for."""
    from txnsim.bench import commit_bench, nodecpu_bench, rpw_bench, scaling_bench

    if name == "rpw":
        return lambda p: rpw_bench.run(records=args.records or 200_000, repeat=repeat, progress=p)
    if name == "scaling":
        return lambda p: scaling_bench.run(seconds=args.seconds or 3.0, repeat=repeat, progress=p)
    if name == "commit":  # --repeat: transactions timed per partition count
        return lambda p: commit_bench.run(transactions=repeat, progress=p)
    return lambda p: nodecpu_bench.run(records=args.records or 200_000, repeat=repeat, progress=p)


def _validate(args: argparse.Namespace) -> None:
    for option in ("seconds", "repeat", "failover_rounds", "records", "batch_rows"):
        value = getattr(args, option)
        if value is not None and value <= 0:
            raise SystemExit(f"error: --{option.replace('_', '-')} must be positive, not {value}")
    if "code" in selected_benchmarks(args.benchmark) and not args.before:
        raise SystemExit("error: txnsim bench code needs --before REVISION (the code to compare with)")
    if args.no_plot and args.plot is not None:
        raise SystemExit("error: --plot and --no-plot contradict each other")
    charts = chart_dir(args)
    if charts is not None:  # before a run of minutes, not after it
        try:
            charts.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            given = "--plot" if args.plot is not None else "the charts' directory"
            raise SystemExit(f"error: {given} {charts}: cannot make the directory ({exc.strerror})") from None


@exits_cleanly
def run_bench(args: argparse.Namespace) -> int:
    _validate(args)
    selected = selected_benchmarks(args.benchmark)
    charts_to = chart_dir(args)
    machine = this_machine()
    cpus, command = machine.cpus, command_line(args)
    out = Console(stderr=True) if args.json else console  # with --json, stdout holds the JSON alone
    out.print(f"[bold]{command}[/bold] on {machine.describe()}")
    results: list[dict[str, object]] = []
    failed: list[str] = []
    for name in selected:
        date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
        _warn_if_busy(cpus, out)
        cpu_share = CpuShare()
        try:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=out, transient=False) as progress:
                result = _runner(name, args)(RichProgress(progress))
        except Exception as exc:  # one benchmark's failure must not cost the others of a long run
            if len(selected) == 1:
                raise
            out.print(f"[red]error: the {name} benchmark failed ({type(exc).__name__}: {exc}); going on with the "
                      "next[/red]")
            failed.append(name)
            continue
        cpu = cpu_share.describe(cpus)
        if not args.json:  # the tables first: a failed chart must not cost the minutes of the run
            if cpu:
                console.print(f"CPU: {cpu}")
            for table in result.tables:
                console.print(to_rich(table))
            for verdict in result.verdicts:
                colour = "green" if verdict.met else "red"
                console.print(f"[{colour}]{verdict.line()}[/{colour}]")
        charts = _plot(result, charts_to, out) if charts_to is not None else None
        results.append(_as_json(result, cpu, charts))
        if args.output is not None:
            links = {i: os.path.relpath(path, args.output.parent) for i, path in (charts or {}).items()}
            _write_section(args.output, result, command=command, date=date, machine=machine.describe(), cpu=cpu,
                           charts=links)
            out.print(f"updated the {name} section of {args.output}")
    if args.json:
        print(json.dumps({"command": command, "machine": machine.describe(), "benchmarks": results,
                          "failed": failed}, indent=2))
    if failed:
        out.print(f"[red]error: {len(failed)} of {len(selected)} benchmarks failed: {', '.join(failed)}[/red]")
        return 1
    return 0  # a missed target is a finding, reported above, not a failure of the command


def _plot(result: BenchResult, directory: Path, out: Console) -> dict[int, Path]:
    """The result's charts, drawn into `directory`: each table's file, by the table's index."""
    from txnsim.bench.plot import write_charts  # imports matplotlib: only when asked for

    try:
        charts = write_charts(result, directory)
    except (OSError, ValueError) as exc:  # the run's tables are printed and written all the same
        out.print(f"[red]error: could not draw the charts of {result.name} in {directory}: {exc}[/red]")
        return {}
    out.print(f"wrote {len(charts)} chart{'s' if len(charts) != 1 else ''} of {result.name} to {directory}")
    return charts


def _as_json(result: BenchResult, cpu: str | None, charts: dict[int, Path] | None = None) -> dict[str, object]:
    """A benchmark's tables (rows as column -> cell, and with --plot the chart's file) and verdicts, for --json."""
    tables: list[dict[str, object]] = []
    for index, t in enumerate(result.tables):
        table: dict[str, object] = {"title": t.title,
                                    "rows": [dict(zip(t.columns, row, strict=True)) for row in t.rows],
                                    "notes": list(t.notes)}
        if charts is not None:
            table["chart"] = str(charts[index]) if index in charts else None
        tables.append(table)
    found: dict[str, object] = {"name": result.name, "cpu": cpu, "tables": tables,
                                "targets": [{"target": v.target, "met": v.met, "detail": v.detail}
                                            for v in result.verdicts]}
    if charts is not None:
        found["charts"] = [str(path) for path in charts.values()]
    return found


def _warn_if_busy(cpus: int, out: Console, window_s: float = 1.0, threshold: float = 0.15) -> None:
    """Other processes' share of the machine over the last second, said before a benchmark starts."""
    sample = CpuShare()
    time.sleep(window_s)  # the sampling window, not a wait for anything
    share = sample.others_share(cpus)
    if share is not None and share > threshold:
        out.print(f"[yellow]other processes are using {share:.0%} of the {cpus} CPUs: expect noisy "
                      f"figures[/yellow]")


def _write_section(path: Path, result: BenchResult, *, command: str, date: str, machine: str,
                   cpu: str | None, charts: dict[int, str] | None = None) -> None:
    document = path.read_text() if path.exists() else "# Benchmarks\n"
    body = section_body(result, command=command, date=date, machine=machine, cpu=cpu, charts=charts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace_section(document, result.name, body, heading=HEADINGS[result.name]))

