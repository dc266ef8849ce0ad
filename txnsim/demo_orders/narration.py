"""What the orders demo prints: one line per service event, the node's half-message listing, and
the final order-by-order comparison of the two SQLite files. Text only; the runner decides when.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from rich.markup import escape
from rich.table import Table

from txnsim.admin import HalfMessageListing
from txnsim.demo_orders.channel import Event

_WHO = {"order": "[cyan]order service [/]", "points": "[magenta]points service[/]"}


def describe(event: Event) -> str | None:
    """The narration of one service event (None: not worth a line)."""
    f = event.fields
    oid = escape(str(f.get("order_id", "")))
    if event.service == "points" and f.get("partition", -1) >= 0:
        oid += f" (points-{f['partition']}@{f['offset']})"
    text: str | None
    match (event.service, event.name):
        case ("order", "ready"):
            text = (f"up (pid {event.pid}, txnsim's Producer), registered for the group's check-backs"
                    if f["client"] == "native" else
                    f"up (pid {event.pid}, rocketmq client: Producer with a TransactionChecker; the node reaches "
                    "it over its Telemetry stream)")
        case ("order", "half-stored"):
            text = (f"{oid}: half message stored, transaction [bold]{f['transaction_id']}[/] — invisible to every "
                    "consumer; only now does the local transaction run")
        case ("order", "holding"):
            text = (f"{oid}: the local transaction is slow: rows inserted, COMMIT not yet done "
                    "(other connections do not see the status row)")
        case ("order", "local-commit"):
            text = f"{oid}: [green]SQLite COMMIT[/] — {escape(f['why'])}"
        case ("order", "local-rollback"):
            text = f"{oid}: [red]SQLite ROLLBACK[/] — {escape(f['why'])}"
        case ("order", "killing"):
            text = f"{oid}: [red bold]fault: SIGKILL of the order service itself[/], after its local commit and " \
                   "before it ends the transaction"
        case ("order", "end"):
            text = (f"{oid}: end of transaction ({f['state']}) [red bold]LOST[/] (fault injected): only a check-back "
                    "can decide it now" if f["lost"] else f"{oid}: end of transaction sent: [bold]{f['state']}[/]")
        case ("order", "check"):
            count = f" #{f['check_times']}" if f.get("check_times") else ""
            colour = {"COMMIT": "green", "ROLLBACK": "red"}.get(f["decision"], "yellow")
            text = (f"{oid}: [bold]check-back{count}[/] from the node; the status table says {escape(f['why'])} "
                    f"=> [{colour} bold]{f['answer']}[/]")
        case ("order", "send-failed"):
            text = f"{oid}: half message NOT stored ({escape(f['why'])}): the local transaction does not run"
        case ("points", "ready"):
            reader = ("txnsim's Consumer, read_committed, manual offset commits" if f["client"] == "native"
                      else "rocketmq client: SimpleConsumer, ack after the SQLite commit")
            text = f"up (pid {event.pid}, {reader}), group {escape(f['group'])}, reading 'points'"
        case ("points", "deducted"):
            text = (f"{oid}: {f['points']} points deducted from {escape(f['user'])} (balance {f['balance']}), "
                    f"with its processed_orders row, in one [green]SQLite COMMIT[/]")
        case ("points", "acked"):
            text = f"{oid}: then {escape(f['what'])}"
        case ("points", "duplicate"):
            text = (f"{oid}: [yellow bold]delivered again[/] — already in processed_orders, "
                    "[bold]nothing deducted[/]")
        case ("points", "killing"):
            text = f"{oid}: [red bold]fault: SIGKILL of the points service itself[/], after its SQLite commit and " \
                   "before it commits the offset"
        case ("points", "ack-failed"):
            text = f"{oid}: offset commit failed ({escape(f['why'])}): it will be delivered again"
        case _:
            text = None
    return None if text is None else f"{_WHO[event.service]} {text}"


def half_table(messages: list[HalfMessageListing], order_of: dict[str, str], title: str) -> Table:
    """`txnsim transactions list --half`, reduced to what the demo's story needs."""
    now = int(time.time() * 1000)
    table = Table(title=title, title_justify="left")
    for column in ("transaction", "order", "group", "age ms", "checks", "last check", "next check in",
                   "passes with no producer", "owner node"):
        table.add_column(column, justify="left" if column in ("transaction", "order", "group") else "right")
    for m in messages:
        table.add_row(m.transaction_id, escape(order_of.get(m.transaction_id, "?")), escape(m.producer_group),
                      str(now - m.store_time_ms), str(m.check_times),
                      f"{now - m.last_check_ms} ms ago" if m.last_check_ms else "never",
                      f"{max(0, m.next_check_ms - now)} ms", str(m.unanswered_checks), str(m.node_id))
    if not messages:
        table.add_row("(none undecided)", "", "", "", "", "", "", "", "")
    return table


@dataclass(frozen=True)
class Row:
    order_id: str
    case: str
    ordered: tuple[str, int] | None    # (user, points) in orders.sqlite
    deducted: tuple[str, int] | None   # (user, points) in points.sqlite
    messages: int                      # messages for it on 'points', read_uncommitted

    @property
    def ok(self) -> bool:
        return self.ordered == self.deducted and self.messages == (1 if self.ordered else 0)


def final_table(rows: list[Row]) -> Table:
    table = Table(title="orders.sqlite vs points.sqlite, row for row", title_justify="left",
                  caption="messages: how many copies of the order's message are on 'points' (read_uncommitted)",
                  caption_justify="left")
    for column in ("order", "case", "orders.sqlite", "points.sqlite", "messages", ""):
        table.add_column(column, justify="right" if column == "messages" else "left")

    def cell(row: tuple[str, int] | None) -> str:
        return "-" if row is None else f"{escape(row[0])} {row[1]} points"
    for r in rows:
        table.add_row(r.order_id, escape(r.case), cell(r.ordered), cell(r.deducted), str(r.messages),
                      "[green]ok[/]" if r.ok else "[red bold]DIFFERENT[/]")
    return table
