"""Consume-transform-produce, exactly once, with confluent-kafka (librdkafka) unchanged against txnsim's Kafka
listeners: read numbers from --input, write them doubled to --output.

The loop is Kafka's own exactly-once pattern, nothing txnsim-specific:
  * the consumer subscribes as a member of --group, reads with isolation.level=read_committed and never
    commits on its own (enable.auto.commit=false);
  * each batch is one transaction: the doubled records and the consumer's positions
    (send_offsets_to_transaction with consumer_group_metadata(), so a zombie member is fenced by the group's
    generation) commit together, or neither does;
  * the transactional id is stable across restarts: init_transactions() fences an older instance and aborts
    what it left open; a restart resumes from the committed offsets;
  * an abortable error aborts the transaction and rewinds the consumer to the committed offsets, so the
    aborted batch is read again; a fatal one (fenced) stops this instance.

Run it:  python examples/confluent_kafka_exactly_once.py --bootstrap-servers localhost:9092 \\
             --input numbers --output doubled --group doubler --transactional-id doubler-1
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition


def transform(value: bytes) -> bytes:
    """The "business logic": b"21" becomes b"42"."""
    return str(int(value) * 2).encode()


def rewind_to_committed(consumer: Consumer) -> None:
    """After an abort, seek every assigned partition back to its committed offset."""
    assignment = consumer.assignment()
    if not assignment:
        return
    for tp in consumer.committed(assignment, timeout=30):
        if tp.offset >= 0:
            consumer.seek(tp)
        else:  # nothing committed yet: from the beginning
            consumer.seek(TopicPartition(tp.topic, tp.partition, 0))


def copy_batch(consumer: Consumer, producer: Producer, messages: list[Message], output: str, crash_after: int | None) -> None:
    """One transaction: the transformed records and the consumer's positions commit together, or neither."""
    producer.begin_transaction()
    for sent, message in enumerate(messages, start=1):
        value = message.value()  # None for a tombstone, which stays one
        producer.produce(output, key=message.key(), value=None if value is None else transform(value))
        if sent == crash_after:
            producer.flush(30)  # the records reach the log, inside a transaction that never commits
            print(f"crashing on purpose in the middle of a transaction ({sent} records sent)", flush=True)
            os._exit(1)
    positions = consumer.position(consumer.assignment())
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)


def run(args: argparse.Namespace) -> int:
    consumer = Consumer({"bootstrap.servers": args.bootstrap_servers, "group.id": args.group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": args.session_timeout_ms})
    producer = Producer({"bootstrap.servers": args.bootstrap_servers, "transactional.id": args.transactional_id})
    producer.init_transactions(60)
    consumer.subscribe([args.input])
    processed, last_progress = 0, time.monotonic()
    try:
        while args.max_records is None or processed < args.max_records:
            messages = [m for m in consumer.consume(num_messages=args.batch_size, timeout=0.5) if m.error() is None]
            if not messages:
                if args.idle_exit_seconds is not None and time.monotonic() - last_progress > args.idle_exit_seconds:
                    break
                continue
            crash_after = None if args.fail_after is None else args.fail_after - processed
            try:
                copy_batch(consumer, producer, messages, args.output, crash_after)
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal() or not error.txn_requires_abort():
                    raise  # fenced by a newer instance, or a bug: stop
                print(f"aborting the transaction after {error.name()}: {error.str()}", flush=True)
                producer.abort_transaction(30)
                rewind_to_committed(consumer)
                continue
            processed += len(messages)
            last_progress = time.monotonic()
    finally:
        consumer.close()
    print(f"copied {processed} records exactly once", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers of the nodes")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--batch-size", type=int, default=100, help="records per transaction at most")
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    parser.add_argument("--max-records", type=int, default=None, help="stop after this many")
    parser.add_argument("--idle-exit-seconds", type=float, default=None, help="stop after this long without input")
    parser.add_argument("--fail-after", type=int, default=None,
                        help="crash (os._exit) after sending this many records, inside an open transaction")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
