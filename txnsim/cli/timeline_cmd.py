"""`txnsim transactions timeline ID`: one transactional id's steps, node by node and partition by partition,
with the rebalances of the consumer groups its transactions commit offsets for; `txnsim consumer-groups
timeline GROUP`: a group's generations, members and assignments.

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
from proto.errors import GroupIdNotFoundError, TransactionalIdNotFoundError
from txnsim.cli.common import DEFAULT_DATA_DIR, console, exits_cleanly
from txnsim.observe.group_timeline import beside_transactions, last_generations
from txnsim.observe.log_reader import group_timeline_of, read_timeline
from txnsim.observe.timeline import TimelineEvent, last_transactions


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    timeline = verbs.add_parser("timeline", help="a transactional id's steps per node and partition, from the logs")
    timeline.add_argument("transactional_id")
    timeline.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                          help="data directory of the cluster (default: ./txnsim-data); it need not be running")
    timeline.add_argument("--last", type=_count, default=None, metavar="N",
                          help="only the id's last N transactions, the one in progress included (default: all)")
    timeline.add_argument("--group", action="append", default=[], metavar="GROUP",
                          help="show this consumer group's rebalances too (repeatable; the groups the id's "
                               "transactions commit offsets for are shown without it)")
    timeline.add_argument("--json", action="store_true", help="print the events as a JSON list")
    timeline.set_defaults(func=print_timeline)


def register_group_timeline(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`consumer-groups timeline GROUP` (the consumer-groups command adds this verb)."""
    timeline = verbs.add_parser("timeline", help="a group's generations: members, assignment and each rebalance, "
                                                 "from the __consumer_offsets log")
    timeline.add_argument("group")
    timeline.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                          help="data directory of the cluster (default: ./txnsim-data); it need not be running")
    timeline.add_argument("--last", type=_count, default=None, metavar="N",
                          help="only the group's last N generations (default: all the log holds)")
    timeline.add_argument("--json", action="store_true", help="print the events as a JSON list")
    timeline.set_defaults(func=print_group_timeline)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def format_time(time_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(time_ms / 1000)) + f".{time_ms % 1000:03d}"


def _require_cluster(data_dir: Path) -> None:
    if not ClusterLayout(data_dir).cluster_file.exists():
        raise SystemExit(f"error: no cluster at {data_dir} (pass the --data-dir of `txnsim cluster start`)")


@exits_cleanly
def print_timeline(args: argparse.Namespace) -> int:
    _require_cluster(args.data_dir)
    picture = read_timeline(args.data_dir, args.transactional_id)
    events = picture.events
    if not events:
        raise TransactionalIdNotFoundError(f"[TRANSACTIONAL_ID_NOT_FOUND] no durable record of transactional id "
                                           f"{args.transactional_id!r} in {args.data_dir}")
    if args.last is not None:
        events = last_transactions(events, args.last)
    groups = dict(picture.groups)
    for group in args.group:
        if group not in groups:
            groups[group] = group_timeline_of(args.data_dir, group)
    events = beside_transactions(events, groups)
    title = f"timeline of {args.transactional_id}" + (f" with group {', '.join(sorted(groups))}" if groups else "")
    return _print(events, title, args.json)


@exits_cleanly
def print_group_timeline(args: argparse.Namespace) -> int:
    _require_cluster(args.data_dir)
    events = group_timeline_of(args.data_dir, args.group)
    if not events:
        raise GroupIdNotFoundError(f"[GROUP_ID_NOT_FOUND] no durable membership record of group {args.group!r} in "
                                   f"{args.data_dir} (a group that only commits offsets has no generations)")
    if args.last is not None:
        events = last_generations(events, args.last)
    return _print(events, f"generations of group {args.group}", args.json)


def _print(events: list[TimelineEvent], title: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps([e.as_dict() for e in events], indent=1))
        return 0
    table = Table(title=escape(title))
    for column in ("txn/gen", "time", "lane", "what", "epoch", "detail"):
        table.add_column(column, overflow="fold")
    for e in events:
        number = f"gen {e.generation}" if e.generation else str(e.transaction or "")
        table.add_row(number, format_time(e.time_ms), escape(e.lane), escape(e.label),
                      str(e.producer_epoch) if e.producer_epoch >= 0 else "", escape(e.detail))
    console.print(table)
    return 0
