"""`txnsim produce` (stdin lines, one transaction) and `txnsim consume` (either isolation level)."""
from __future__ import annotations

import argparse
import sys
import time

from proto.errors import UnknownTopicOrPartitionError
from proto.structs import TopicPartition
from txnsim.admin import Admin
from txnsim.cli.common import (
    add_cluster_args,
    bootstrap_servers,
    console,
    exits_cleanly,
    non_negative_int,
    positive_int,
    print_data,
    read_stdin_lines,
)


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
    consume.add_argument("--max-messages", type=positive_int, default=None)
    consume.add_argument("--timeout-ms", type=non_negative_int, default=2000, help="stop after this long without records")
    add_cluster_args(consume)
    consume.set_defaults(func=consume_records)


@exits_cleanly
def produce_lines(args: argparse.Namespace) -> int:
    from producer import Producer
    if args.abort and not args.transactional_id:
        raise SystemExit("error: --abort needs --transactional-id (without one the lines are sent idempotently)")
    lines = read_stdin_lines()
    timeout_ms = args.request_timeout_ms
    with Producer(bootstrap_servers=bootstrap_servers(args), transactional_id=args.transactional_id,
                  request_timeout_ms=timeout_ms, max_block_ms=timeout_ms,
                  delivery_timeout_ms=timeout_ms + 1_000) as p:
        if args.transactional_id:
            p.init_transactions()
            p.begin_transaction()
        futures = []
        for line in lines:
            key = None
            if args.key_separator and args.key_separator.encode() in line:
                key, line = line.split(args.key_separator.encode(), 1)
            futures.append(p.send(args.topic, value=line, key=key))
        # Written before the decision, so an aborted transaction's records are on the log
        # (read_uncommitted shows them); aborting unsent batches would just drop them.
        p.flush()
        for future in futures:
            future.get(timeout=timeout_ms / 1000)  # a failed send raises its KafkaError here
        if args.transactional_id:
            if args.abort:
                p.abort_transaction()
            else:
                p.commit_transaction()
    outcome = "aborted" if args.abort else "committed" if args.transactional_id else "sent"
    console.print(f"{outcome} {len(lines)} record(s) to {args.topic}")
    return 0


@exits_cleanly
def consume_records(args: argparse.Namespace) -> int:
    from consumer import Consumer
    servers = bootstrap_servers(args)
    timeout_ms = args.request_timeout_ms
    # The consumer retries an unreachable node or unknown topic quietly inside poll();
    # ask once up front so a typo or a dead cluster is an error, not an empty result.
    with Admin(servers, request_timeout_ms=timeout_ms) as admin:
        count = admin.list_topics().get(args.topic)
    if count is None:
        raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {args.topic!r} does not exist")
    with Consumer(bootstrap_servers=servers, group_id=args.group, isolation_level=args.isolation_level,
                  auto_offset_reset="earliest" if args.from_beginning else "latest",
                  enable_auto_commit=False, request_timeout_ms=max(timeout_ms, 1_000)) as c:
        if args.group:
            c.subscribe([args.topic])
        else:
            c.assign([TopicPartition(args.topic, p) for p in range(count)])
        seen = 0
        idle_since = time.monotonic()
        while args.max_messages is None or seen < args.max_messages:
            remaining = None if args.max_messages is None else args.max_messages - seen
            batch = c.poll(timeout_ms=200, max_records=remaining)  # never past what will be printed
            records = [r for rs in batch.values() for r in rs]
            if not records:
                if (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                    break
                continue
            idle_since = time.monotonic()
            for r in sorted(records, key=lambda r: (r.partition, r.offset)):
                key = "" if r.key is None else r.key.decode(errors="replace") + "\t"
                print_data(f"{r.partition}:{r.offset}\t{key}{(r.value or b'').decode(errors='replace')}")
                seen += 1
            sys.stdout.flush()  # a reader of the pipe sees each batch as it arrives
        if args.group:
            c.commit()
    return 0
