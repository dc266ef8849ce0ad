"""A demo partition: a log of transactional records and markers, read_committed below the LSO.

Invariant: a record is returned to read_committed only once its transaction's commit
marker is in the log, and never past the first record of an undecided transaction (the
LSO). The log is durable (written before the acknowledgement); a crash loses nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from txnsim.simulate.demo.messages import (
    Fetch,
    FetchResult,
    Marker,
    MarkerAck,
    Produce,
    ProduceAck,
)
from txnsim.simulate.network import Envelope, Network


@dataclass(slots=True)
class Record:
    offset: int
    value: int
    txn: str


@dataclass(slots=True)
class PartitionLog:
    records: list[Record] = field(default_factory=list)
    #: offset of each undecided transaction's first record
    open_txns: dict[str, int] = field(default_factory=dict)
    #: outcome of every transaction whose marker this partition wrote
    decided: dict[str, bool] = field(default_factory=dict)
    #: the offset of each (transaction, value) written, for idempotent retries and duplicates
    written: dict[tuple[str, int], int] = field(default_factory=dict)
    end_offset: int = 0

    @property
    def last_stable_offset(self) -> int:
        return min(self.open_txns.values(), default=self.end_offset)


class PartitionNode:
    """The actor of one partition; `dedup` and `lso` are the protections bugs switch off."""

    def __init__(self, name: str, index: int, network: Network, *, dedup: bool = True, lso: bool = True,
                 on_marker: Callable[[str, str, bool], None] = lambda node, txn, commit: None) -> None:
        self.name = name
        self.index = index
        self.network = network
        self.log = PartitionLog()
        self.dedup = dedup
        self.lso = lso
        #: told (node, transaction, commit) of each marker written, for the model's atomicity check
        self.on_marker = on_marker
        network.register(name, self.receive)

    def receive(self, env: Envelope) -> None:
        message = env.message
        if isinstance(message, Produce):
            self.network.reply(env, self._append(message))
        elif isinstance(message, Marker):
            self._mark(message)
            self.network.reply(env, MarkerAck(message.txn))
        elif isinstance(message, Fetch):
            self.network.reply(env, self._read(message.offset))

    def _append(self, produce: Produce) -> ProduceAck:
        log = self.log
        if produce.txn in log.decided:  # a late write of a finished transaction would hang the LSO
            return ProduceAck(-1, fenced=True)
        key = (produce.txn, produce.value)
        if self.dedup and key in log.written:
            return ProduceAck(log.written[key])
        offset = log.end_offset
        log.records.append(Record(offset, produce.value, produce.txn))
        log.written[key] = offset
        log.open_txns.setdefault(produce.txn, offset)
        log.end_offset += 1
        return ProduceAck(offset)

    def _mark(self, marker: Marker) -> None:
        log = self.log
        if marker.txn in log.decided:
            return  # a retried or duplicated marker
        log.decided[marker.txn] = marker.commit
        log.open_txns.pop(marker.txn, None)
        log.end_offset += 1  # the control record takes an offset, as in Kafka
        self.on_marker(self.name, marker.txn, marker.commit)

    def _read(self, offset: int) -> FetchResult:
        log = self.log
        limit = log.last_stable_offset if self.lso else log.end_offset
        visible = tuple((r.offset, r.value, r.txn) for r in log.records[self._index_of(offset):]
                        if r.offset < limit and (log.decided.get(r.txn) is True or not self.lso))
        return FetchResult(visible, max(offset, limit))

    def _index_of(self, offset: int) -> int:
        records = self.log.records
        lo, hi = 0, len(records)
        while lo < hi:
            mid = (lo + hi) // 2
            if records[mid].offset < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def committed_records(self) -> list[Record]:
        """What a fresh read_committed consumer reads from offset 0."""
        return [r for r in self.log.records
                if r.offset < self.log.last_stable_offset and self.log.decided.get(r.txn) is True]
