"""`txnsim produce` (stdin lines, one transaction) and `txnsim consume` (either isolation level)."""
from __future__ import annotations

import argparse
import time

from proto.errors import UnknownTopicOrPartitionError
from proto.structs import TopicPartition
from txnsim.admin import Admin
from txnsim.cli.common import add_cluster_args, bootstrap_servers, console, exits_cleanly, read_stdin_lines


def register(sub: argparse._SubParsersAction) -> None:
    produce = sub.add_parser("produce", help="send the lines of stdin to TOPIC in one transaction")
    produce.add_argument("topic")
    produce.add_argument("--transactional-id", help="without it, the lines are sent idempotently, no transaction")
    produce.add_argument("--abort", action="store_true", help="abort the transaction instead of committing")
    produce.add_argument("--key-separator", help="split each line into key and value at this string")
    add_cluster_args(produce)
    produce.set_defaults(func=produce_lines)
    consume = sub.add_parser("consume", help="print the records of TOPIC")
    consume.add_argument("topic")
    consume.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"],
                         default="read_committed")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--group", help="consumer group (commits its offsets)")
    consume.add_argument("--max-messages", type=int, default=None)
    consume.add_argument("--timeout-ms", type=int, default=2000, help="stop after this long without records")
    add_cluster_args(consume)
    consume.set_defaults(func=consume_records)


@exits_cleanly
def produce_lines(args: argparse.Namespace) -> int:
    from producer import Producer
    lines = read_stdin_lines()
    with Producer(bootstrap_servers=bootstrap_servers(args), transactional_id=args.transactional_id) as p:
        if args.transactional_id:
            p.init_transactions()
            p.begin_transaction()
        futures = []
        for line in lines:
            key = None
            if args.key_separator and args.key_separator.encode() in line:
                key, line = line.split(args.key_separator.encode(), 1)
            futures.append(p.send(args.topic, value=line, key=key))
        if args.transactional_id:
            if args.abort:
                p.abort_transaction()
            else:
                p.commit_transaction()
        else:
            p.flush()
    outcome = "aborted" if args.abort else "committed" if args.transactional_id else "sent"
    console.print(f"{outcome} {len(lines)} record(s) to {args.topic}")
    return 0


@exits_cleanly
def consume_records(args: argparse.Namespace) -> int:
    from consumer import Consumer
    servers = bootstrap_servers(args)
    with Consumer(bootstrap_servers=servers, group_id=args.group, isolation_level=args.isolation_level,
                  auto_offset_reset="earliest" if args.from_beginning else "latest",
                  enable_auto_commit=False) as c:
        if args.group:
            c.subscribe([args.topic])
        else:
            with Admin(servers) as admin:
                count = admin.list_topics().get(args.topic)
            if count is None:
                raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {args.topic!r} does not exist")
            c.assign([TopicPartition(args.topic, p) for p in range(count)])
        seen = 0
        idle_since = time.monotonic()
        while args.max_messages is None or seen < args.max_messages:
            batch = c.poll(timeout_ms=200)
            records = [r for rs in batch.values() for r in rs]
            if not records:
                if (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                    break
                continue
            idle_since = time.monotonic()
            for r in sorted(records, key=lambda r: (r.partition, r.offset)):
                key = "" if r.key is None else r.key.decode(errors="replace") + "\t"
                console.print(f"{r.partition}:{r.offset}\t{key}{(r.value or b'').decode(errors='replace')}")
                seen += 1
        if args.group:
            c.commit()
    return 0
