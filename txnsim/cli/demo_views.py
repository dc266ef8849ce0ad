"""What both Kafka-style demos show: a scene's heading, and what a read_committed and a read_uncommitted
consumer each read of a topic, side by side (the records come from txnsim's consumer or librdkafka's)."""
from __future__ import annotations

from collections.abc import Callable

from rich.columns import Columns
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table

from txnsim.cli.common import console

ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


def scene(number: int, title: str, text: str) -> None:
    console.print()
    console.print(Panel(" ".join(text.split()), title=f"[bold]Scene {number}: {title}[/bold]", border_style="cyan"))


def show_side_by_side(title: str, read: Callable[[str], list[tuple[int, int, bytes]]], reader: str = "") -> None:
    """`read(isolation)` -> (partition, offset, value) of what a consumer of that isolation level reads."""
    panels = []
    for isolation in ISOLATION_LEVELS:
        table = Table(show_header=True, header_style="bold")
        table.add_column("partition", justify="right")
        table.add_column("offset", justify="right")
        table.add_column("value")
        for partition, offset, value in read(isolation):
            table.add_row(str(partition), str(offset), value.decode())
        panels.append(Panel(table, title=f"{isolation}{f' ({reader})' if reader else ''}",
                            border_style="green" if isolation == "read_committed" else "yellow"))
    console.print(Rule(title))
    console.print(Columns(panels))
