"""Kafka's read_committed filter over fetched batches (KAFKA-REFERENCE §6), shared by the consumer
and by nodes that deliver records themselves (RocketMQ's SimpleConsumer front door).

A fetch below the LSO comes with the aborted transactions it overlaps, as (producer id, first
offset). Before each batch, transactions starting at or before its last offset make their
producer "aborted"; that producer's ABORT marker ends it again; a transactional data batch of an
aborted producer is hidden, and so is every control batch.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable

from proto.records import ControlType, RecordBatch


class AbortedTransactions:
    def __init__(self, aborted_transactions: Iterable[tuple[int, int]] = ()) -> None:
        self._pending: list[tuple[int, int]] = [(first_offset, pid) for pid, first_offset in aborted_transactions]
        heapq.heapify(self._pending)
        self._aborted_producers: set[int] = set()

    def hides(self, batch: RecordBatch) -> bool:
        """Whether a read_committed reader skips `batch`; call it for every batch, in offset order."""
        header = batch.header
        while self._pending and self._pending[0][0] <= header.last_offset:
            self._aborted_producers.add(heapq.heappop(self._pending)[1])
        if header.is_control:
            if batch.control_record().type is ControlType.ABORT:
                self._aborted_producers.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborted_producers
