"""The read side of the ``txnsim`` source: Spark's Kafka schema, a batch reader and a stream reader.

Planning (partitions, initialOffset, latestOffset) runs in a driver-side Python process and
fixes every range before a task starts; tasks (`read`) run in executor workers on a pickled
copy of the reader. Ranges end at the last stable offset under read_committed, so no batch
ever holds a record whose transaction is undecided, and replaying (start, end) reads the same rows.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from proto.errors import KafkaConfigurationError
from proto.structs import TopicPartition
from spark.metadata import ClusterView
from spark.offsets import (
    JsonOffsets,
    OffsetRange,
    cap_at,
    check_progress,
    check_start,
    offsets_from_json,
    offsets_to_json,
    plan_batch,
    plan_ranges,
    rate_limit,
    resolve_offsets,
)
from spark.partition_reader import read_range
from spark.read_options import ReadOptions

__all__ = ["BatchReader", "OffsetRangePartition", "StreamReader", "kafka_schema"]

log = logging.getLogger(__name__)

_HEADERS = StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                        StructField("value", BinaryType())])))
_KAFKA_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]


def kafka_schema(options: Mapping[str, Any]) -> StructType:
    """Spark's Kafka source schema; `headers` only with includeHeaders=true.

    Spark asks for the schema at load() (for reads only), so the options are validated here too:
    a bad one fails there, as with Spark's Kafka source, not when the first query plans.
    """
    fields = list(_KAFKA_FIELDS)
    if ReadOptions.parse(options, streaming=None).include_headers:
        fields.append(_HEADERS)
    return StructType(fields)


@dataclass(frozen=True)
class OffsetRangePartition(InputPartition):
    """One Spark task: one partition's fixed offset range (pickled to the executor)."""

    offset_range: OffsetRange


class _RangeReading:
    """What both readers share: validated options, the schema check, and the task-side read."""

    def __init__(self, options: Mapping[str, Any], schema: StructType, *, streaming: bool) -> None:
        self._options = ReadOptions.parse(options, streaming=streaming)
        expected = kafka_schema(options)
        if _shape(schema) != _shape(expected):
            raise KafkaConfigurationError(
                f"the txnsim source has a fixed schema ({expected.simpleString()}); remove .schema(...), "
                f"got {schema.simpleString()}")
        self._schema = schema

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema  # executor side only; needs pyarrow

        if not isinstance(partition, OffsetRangePartition):
            return iter(())  # pyspark turns an empty partitions() list into one InputPartition(None)
        return read_range(self._options, to_arrow_schema(self._schema, timezone="UTC"), partition.offset_range)


class BatchReader(_RangeReading, DataSourceReader):
    """spark.read: startingOffsets (default earliest) to endingOffsets (default latest), fixed at planning."""

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        super().__init__(options, schema, streaming=False)

    def partitions(self) -> list[OffsetRangePartition]:
        options = self._options
        with ClusterView(options) as view:
            bounds = view.bounds(view.partitions(missing_ok=False))
        assert options.ending_offsets is not None
        ranges = plan_batch(options.starting_offsets, options.ending_offsets, bounds,
                            fail_on_data_loss=options.fail_on_data_loss)
        log.info("batch read of %s planned: %s", options.subscription.describe(), [str(r) for r in ranges])
        return [OffsetRangePartition(r) for r in ranges]


class StreamReader(_RangeReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: offsets {"topic": {"0": next_offset}}, each micro-batch ending at the LSO.

    startingOffsets defaults to latest; partitions that appear later start at earliest.
    maxOffsetsPerTrigger caps a micro-batch (shared across partitions by what each has available).
    """

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        super().__init__(options, schema, streaming=True)
        #: Trigger.AvailableNow: the readable ends when the query started; never read past them
        self._target: dict[TopicPartition, int] | None = None
        #: readable ends seen by the last latestOffset, before any read limit (reportLatestOffset)
        self._latest_seen: JsonOffsets | None = None

    def initialOffset(self) -> JsonOffsets:
        options = self._options
        with ClusterView(options) as view:
            bounds = view.bounds(view.partitions(missing_ok=True))
        starts = resolve_offsets(options.starting_offsets, bounds)
        return offsets_to_json({tp: check_start(tp, offset, bounds[tp], fail_on_data_loss=options.fail_on_data_loss,
                                                what="startingOffsets")
                                for tp, offset in starts.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self._options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        with ClusterView(self._options) as view:
            bounds = view.bounds(view.partitions(missing_ok=True))
        self._target = {tp: b.end_offset for tp, b in bounds.items()}
        log.info("available-now: reading up to %s", offsets_to_json(self._target))

    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        options = self._options
        begin = offsets_from_json(start)
        with ClusterView(options) as view:
            bounds = view.bounds(view.partitions(missing_ok=True))
        latest = {tp: b.end_offset for tp, b in bounds.items()}
        if self._target is not None:
            latest = cap_at(latest, self._target)
        check_progress(begin, latest, fail_on_data_loss=options.fail_on_data_loss)
        self._latest_seen = offsets_to_json({**begin, **latest})
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, begin, latest, {tp: b.log_start_offset for tp, b in bounds.items()})
        # a partition missing from this metadata answer keeps its offset rather than being forgotten
        return offsets_to_json({**begin, **latest})

    def reportLatestOffset(self) -> JsonOffsets | None:
        return self._latest_seen

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> list[OffsetRangePartition]:
        return [OffsetRangePartition(r) for r in plan_ranges(offsets_from_json(start), offsets_from_json(end))]

    def commit(self, end: JsonOffsets) -> None:
        """Nothing to do: Spark's checkpoint is the source of truth for progress (and this call lags)."""


def _shape(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]
