"""`txnsim pipeline`: the Spark exactly-once demo, with its crashes and its check, on the terminal.

Shows a progress line while it runs and each crash as it happens, then the income per minute
read back with read_committed beside the totals computed from the orders. Exit code 0 when
they are equal (no minute missing, none written twice), 1 otherwise.
"""
from __future__ import annotations

import argparse
import logging
from datetime import datetime, timezone
from pathlib import Path

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table

from txnsim.cli.common import (
    add_cluster_shape_args,
    console,
    error,
    exits_cleanly,
    non_negative_int,
    positive_float,
    positive_int,
    scratch_dir,
)
from txnsim.pipeline.runner import PipelineConfig, PipelineResult, run_pipeline
from txnsim.pipeline.runner import Progress as RunProgress
from txnsim.report import pipeline_report, report_path, write_report


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser("pipeline", help="the Spark exactly-once demo: income per minute under crashes",
                         description="Orders stream into txnsim; a Spark Structured Streaming query sums income "
                                     "per event-time minute into the income topic, exactly once, while the Spark "
                                     "driver and a txnsim node are SIGKILLed; then the totals are checked.")
    cmd.add_argument("--master", default="local[2]",
                     help="Spark master: local[N] (default local[2]) or spark://HOST:PORT for a standalone cluster")
    cmd.add_argument("--orders", type=positive_int, default=2400, help="orders to generate (default 2400)")
    cmd.add_argument("--minutes", type=positive_int, default=6, help="event-time minutes they span (default 6)")
    cmd.add_argument("--rate", type=positive_float, default=120.0, help="orders written per second (default 120)")
    cmd.add_argument("--seed", type=non_negative_int, default=1, help="seed of the order amounts (default 1)")
    cmd.add_argument("--no-kill-driver", dest="kill_driver", action="store_false",
                     help="do not SIGKILL the Spark driver")
    cmd.add_argument("--no-kill-node", dest="kill_node", action="store_false", help="do not SIGKILL a txnsim node")
    add_cluster_shape_args(cmd)
    cmd.add_argument("--data-dir", type=Path, default=None,
                     help="an empty directory for the cluster, checkpoint and driver log (default: a temp dir)")
    cmd.add_argument("--report", type=Path, default=None,
                     help="where to write the HTML report (default: pipeline-report.html beside the cluster, "
                          "checkpoint and driver log)")
    cmd.set_defaults(func=run_pipeline_command)


@exits_cleanly
def run_pipeline_command(args: argparse.Namespace) -> int:
    if args.orders < 1 or args.minutes < 1 or args.rate <= 0:
        raise SystemExit("error: --orders and --minutes must be at least 1 and --rate above 0")
    # checked before the run; without --data-dir or --report it goes to a kept temporary directory, since the
    # run's own files are removed when it holds
    report_file = report_path(args.report, args.data_dir, "pipeline-report.html")
    try:
        with scratch_dir(args.data_dir, "txnsim-pipeline-", "pipeline files (cluster, checkpoint, driver log)") \
                as path:
            result = _run(args, path, report_file)
    except _KeepFiles as failed:
        if failed.result is not None:
            console.print("[red bold]MISMATCH[/]: the income read back differs from the orders' totals (see the "
                          "table)")
        return 1
    console.print(f"[green bold]exactly once[/]: {len(result.expected)} minutes, each written once and equal "
                  f"to the orders' totals ({result.elapsed_s:.0f} s, "
                  f"{sum(1 for _, e in result.events if 'SIGKILL' in e)} SIGKILLs)")
    return 0


def _run(args: argparse.Namespace, data_dir: Path, report_file: Path) -> PipelineResult:
    """The run's result if it held; _KeepFiles otherwise, so that its files stay for a look."""
    config = PipelineConfig(orders=args.orders, minutes=args.minutes, rate=args.rate, seed=args.seed,
                            master=args.master, data_dir=data_dir, kill_driver=args.kill_driver,
                            kill_node=args.kill_node, replicated=args.replicated, namespaces=args.namespaces)
    if args.log_level.upper() == "WARNING":
        logging.getLogger().setLevel(logging.ERROR)  # clients warn at every retry while a node is down
    console.print(f"[bold]txnsim pipeline[/]: {config.orders} orders over {config.minutes} event-time minutes "
                  f"-> Spark ({config.master}) -> income per minute, exactly once")
    display = _Display()
    try:
        with display.bar:
            result = run_pipeline(config, display.update)
    except (RuntimeError, TimeoutError) as exc:  # the driver died or the run stalled: say which, no traceback
        error(str(exc))
        raise _KeepFiles() from None
    console.print(result_table(result))
    report = write_report(pipeline_report(config, result), report_file)
    console.print(f"report: {report}", markup=False, soft_wrap=True)
    if not result.ok:
        raise _KeepFiles(result)
    return result


class _KeepFiles(Exception):
    """A failed run: its files stay for a look (scratch_dir keeps them when its block raises)."""

    def __init__(self, result: PipelineResult | None = None) -> None:
        super().__init__()
        self.result = result


class _Display:
    """One progress line; each crash or restart printed above it as it happens."""

    def __init__(self) -> None:
        self.bar = Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[phase]:<18}"), BarColumn(bar_width=20),
                            TextColumn("orders {task.completed:>5.0f}/{task.total:.0f}"),
                            TextColumn("{task.fields[counters]}"), console=console)
        self.task = self.bar.add_task("pipeline", total=1, phase="starting", counters="")
        self.shown = 0

    def update(self, progress: RunProgress) -> None:
        for at, text in progress.events[self.shown:]:
            self.bar.console.print(f"[dim]t+{at:5.1f} s[/]  {text}")
        self.shown = len(progress.events)
        self.bar.update(self.task, total=progress.orders_total, completed=progress.orders_committed,
                        phase=progress.phase,
                        counters=f"micro-batches {progress.batches}  minutes read "
                                 f"{progress.windows_read}/{progress.windows_expected}")


def result_table(result: PipelineResult) -> Table:
    days = {datetime.fromtimestamp(m / 1000, timezone.utc).strftime("%Y-%m-%d") for m in result.expected}
    table = Table(title=f"income per minute ({', '.join(sorted(days))}, UTC): from the orders vs read back "
                        f"with read_committed", title_justify="left")
    for column in ("minute", "orders", "from orders", "read back", "written", ""):
        table.add_column(column, justify="left" if column in ("minute", "") else "right")
    for minute in sorted(set(result.expected) | set(result.read_back)):
        income, count = result.expected.get(minute, (None, None))
        seen = result.read_back.get(minute, [])
        got = seen[0][0] if seen else None
        ok = len(seen) == 1 and (income, count) == seen[0]
        table.add_row(datetime.fromtimestamp(minute / 1000, timezone.utc).strftime("%H:%M"),
                      "-" if count is None else str(count), _money(income), _money(got), f"{len(seen)}x",
                      "[green]ok[/]" if ok else "[red]WRONG[/]")
    return table


def _money(cents: int | None) -> str:
    return "-" if cents is None else f"{cents / 100:,.2f}"
