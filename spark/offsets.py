"""Offset arithmetic of the read side: JSON offsets, resolving options, planning ranges, rate limits.

Pure functions, no I/O, so they behave the same in every Spark process and replay identically.
Invariant: a planned range [start, end) never ends past the readable end it was planned
against (the last stable offset under read_committed), so a batch holds only decided records.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proto.errors import KafkaConfigurationError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from proto.structs import TopicPartition
from spark.read_options import EARLIEST, LATEST, OffsetSpec

log = logging.getLogger(__name__)

#: Spark's offsets log holds these: {"topic": {"0": 23}}, the next offset to read per partition
JsonOffsets = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """What a partition offers a reader: its log start and its readable end (LSO or high watermark)."""

    log_start_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one partition; `start` EARLIEST means the log start, resolved by the task."""

    topic_partition: TopicPartition
    start: int
    end: int

    def __str__(self) -> str:
        start = "earliest" if self.start == EARLIEST else str(self.start)
        return f"{self.topic_partition} [{start}, {self.end})"


# ---------------------------------------------------------------- JSON

def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> JsonOffsets:
    """Canonical JSON form: topics sorted, partitions in numeric order, so equal offsets compare equal."""
    out: JsonOffsets = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json(offsets: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """Inverse of offsets_to_json; a malformed offset (e.g. a hand-edited checkpoint) raises naming it."""
    out: dict[TopicPartition, int] = {}
    for topic, by_partition in offsets.items():
        if not isinstance(by_partition, Mapping):
            raise KafkaConfigurationError(f"offsets {dict(offsets)!r}: topic {topic!r} must map partitions to offsets")
        for partition, offset in by_partition.items():
            if not str(partition).isdigit() or isinstance(offset, bool) or not isinstance(offset, int):
                raise KafkaConfigurationError(
                    f"offsets {dict(offsets)!r}: {topic!r} partition {partition!r} -> {offset!r} is not "
                    f"a partition number with an integer offset")
            out[TopicPartition(topic, int(partition))] = offset
    return out


# ---------------------------------------------------------------- resolving options

def resolve_offsets(spec: OffsetSpec, bounds: Mapping[TopicPartition, PartitionBounds]) -> dict[TopicPartition, int]:
    """Concrete offsets from "earliest"/"latest"/JSON for exactly the partitions in `bounds`."""
    missing = sorted(str(tp) for tp in bounds if spec.offset_for(tp) is None)
    if missing:
        raise KafkaConfigurationError(
            f"option '{spec.option}' gives no offset for {missing}; JSON offsets must name every partition read "
            f"(use -2 for earliest, -1 for latest)")
    unknown = sorted(str(tp) for tp, _ in spec.per_partition if tp not in bounds)
    if unknown:
        raise UnknownTopicOrPartitionError(
            f"[UNKNOWN_TOPIC_OR_PARTITION] option '{spec.option}' names partitions that do not exist: {unknown}")
    out = {}
    for tp, b in bounds.items():
        offset = spec.offset_for(tp)
        assert offset is not None
        out[tp] = b.log_start_offset if offset == EARLIEST else b.end_offset if offset == LATEST else offset
    return out


def check_start(tp: TopicPartition, start: int, bounds: PartitionBounds, *, fail_on_data_loss: bool,
                what: str) -> int:
    """`start` if the log still holds it; otherwise OFFSET_OUT_OF_RANGE, or with failOnDataLoss=false
    the nearest offset that it does hold (records below the log start are gone for good)."""
    if bounds.log_start_offset <= start <= bounds.end_offset:
        return start
    if start < bounds.log_start_offset:
        problem = (f"{what} {start} of {tp} is below the log start offset {bounds.log_start_offset}: "
                   f"offsets {start}..{bounds.log_start_offset - 1} were deleted")
        nearest = bounds.log_start_offset
    else:
        problem = f"{what} {start} of {tp} is beyond its readable end {bounds.end_offset}"
        nearest = bounds.end_offset
    if fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"[OFFSET_OUT_OF_RANGE] {problem}; choose an offset in [{bounds.log_start_offset}, "
            f"{bounds.end_offset}], or set failOnDataLoss=false to continue from {nearest}")
    log.warning("%s; failOnDataLoss=false: continuing from %d", problem, nearest)
    return nearest


def plan_batch(starting: OffsetSpec, ending: OffsetSpec, bounds: Mapping[TopicPartition, PartitionBounds], *,
               fail_on_data_loss: bool) -> list[OffsetRange]:
    """One non-empty range per partition for a batch read, never past a partition's readable end."""
    starts = resolve_offsets(starting, bounds)
    ends = resolve_offsets(ending, bounds)
    ranges = []
    for tp in sorted(bounds):
        b = bounds[tp]
        if ends[tp] > b.end_offset:
            raise OffsetOutOfRangeError(
                f"[OFFSET_OUT_OF_RANGE] endingOffsets asks for {tp} up to {ends[tp]}, but only offsets below "
                f"{b.end_offset} are readable now (records at and after the last stable offset are undecided "
                f"under read_committed); lower it or use 'latest'")
        start = check_start(tp, starts[tp], b, fail_on_data_loss=fail_on_data_loss, what="startingOffsets")
        if start > ends[tp]:
            raise KafkaConfigurationError(
                f"startingOffsets {start} of {tp} is after its endingOffsets {ends[tp]}; the start must not be "
                f"after the end")
        if ends[tp] > start:
            ranges.append(OffsetRange(tp, start, ends[tp]))
    return ranges


# ---------------------------------------------------------------- streaming

def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """The ranges of a micro-batch, a function of (start, end) only, because a restarted query replays
    a batch from its logged offsets. A partition missing from `start` is new: it is read from the
    earliest offset. start == end plans nothing."""
    ranges = []
    for tp in sorted(end):
        first = start.get(tp, EARLIEST)
        if end[tp] > max(first, 0):
            ranges.append(OffsetRange(tp, first, end[tp]))
    return ranges


def check_progress(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], *,
                   fail_on_data_loss: bool) -> None:
    """A readable end below where the query already is means records it counted on are gone
    (a recreated topic, or records lost with a node): data loss, not a reason to wait."""
    for tp in sorted(set(start) & set(latest)):
        if latest[tp] < start[tp]:
            problem = (f"the readable end of {tp} went back from {start[tp]} to {latest[tp]} "
                       f"(the topic was recreated, or records were lost)")
            if fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"[OFFSET_OUT_OF_RANGE] {problem}; set failOnDataLoss=false to continue from {latest[tp]}")
            log.warning("%s; failOnDataLoss=false: continuing from %d", problem, latest[tp])


def cap_at(latest: Mapping[TopicPartition, int], target: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """For Trigger.AvailableNow: nothing past the target, and no partition that appeared after it."""
    return {tp: min(offset, target[tp]) for tp, offset in latest.items() if tp in target}


def rate_limit(max_offsets: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               log_start: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Cap `latest` so about `max_offsets` offsets are read, shared in proportion to what each partition
    has available (Spark's Kafka source: a share below 1 rounds up so no partition starves, others down).
    Offsets, not rows: control markers and aborted records count too."""
    def begin(tp: TopicPartition) -> int:
        return start.get(tp, log_start.get(tp, 0))

    sizes = {tp: latest[tp] - begin(tp) for tp in latest if latest[tp] - begin(tp) > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    capped = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            capped[tp] = end
            continue
        share = max_offsets * size
        count = 1 if share < total else share // total  # exact integer form of ceil(<1) / floor(>=1)
        capped[tp] = min(end, begin(tp) + count)
    return capped

