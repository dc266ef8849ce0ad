"""`txnsim transactions timeline ID`: one transactional id's steps, node by node and partition by partition.

Read from the cluster's files (txnsim/observe/), so it works on a stopped cluster too; the web view
(`txnsim ui`) draws the same events as swimlanes.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from coordinator.layout import ClusterLayout
from proto.errors import TransactionalIdNotFoundError
from txnsim.cli.common import DEFAULT_DATA_DIR, console, exits_cleanly
from txnsim.observe.log_reader import timeline_of
from txnsim.observe.timeline import last_transactions


def register(verbs: argparse._SubParsersAction) -> None:
    timeline = verbs.add_parser("timeline", help="a transactional id's steps per node and partition, from the logs")
    timeline.add_argument("transactional_id")
    timeline.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                          help="data directory of the cluster (default: ./txnsim-data); it need not be running")
    timeline.add_argument("--last", type=_count, default=None, metavar="N",
                          help="only the id's last N transactions, the one in progress included (default: all)")
    timeline.add_argument("--json", action="store_true", help="print the events as a JSON list")
    timeline.set_defaults(func=print_timeline)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def format_time(time_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(time_ms / 1000)) + f".{time_ms % 1000:03d}"


@exits_cleanly
def print_timeline(args: argparse.Namespace) -> int:
    if not ClusterLayout(args.data_dir).cluster_file.exists():
        raise SystemExit(f"error: no cluster at {args.data_dir} (pass the --data-dir of `txnsim cluster start`)")
    events = timeline_of(args.data_dir, args.transactional_id)
    if not events:
        raise TransactionalIdNotFoundError(f"[TRANSACTIONAL_ID_NOT_FOUND] no durable record of transactional id "
                                           f"{args.transactional_id!r} in {args.data_dir}")
    if args.last is not None:
        events = last_transactions(events, args.last)
    if args.json:
        print(json.dumps([e.as_dict() for e in events], indent=1))
        return 0
    table = Table(title=f"timeline of {escape(args.transactional_id)}")
    for column in ("txn", "time", "lane", "what", "epoch", "detail"):
        table.add_column(column, overflow="fold")
    for e in events:
        table.add_row(str(e.transaction or ""), format_time(e.time_ms), e.lane, escape(e.label),
                      str(e.producer_epoch) if e.producer_epoch >= 0 else "", escape(e.detail))
    console.print(table)
    return 0
