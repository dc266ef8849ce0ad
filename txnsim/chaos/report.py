"""How a chaos run looks on a terminal: the fault schedule, a live progress bar with counters,
and the verdict (anomaly | count | example, then the totals). Rendering only; no decisions."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn
from rich.table import Column, Table

from txnsim.chaos.checker import ANOMALIES, CheckResult
from txnsim.chaos.nemesis import Fault
from txnsim.chaos.runner import ChaosRun, Observer

#: the live counters shown beside the progress bar, in this order
_LIVE = (("acked chaos-in", "sent"), ("committed", "txns committed"), ("aborted on purpose", "aborted on purpose"),
         ("acked chaos-out", "copied"), ("faults", "faults"), ("client errors", "errors"))
_DOWN = {"kill": "killed", "pause": "paused", "restart": "restarting"}


def schedule_table(schedule: list[Fault], seed: int) -> Table:
    table = Table(title=f"fault schedule (seed {seed})", title_justify="left")
    for column in ("#", "at", "fault", "node", "down for"):
        table.add_column(column, justify="right" if column != "fault" else "left")
    for i, fault in enumerate(schedule, 1):
        down = "-" if not fault.heal_after_s else f"{fault.heal_after_s:.2f} s"
        table.add_row(str(i), f"t+{fault.at_s:.2f} s", fault.kind, str(fault.node), down)
    if not schedule:
        table.add_row("-", "-", "none", "-", "-")
    return table


class LiveDisplay(Observer):
    """A rich progress bar: phase, elapsed / duration, and the history's counters."""

    def __init__(self, console: Console, duration_s: float) -> None:
        self.console = console
        self.duration_s = duration_s
        self.progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[phase]:<10}"), BarColumn(bar_width=24),
                                 TextColumn("{task.completed:>4.0f}/{task.total:.0f} s"),
                                 TextColumn("{task.fields[counters]}", table_column=Column(overflow="fold")),
                                 console=console)
        self.task: TaskID | None = None

    def __enter__(self) -> LiveDisplay:
        self.progress.start()
        self.task = self.progress.add_task("chaos", total=self.duration_s, phase="starting", counters="")
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def started(self, run: ChaosRun, bootstrap_servers: str, data_dir: Path) -> None:
        self.progress.console.print(f"cluster up: {bootstrap_servers} (data in {data_dir})")

    def phase(self, name: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, phase=name)

    def tick(self, elapsed_s: float, counters: dict[str, int], nodes_down: dict[int, str]) -> None:
        if self.task is None:
            return
        text = "  ".join(f"{label} {counters.get(key, 0)}" for key, label in _LIVE)
        if nodes_down:
            text += "  [red]" + ", ".join(f"node {n} {_DOWN.get(kind, kind)}"
                                          for n, kind in sorted(nodes_down.items())) + "[/red]"
        self.progress.update(self.task, completed=min(elapsed_s, self.duration_s), counters=text)


def anomalies_table(result: CheckResult) -> Table:
    table = Table(title="anomalies (Jepsen's names)", title_justify="left", show_lines=False)
    table.add_column("anomaly")
    table.add_column("count", justify="right")
    table.add_column("example", overflow="fold")
    for name in ANOMALIES:
        finding = result.findings[name]
        style = "red" if finding.count else "green"
        table.add_row(f"[{style}]{name}[/{style}]", f"[{style}]{finding.count}[/{style}]", finding.example or "-")
    return table


def totals_table(run: ChaosRun) -> Table:
    result = run.result
    assert result is not None
    table = Table(title="totals", title_justify="left")
    table.add_column("what")
    table.add_column("count", justify="right")
    for what, count in result.totals.items():
        table.add_row(what, str(count))
    for kind, count in sorted(result.faults.items()):
        table.add_row(f"faults injected: {kind}", str(count))
    for error, count in result.errors.most_common():
        table.add_row(f"client errors: {error}", str(count))
    return table


def verdict(run: ChaosRun) -> Group:
    result = run.result
    assert result is not None
    lines: list[RenderableType] = [anomalies_table(result), totals_table(run)]
    if not run.final.complete:
        lines.append("[yellow]the final read did not reach the end of every partition: the check is "
                     "inconclusive[/yellow]")
    if not run.drained:
        lines.append("[yellow]the workers had not copied every committed input record when the run ended "
                     "(not an anomaly: lost-write only counts records below the committed offsets)[/yellow]")
    if run.config.unclean_leader_election and not result.valid:
        lines.append("[yellow]unclean leader election was on: a replica outside the ISR was let lead, and what "
                     "only the ISR had (records acknowledged to acks=all) went with it, as Kafka warns of "
                     "unclean.leader.election.enable[/yellow]")
    if result.valid:
        lines.append(f"[bold green]no anomalies[/bold green] in {run.config.duration_s:.0f} s, seed {run.config.seed}")
    else:
        lines.append(f"[bold red]{result.anomalies} anomalies[/bold red]; rerun with --seed {run.config.seed} "
                     f"for the same faults")
    return Group(*lines)
