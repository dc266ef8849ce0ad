"""Consume-transform-produce, exactly once: read numbers from --input, write them doubled to --output.

Why each input record is reflected exactly once in the output, across crashes and restarts:
  * the consumer's offsets are committed inside the same transaction as the output records
    (send_offsets_to_transaction), so "output written" and "input consumed" commit or abort together;
  * the transactional id is stable across restarts: init_transactions() fences any older instance
    (a zombie) and aborts what it left open, and a restart resumes from the committed offsets;
  * readers of the output (and this program, reading the input) use isolation_level=read_committed,
    so they never see records of an aborted or still open transaction.

Run it:  python examples/consume_transform_produce.py --bootstrap-servers HOST:PORT \
             --input numbers --output doubled --group doubler --transactional-id doubler-1
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from txnsim import (
    Consumer,
    ConsumerRecord,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
    errors,
)


def transform(value: bytes) -> bytes:
    """The "business logic": b"21" becomes b"42"."""
    return str(int(value) * 2).encode()


def rewind_to_committed(consumer: Consumer) -> None:
    """After an abort, go back to the last committed offsets: the aborted batch is read again."""
    for tp in consumer.assignment():
        committed = consumer.committed(tp)
        if committed is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, committed)


def transform_in_transaction(consumer: Consumer, producer: Producer, batch: dict[TopicPartition, list[ConsumerRecord]],
                             output: str,
                             crash_after: int | None = None) -> None:
    """One transaction: the transformed records and the consumer's new offsets commit together, or neither."""
    producer.begin_transaction()
    sent = 0
    for records in batch.values():
        for record in records:
            producer.send(output, key=record.key, value=transform(record.value))
            sent += 1
            if sent == crash_after:
                producer.flush()  # the records reach the log, inside a transaction that never commits
                print(f"crashing on purpose in the middle of a transaction ({sent} records sent)", flush=True)
                os._exit(1)
    # the next offset to read, for every partition this batch came from
    offsets = {tp: OffsetAndMetadata(consumer.position(tp)) for tp in batch}
    producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
    producer.commit_transaction()


def process(consumer: Consumer, producer: Producer, args: argparse.Namespace) -> int:
    """Poll, transform, commit, until --max-records or --idle-exit-seconds says stop; returns the count."""
    processed, last_progress = 0, time.monotonic()
    while args.max_records is None or processed < args.max_records:
        limit = args.batch_size if args.max_records is None else min(args.batch_size, args.max_records - processed)
        batch = consumer.poll(timeout_ms=500, max_records=limit)
        if not batch:
            if args.idle_exit_seconds is not None and time.monotonic() - last_progress > args.idle_exit_seconds:
                break
            continue
        count = sum(len(records) for records in batch.values())
        crash_after = None if args.fail_after is None else args.fail_after - processed
        try:
            transform_in_transaction(consumer, producer, batch, args.output, crash_after)
        except errors.KafkaError as exc:
            if exc.fatal:  # ProducerFencedError among them: this instance must stop
                raise
            # abortable, e.g. IllegalGenerationError: a rebalance fenced this member's offset commit
            print(f"aborting the transaction after {type(exc).__name__}: {exc}", flush=True)
            producer.abort_transaction()
            rewind_to_committed(consumer)
            continue
        processed += count
        last_progress = time.monotonic()
        print(f"committed {count} records ({processed} in all)", flush=True)
    return processed


def run(args: argparse.Namespace) -> int:
    consumer = Consumer(bootstrap_servers=args.bootstrap_servers, group_id=args.group,
                        isolation_level="read_committed", enable_auto_commit=False,
                        auto_offset_reset="earliest", session_timeout_ms=args.session_timeout_ms,
                        heartbeat_interval_ms=args.session_timeout_ms // 3)
    producer = Producer(bootstrap_servers=args.bootstrap_servers, transactional_id=args.transactional_id)
    try:
        consumer.subscribe([args.input])
        producer.init_transactions()  # fences older instances and aborts what they left open
        print(f"ready: transactional id {args.transactional_id!r}, group {args.group!r}", flush=True)
        processed = process(consumer, producer, args)
    except errors.ProducerFencedError as exc:
        print(f"fenced: a newer instance with transactional id {args.transactional_id!r} took over; "
              f"exiting ({exc})", file=sys.stderr, flush=True)
        return 3
    finally:
        consumer.close()
        producer.close()
    print(f"done: {processed} records processed", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True, help="host:port[,host:port...]")
    parser.add_argument("--input", required=True, help="topic to read (values are decimal integers)")
    parser.add_argument("--output", required=True, help="topic to write the doubled values to")
    parser.add_argument("--group", required=True, help="consumer group whose offsets the transactions commit")
    parser.add_argument("--transactional-id", required=True, help="keep it across restarts: it fences zombies")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000,
                        help="how soon the group hands the partitions of a crashed instance to the others")
    parser.add_argument("--batch-size", type=int, default=100, help="records per transaction, at most")
    parser.add_argument("--max-records", type=int, default=None, help="stop after this many records")
    parser.add_argument("--idle-exit-seconds", type=float, default=None,
                        help="stop when no record arrived for this long (default: run until killed)")
    parser.add_argument("--fail-after", type=int, default=None,
                        help="crash (os._exit) in the middle of a transaction after this many records")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
