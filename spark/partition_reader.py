"""Task side: read one planned offset range with a Consumer and hand Spark Arrow record batches.

Runs in executor Python workers. The loop ends when the consumer's position reaches the range's
end, which also happens when the last offsets are control markers or aborted records (they are
skipped but still move the position). Only records with start <= offset < end are emitted, so a
range reads the same rows however often it is replayed.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from consumer import Consumer
from proto.errors import KafkaTimeoutError, OffsetOutOfRangeError
from proto.structs import ConsumerRecord
from spark.offsets import OffsetRange
from spark.read_options import EARLIEST, ReadOptions

#: how long one poll may wait; short, because the end of a range can be a marker that yields no record
_POLL_MS = 100
#: Spark's TimestampType in Arrow is microseconds; record timestamps are milliseconds
_US_PER_MS = 1000
#: Kafka's timestampType: 0 = CreateTime (txnsim has no LogAppendTime topics)
_CREATE_TIME = 0


@dataclass(slots=True)
class ArrowChunk:
    """Columns of up to a few thousand rows, in the Kafka schema's order."""

    schema: pa.Schema
    include_headers: bool
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    headers: list[list[dict[str, object]] | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, record: ConsumerRecord) -> None:
        self.keys.append(record.key)
        self.values.append(record.value)
        self.offsets.append(record.offset)
        self.timestamps.append(record.timestamp * _US_PER_MS)
        if self.include_headers:
            # as Spark's Kafka source: a record without headers has a NULL array, not an empty one
            self.headers.append([{"key": k, "value": v} for k, v in record.headers] or None)

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        n = len(self)
        types = {f.name: f.type for f in self.schema}
        columns = {
            "key": pa.array(self.keys, types["key"]),
            "value": pa.array(self.values, types["value"]),
            "topic": pa.array([topic] * n, types["topic"]),
            "partition": pa.array([partition] * n, types["partition"]),
            "offset": pa.array(self.offsets, types["offset"]),
            "timestamp": pa.array(self.timestamps, types["timestamp"]),
            "timestampType": pa.array([_CREATE_TIME] * n, types["timestampType"]),
        }
        if self.include_headers:
            columns["headers"] = pa.array(self.headers, types["headers"])
        return pa.RecordBatch.from_arrays([columns[f.name] for f in self.schema], schema=self.schema)


def read_range(options: ReadOptions, arrow_schema: pa.Schema, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of `offset_range` visible at the options' isolation level, as Arrow batches."""
    tp = offset_range.topic_partition
    reset = "none" if options.fail_on_data_loss else "earliest"
    with Consumer(bootstrap_servers=options.bootstrap_servers, client_id="txnsim-spark-reader",
                  isolation_level=options.isolation_level, auto_offset_reset=reset, enable_auto_commit=False,
                  max_poll_records=options.arrow_batch_rows) as consumer:
        consumer.assign([tp])
        if offset_range.start == EARLIEST:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, offset_range.start)
        first = offset_range.start if offset_range.start != EARLIEST else consumer.position(tp)
        chunk = ArrowChunk(arrow_schema, options.include_headers)
        progress = _Progress(offset_range, options.poll_timeout_ms / 1000)
        while (position := consumer.position(tp)) < offset_range.end:
            progress.check(position)
            try:
                polled = consumer.poll(timeout_ms=_POLL_MS)
            except OffsetOutOfRangeError as exc:
                raise OffsetOutOfRangeError(
                    f"[OFFSET_OUT_OF_RANGE] reading {offset_range}: offset {position} is outside the log now "
                    f"(deleted, or lost with a node, after the range was planned); set failOnDataLoss=false to "
                    f"skip to the log start") from exc
            for record in polled.get(tp, ()):
                # a reset (failOnDataLoss=false) can move below `first`; a fetch can run past `end`
                if first <= record.offset < offset_range.end:
                    chunk.add(record)
            if len(chunk) >= options.arrow_batch_rows:
                yield chunk.to_batch(tp.topic, tp.partition)
                chunk = ArrowChunk(arrow_schema, options.include_headers)
        if len(chunk):
            yield chunk.to_batch(tp.topic, tp.partition)


class _Progress:
    """Fails a task whose position stops moving, instead of letting it hang (a lost leader, a range
    planned past what the log holds)."""

    def __init__(self, offset_range: OffsetRange, timeout_s: float) -> None:
        self._range = offset_range
        self._timeout_s = timeout_s
        self._position: int | None = None
        self._since = time.monotonic()

    def check(self, position: int) -> None:
        now = time.monotonic()
        if position != self._position:
            self._position, self._since = position, now
        elif now - self._since > self._timeout_s:
            raise KafkaTimeoutError(
                f"reading {self._range} made no progress for {self._timeout_s:g} s at offset {position}; "
                f"is the partition's leader down? (raise kafkaConsumer.pollTimeoutMs to wait longer)")
