"""Records fetched for `for record in consumer` and not handed out yet.

Invariant: the fetcher's positions are already past every record held here, so what the
application has seen is, per partition, the offset of its first held record; `rewind` gives
those offsets back (the facade seeks to them) whenever anything but iteration runs, so no
poll(), commit on close, pause or seek ever skips a record the loop did not hand out.
"""
from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping

from proto.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition


class IterationBuffer:
    def __init__(self) -> None:
        self._records: collections.deque[ConsumerRecord] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._records)

    def extend(self, fetched: Mapping[TopicPartition, list[ConsumerRecord]]) -> None:
        for records in fetched.values():
            self._records.extend(records)

    def pop(self, is_assigned: Callable[[TopicPartition], bool]) -> ConsumerRecord | None:
        """The next record of a partition still assigned, or None when none is left."""
        while self._records:
            record = self._records.popleft()
            if is_assigned(TopicPartition(record.topic, record.partition)):
                return record
        return None

    def position(self, tp: TopicPartition) -> int | None:
        """The offset of `tp`'s first record not handed out, if one is held."""
        for record in self._records:
            if record.partition == tp.partition and record.topic == tp.topic:
                return record.offset
        return None

    def consumed(self, positions: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, OffsetAndMetadata]:
        """`positions` (the fetcher's), moved back to the first held record of each partition."""
        seen: set[TopicPartition] = set()
        for record in self._records:
            tp = TopicPartition(record.topic, record.partition)
            if tp not in seen and tp in positions:
                seen.add(tp)
                positions[tp] = OffsetAndMetadata(record.offset)
        return positions

    def rewind(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Drop the held records of `partitions` (default: all); returns where each of them should resume."""
        chosen = None if partitions is None else set(partitions)
        first: dict[TopicPartition, int] = {}
        kept: collections.deque[ConsumerRecord] = collections.deque()
        for record in self._records:
            tp = TopicPartition(record.topic, record.partition)
            if chosen is None or tp in chosen:
                first.setdefault(tp, record.offset)
            else:
                kept.append(record)
        self._records = kept
        return first
