"""`txnsim produce` (kafka-console-producer: each stdin line a record, sent as it is typed) and `txnsim consume`
(kafka-console-consumer: either isolation level, a partition and offset, a group, or following the topic).

Both take Kafka's console `--property NAME=VALUE` settings (parse.key, key.separator, parse.headers,
print.key, print.headers, print.timestamp ...) besides their own flags.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from proto.errors import IllegalArgumentError, InvalidRecordError, KafkaTimeoutError, UnknownTopicOrPartitionError
from proto.structs import ConsumerRecord, TopicPartition
from txnsim.admin import Admin
from txnsim.cli.common import (
    add_cluster_args,
    bootstrap_servers,
    console,
    exits_cleanly,
    non_negative_int,
    partition_arg,
    positive_int,
    print_data,
    stop_on_interrupt,
)

#: kafka-console-producer's and -consumer's defaults
PRODUCER_PROPERTIES = {"parse.key": "false", "key.separator": "\t", "parse.headers": "false",
                       "headers.delimiter": "\t", "headers.separator": ",", "headers.key.separator": ":",
                       "null.marker": ""}
CONSUMER_PROPERTIES = {"print.key": "false", "print.value": "true", "print.headers": "false",
                       "print.timestamp": "false", "print.partition": "true", "print.offset": "true",
                       "key.separator": "\t", "headers.separator": ",", "line.separator": "\n"}

#: how long `consume --group` waits for the group to assign it partitions (a first join waits the group's initial
#: rebalance delay, 3 s by default, and longer when other members are slow to rejoin)
GROUP_JOIN_WAIT_S = 60.0


def _property(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"[INVALID_CONFIG] --property takes NAME=VALUE, not {text!r}")
    return name, value.encode().decode("unicode_escape")  # key.separator=\t means a tab, as in Kafka's shell usage


def _header(text: str) -> tuple[str, bytes]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"[INVALID_RECORD] --header takes NAME=VALUE, not {text!r}")
    return name, value.encode()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    produce = sub.add_parser("produce", help="send each line of stdin to TOPIC as it is typed (in one transaction "
                                             "with --transactional-id)")
    produce.add_argument("topic")
    produce.add_argument("--transactional-id", help="without it, the lines are sent idempotently, no transaction")
    end = produce.add_mutually_exclusive_group()
    end.add_argument("--abort", action="store_true", help="abort the transaction at the end instead of committing")
    end.add_argument("--leave-open", action="store_true",
                     help="end neither way: exit with the transaction open (a hanging transaction on purpose; the "
                          "coordinator aborts it after --transaction-timeout-ms)")
    produce.add_argument("--transaction-timeout-ms", type=positive_int, default=60_000,
                         help="how long the coordinator lets the transaction stay open (default 60000)")
    produce.add_argument("--key-separator", help="split each line into key and value at this string "
                                                 "(as --property parse.key=true --property key.separator=...)")
    produce.add_argument("--header", type=_header, action="append", default=[], metavar="NAME=VALUE",
                         help="a header on every record (repeatable)")
    produce.add_argument("--partition", type=partition_arg, help="send every record to this partition")
    produce.add_argument("--property", type=_property, action="append", default=[], metavar="NAME=VALUE",
                         help="kafka-console-producer's: parse.key, key.separator, parse.headers, "
                              "headers.delimiter, headers.separator, headers.key.separator")
    add_cluster_args(produce)
    produce.set_defaults(func=produce_lines)
    consume = sub.add_parser("consume", help="print the records of TOPIC")
    consume.add_argument("topic")
    consume.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"],
                         default="read_committed")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=partition_arg, help="read only this partition")
    consume.add_argument("--offset", help="with --partition: start at this offset, or earliest / latest")
    consume.add_argument("--group", help="consumer group (subscribes, and commits its offsets at the end)")
    consume.add_argument("--max-messages", type=positive_int, default=None)
    consume.add_argument("--timeout-ms", type=non_negative_int, default=2000,
                         help="stop after this long without records (ignored with --follow)")
    consume.add_argument("--follow", action="store_true", help="keep waiting for new records until Ctrl-C")
    consume.add_argument("--print-key", action="store_true", help="print the key of every record (a null key as "
                                                                 "null)")
    consume.add_argument("--print-headers", action="store_true", help="print NAME:VALUE,... headers")
    consume.add_argument("--print-timestamp", action="store_true", help="print CreateTime:MS")
    consume.add_argument("--print-txn-status", action="store_true",
                         help="print whether the record's transaction committed, aborted or is still open "
                              "(useful with read_uncommitted)")
    consume.add_argument("--json", action="store_true", help="one JSON object per record (every field)")
    consume.add_argument("--property", type=_property, action="append", default=[], metavar="NAME=VALUE",
                         help="kafka-console-consumer's: print.key, print.headers, print.timestamp, "
                              "print.partition, print.offset, key.separator")
    add_cluster_args(consume)
    consume.set_defaults(func=consume_records)


# ------------------------------------------------------------ produce


@dataclass(frozen=True)
class LineParser:
    """kafka-console-producer's LineMessageReader: [headers<delimiter>][key<separator>]value."""

    parse_key: bool
    key_separator: bytes
    parse_headers: bool
    headers_delimiter: bytes
    headers_separator: bytes
    header_key_separator: bytes

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LineParser:
        props = dict(PRODUCER_PROPERTIES)
        props.update(args.property)
        if args.key_separator:
            props["parse.key"], props["key.separator"] = "true", args.key_separator
        for name in props:
            if name not in PRODUCER_PROPERTIES:
                raise IllegalArgumentError(f"[INVALID_CONFIG] unknown --property {name!r}; known: "
                                           f"{', '.join(PRODUCER_PROPERTIES)}")
        return cls(props["parse.key"] == "true", props["key.separator"].encode(), props["parse.headers"] == "true",
                   props["headers.delimiter"].encode(), props["headers.separator"].encode(),
                   props["headers.key.separator"].encode())

    def parse(self, line: bytes, number: int) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
        headers: list[tuple[str, bytes]] = []
        if self.parse_headers:
            text, sep, line = line.partition(self.headers_delimiter)
            if not sep:
                raise InvalidRecordError(f"[INVALID_RECORD] line {number}: no headers delimiter "
                                         f"{self.headers_delimiter!r} (parse.headers=true)")
            for item in filter(None, text.split(self.headers_separator)):
                name, _, value = item.partition(self.header_key_separator)
                headers.append((name.decode(errors="replace"), value))
        key = None
        if self.parse_key and self.key_separator in line:
            key, line = line.split(self.key_separator, 1)
        return key, line, headers


def _stdin_lines() -> Iterator[bytes]:
    """Each line as soon as it is complete (typed, or written by the other end of a pipe)."""
    for line in iter(sys.stdin.buffer.readline, b""):
        yield line.rstrip(b"\r\n")


@exits_cleanly
def produce_lines(args: argparse.Namespace) -> int:
    from producer import Producer
    if (args.abort or args.leave_open) and not args.transactional_id:
        raise SystemExit("error: --abort and --leave-open need --transactional-id (without one the lines are "
                         "sent idempotently)")
    parser = LineParser.from_args(args)
    servers = bootstrap_servers(args)
    timeout_ms = args.request_timeout_ms
    with Admin(servers, request_timeout_ms=timeout_ms) as admin:  # a typo is an error before anything is typed
        count = admin.list_topics().get(args.topic)
    if count is None:
        raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {args.topic!r} does not exist")
    if args.partition is not None and args.partition >= count:
        raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] {args.topic!r} has partitions "
                                           f"0..{count - 1}, not {args.partition}")
    p = Producer(bootstrap_servers=servers, transactional_id=args.transactional_id, request_timeout_ms=timeout_ms,
                 max_block_ms=timeout_ms, delivery_timeout_ms=timeout_ms + 1_000,
                 transaction_timeout_ms=args.transaction_timeout_ms)
    sent = 0
    try:
        if args.transactional_id:
            p.init_transactions()
            p.begin_transaction()
        for number, line in enumerate(_stdin_lines(), 1):
            key, value, headers = parser.parse(line, number)
            future = p.send(args.topic, value=value, key=key, headers=[*args.header, *headers],
                            partition=args.partition)
            # each line is on the log before the next is read, as kafka-console-producer does (linger 0): a
            # read_uncommitted consumer sees it at once, a read_committed one when the transaction commits
            p.flush()
            future.get(timeout=timeout_ms / 1000)  # a failed send raises its KafkaError here
            sent += 1
        if args.leave_open:
            quiet = logging.getLogger("producer.producer")
            level, quiet.level = quiet.level, logging.ERROR  # its sender has nothing left; no warning about that
            try:
                p.close(timeout=0)  # close without the abort that closing a producer does
            finally:
                quiet.setLevel(level)
            console.print(f"left the transaction of {args.transactional_id} open with {sent} record(s) in "
                          f"{args.topic}; its coordinator aborts it after {args.transaction_timeout_ms} ms")
            return 0
        if args.transactional_id:
            if args.abort:
                p.abort_transaction()
            else:
                p.commit_transaction()
    except KeyboardInterrupt:
        p.close()  # aborts an open transaction
        console.print(f"interrupted: {'aborted' if args.transactional_id else 'sent'} {sent} record(s)")
        return 130
    finally:
        p.close()
    outcome = "aborted" if args.abort else "committed" if args.transactional_id else "sent"
    console.print(f"{outcome} {sent} record(s) to {args.topic}")
    return 0


# ------------------------------------------------------------ consume


@exits_cleanly
def consume_records(args: argparse.Namespace) -> int:
    from client.cluster import ClusterClient
    from consumer import Consumer
    from txnsim.cli.txn_status import TransactionStatuses
    servers = bootstrap_servers(args)
    timeout_ms = args.request_timeout_ms
    printer = RecordPrinter.from_args(args)
    if args.offset is not None and args.partition is None:
        raise IllegalArgumentError("[INVALID_REQUEST] --offset needs --partition (as kafka-console-consumer)")
    if args.group and args.partition is not None:
        raise IllegalArgumentError("[INVALID_REQUEST] --group subscribes to every partition; leave out --partition")
    start = _start_offset(args.offset)
    # The consumer retries an unreachable node or unknown topic quietly inside poll();
    # ask once up front so a typo or a dead cluster is an error, not an empty result.
    with Admin(servers, request_timeout_ms=timeout_ms) as admin:
        count = admin.list_topics().get(args.topic)
    if count is None:
        raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {args.topic!r} does not exist")
    if args.partition is not None and args.partition >= count:
        raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] {args.topic!r} has partitions "
                                           f"0..{count - 1}, not {args.partition}")
    statuses = TransactionStatuses(ClusterClient(servers, request_timeout_ms=timeout_ms), timeout_ms / 1000) \
        if printer.txn_status else None
    reset = "earliest" if args.from_beginning or start == "earliest" else "latest"
    with Consumer(bootstrap_servers=servers, group_id=args.group, isolation_level=args.isolation_level,
                  auto_offset_reset=reset, enable_auto_commit=False,
                  request_timeout_ms=max(timeout_ms, 1_000)) as c:
        if args.group:
            c.subscribe([args.topic])
        else:
            partitions = [args.partition] if args.partition is not None else range(count)
            c.assign([TopicPartition(args.topic, p) for p in partitions])
            if isinstance(start, int):
                c.seek(TopicPartition(args.topic, args.partition), start)
        seen = 0
        idle_since = joining_since = time.monotonic()
        if args.follow:
            stop_on_interrupt()  # its only way to end, also when a script started it in the background
        try:
            while args.max_messages is None or seen < args.max_messages:
                remaining = None if args.max_messages is None else args.max_messages - seen
                batch = c.poll(timeout_ms=200, max_records=remaining)  # never past what will be printed
                records = [r for rs in batch.values() for r in rs]
                if not records:
                    if args.group and not c.assignment():  # still joining: the idle timer starts once assigned
                        if time.monotonic() - joining_since > GROUP_JOIN_WAIT_S:
                            raise KafkaTimeoutError(
                                f"[REQUEST_TIMED_OUT] group {args.group!r} gave this consumer no partitions of "
                                f"{args.topic!r} within {GROUP_JOIN_WAIT_S:g} s (is every partition taken by "
                                "other members?)")
                        idle_since = time.monotonic()
                        continue
                    if not args.follow and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                        break
                    continue
                idle_since = time.monotonic()
                for r in sorted(records, key=lambda r: (r.partition, r.offset)):
                    status = statuses.status(TopicPartition(r.topic, r.partition), r.offset) if statuses else None
                    print_data(printer.format(r, status))
                    seen += 1
                sys.stdout.flush()  # a reader of the pipe sees each batch as it arrives
        except KeyboardInterrupt:
            pass  # --follow ends here; the group still commits what was printed
        if args.group:
            c.commit()
    return 0


def _start_offset(text: str | None) -> int | str | None:
    if text is None or text in ("earliest", "latest"):
        return text
    try:
        offset = int(text)
    except ValueError:
        raise IllegalArgumentError(f"[INVALID_REQUEST] --offset takes a number, earliest or latest, not {text!r}") \
            from None
    if offset < 0:
        raise IllegalArgumentError(f"[INVALID_REQUEST] --offset {offset} is negative")
    return offset


@dataclass(frozen=True)
class RecordPrinter:
    """kafka-console-consumer's DefaultMessageFormatter, in txnsim's layout: PARTITION:OFFSET first, then the
    fields asked for, tab-separated, the value last."""

    key: bool
    headers: bool
    timestamp: bool
    txn_status: bool
    as_json: bool
    key_separator: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RecordPrinter:
        props = dict(CONSUMER_PROPERTIES)
        props.update(args.property)
        for name in props:
            if name not in CONSUMER_PROPERTIES:
                raise IllegalArgumentError(f"[INVALID_CONFIG] unknown --property {name!r}; known: "
                                           f"{', '.join(CONSUMER_PROPERTIES)}")
        return cls(args.print_key or props["print.key"] == "true", args.print_headers or
                   props["print.headers"] == "true", args.print_timestamp or props["print.timestamp"] == "true",
                   args.print_txn_status, args.json, props["key.separator"])

    def format(self, r: ConsumerRecord, status: str | None) -> str:
        if self.as_json:
            return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                               "timestamp": r.timestamp, "key": _text(r.key), "value": _text(r.value),
                               "headers": {k: _text(v) for k, v in r.headers}, **(
                                   {"transaction": status} if status is not None else {})})
        fields = [f"{r.partition}:{r.offset}"]
        if self.timestamp:
            fields.append(f"CreateTime:{r.timestamp}")
        if status is not None:
            fields.append(status)
        if self.headers:
            fields.append(",".join(f"{k}:{_text(v)}" for k, v in r.headers) or "NO_HEADERS")
        value = _text(r.value) or ""
        if self.key or r.key is not None:  # txnsim's habit: a key is shown whenever there is one
            value = ("null" if r.key is None else _text(r.key) or "") + self.key_separator + value
        return "\t".join([*fields, value])


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode(errors="replace")
