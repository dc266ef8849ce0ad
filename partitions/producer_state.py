"""Per-producer idempotence and transaction state of one partition: pure logic, no I/O.

Owns the broker-side rules of KAFKA-REFERENCE §7 (epochs, sequences, the last five batches kept
for duplicate detection) and which producers have a transaction open, including transactions
whose marker is written but not yet below the high watermark: both pin the LSO. An append is
planned against staged copies and installed only after its bytes are written, so a rejected
request leaves the table exactly as it was.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from partitions.model import AppendOrigin, OpenTransaction, ProducerSnapshot
from proto.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionAbortableError,
    TransactionCoordinatorFencedError,
)
from proto.records import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader

SEQUENCE_MODULUS = 1 << 31
#: batches remembered per producer; matches max.in.flight.requests.per.connection <= 5
RETAINED_BATCHES = 5


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Kafka's inSequence: next follows last, wrapping from 2^31-1 to 0 (NO_SEQUENCE is followed by 0)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == SEQUENCE_MODULUS - 1)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What the table remembers of a written batch: enough to answer its retry with its offsets."""

    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One producer id's state on this partition (Kafka's ProducerStateEntry), as an immutable value."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: tuple[BatchMetadata, ...] = ()
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first_offset: int | None = None

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                return batch
        return None

    def at_epoch(self, epoch: int) -> ProducerEntry:
        """The entry at `epoch`; a new epoch forgets the retained batches (sequences restart at 0)."""
        if epoch == self.producer_epoch:
            return self
        return replace(self, producer_epoch=epoch, batches=())

    def with_batch(self, header: BatchHeader, base_offset: int, timestamp: int) -> ProducerEntry:
        """The entry after writing `header`'s batch at `base_offset` (opens a transaction if needed)."""
        entry = self.at_epoch(header.producer_epoch)
        metadata = BatchMetadata(header.base_sequence, header.last_sequence, base_offset,
                                 base_offset + header.last_offset_delta, header.max_timestamp)
        first = entry.txn_first_offset
        if header.is_transactional and first is None:
            first = base_offset
        return replace(entry, batches=(entry.batches + (metadata,))[-RETAINED_BATCHES:],
                       last_timestamp=timestamp, txn_first_offset=first)

    def snapshot(self) -> ProducerSnapshot:
        return ProducerSnapshot(self.producer_id, self.producer_epoch, self.last_sequence, self.last_timestamp,
                                self.coordinator_epoch,
                                -1 if self.txn_first_offset is None else self.txn_first_offset)


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """The outcome of validating one produce request against the table."""

    #: entries to install once the batches are written
    updates: dict[int, ProducerEntry]
    #: the retained batches matched when every batch of the request was already written
    duplicates: tuple[BatchMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by a marker on this partition."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    marker_offset: int
    committed: bool
    #: the LSO right after completion: the first offset of the earliest other open txn, else marker + 1
    last_stable_offset: int


def check_epoch(entry: ProducerEntry, epoch: int) -> None:
    if entry.producer_epoch != NO_PRODUCER_EPOCH and epoch < entry.producer_epoch:
        raise InvalidProducerEpochError(
            f"producer {entry.producer_id} wrote with epoch {epoch}, but this partition has seen epoch "
            f"{entry.producer_epoch}; a newer producer instance or transaction has fenced it")


def check_sequence(entry: ProducerEntry, header: BatchHeader) -> None:
    """§7: a new epoch starts at 0; the same epoch continues at last + 1; no state accepts anything."""
    if entry.producer_epoch == NO_PRODUCER_EPOCH:
        return
    pid, epoch, first = entry.producer_id, header.producer_epoch, header.base_sequence
    if epoch != entry.producer_epoch:
        if first != 0:
            raise OutOfOrderSequenceError(
                f"producer {pid} started epoch {epoch} at sequence {first}; a new epoch must start at sequence 0")
    elif not in_sequence(entry.last_sequence, first):
        expected = (entry.last_sequence + 1) % SEQUENCE_MODULUS
        raise OutOfOrderSequenceError(
            f"producer {pid} (epoch {epoch}) sent sequence {first}, expected {expected} on this partition")


def check_transaction(entry: ProducerEntry, header: BatchHeader, origin: AppendOrigin,
                      verified_producer_ids: frozenset[int]) -> None:
    pid = entry.producer_id
    if not header.is_transactional:
        if entry.txn_first_offset is not None:
            raise InvalidTxnStateError(
                f"producer {pid} sent a non-transactional batch while its transaction that started at "
                f"offset {entry.txn_first_offset} is open on this partition")
    elif (entry.txn_first_offset is None and origin is AppendOrigin.CLIENT
          and pid not in verified_producer_ids):
        raise TransactionAbortableError(
            f"producer {pid} (epoch {header.producer_epoch}) has no open transaction on this partition and "
            "the coordinator did not confirm it was added; call AddPartitionsToTxn first, then abort and retry")


class ProducerStateTable:
    """Every producer id seen on one partition, its open transaction, and completions not yet durable."""

    def __init__(self, entries: Iterable[ProducerEntry] = ()) -> None:
        self._entries: dict[int, ProducerEntry] = {}
        #: producer id -> first offset of its open transaction
        self._open: dict[int, int] = {}
        #: transactions whose marker is written but not yet below the high watermark, in marker order
        self._unreplicated: deque[CompletedTxn] = deque()
        for entry in entries:  # a snapshot seeds the table here; the log replays the rest
            self._install(entry)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def _install(self, entry: ProducerEntry) -> None:
        self._entries[entry.producer_id] = entry
        if entry.txn_first_offset is None:
            self._open.pop(entry.producer_id, None)
        else:
            self._open[entry.producer_id] = entry.txn_first_offset

    # ------------------------------------------------------------ data batches

    def plan_append(self, placed: Sequence[tuple[BatchHeader, int]], *, origin: AppendOrigin,
                    verified_producer_ids: frozenset[int], timestamp_ms: int | None) -> AppendPlan:
        """Validate batches at their tentative base offsets; raise the first error, change nothing."""
        staged: dict[int, ProducerEntry] = {}
        duplicates: list[BatchMetadata] = []
        new_batches = 0
        for header, base_offset in placed:
            pid = header.producer_id
            if pid < 0:
                new_batches += 1
                continue
            stored = self._entries.get(pid)
            if origin is AppendOrigin.CLIENT and stored is not None and pid not in staged:
                duplicate = stored.find_duplicate(header)
                if duplicate is not None:
                    duplicates.append(duplicate)
                    continue
            new_batches += 1
            entry = staged.get(pid) or stored or ProducerEntry(pid)
            check_epoch(entry, header.producer_epoch)
            check_transaction(entry, header, origin, verified_producer_ids)
            if origin is AppendOrigin.CLIENT:
                check_sequence(entry, header)
            timestamp = header.max_timestamp if timestamp_ms is None else timestamp_ms
            staged[pid] = entry.with_batch(header, base_offset, timestamp)
        if duplicates and new_batches:
            raise OutOfOrderSequenceError(
                f"the request mixes {len(duplicates)} already-written batch(es) with {new_batches} new one(s); "
                "resend only the batches that were not acknowledged")
        return AppendPlan(staged, tuple(duplicates))

    def apply(self, plan: AppendPlan) -> None:
        for entry in plan.updates.values():
            self._install(entry)

    def needs_verification(self, headers: Iterable[BatchHeader]) -> list[tuple[int, int]]:
        """(pid, epoch) of transactional batches whose producer has no open transaction here, or whose
        open transaction is of an older epoch: under transactions V2 every end bumps the epoch, so that is
        the next transaction's first write, arriving before the previous one's marker (Kafka compares the
        epoch too). Appended now it would join the previous transaction; the coordinator answers only
        once that transaction's markers are written.

        A batch whose epoch is below the one stored for its producer is INVALID_PRODUCER_EPOCH at
        once, as in Kafka, before anyone asks the coordinator (a fenced zombie's send)."""
        wanted: dict[int, int] = {}
        for header in headers:
            if header.is_transactional and not header.is_control and header.producer_id >= 0:
                pid = header.producer_id
                stored = self._entries.get(pid)
                if stored is not None:
                    check_epoch(stored, header.producer_epoch)
                in_open_txn = pid in self._open and (stored is None or stored.producer_epoch == header.producer_epoch)
                if not in_open_txn and pid not in wanted:
                    wanted[pid] = header.producer_epoch
        return list(wanted.items())

    # ------------------------------------------------------------ markers

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     transaction_version: int = 0) -> None:
        """Kafka's order: the producer epoch first, then the coordinator epoch.

        A marker of transactions V2 (or of a fence) carries an epoch bumped past its transaction's data, and
        the producer writes its next transaction at that same epoch; so such a marker at the epoch of an
        open transaction's data is a late copy from the previous transaction and must not end this one
        (KAFKA-19446, found here by `txnsim simulate` with late markers). At that epoch with no transaction
        open it is a retry of the marker already written, and harmless (KAFKA-19999).
        """
        entry = self._entries.get(producer_id)
        if entry is None:
            return
        check_epoch(entry, producer_epoch)
        if (transaction_version >= 2 and producer_epoch == entry.producer_epoch
                and entry.txn_first_offset is not None):
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} at epoch {producer_epoch} ends a transaction at an older "
                f"epoch, but the open one here was written at epoch {producer_epoch}: a late marker of the previous "
                "transaction")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} carries coordinator epoch {coordinator_epoch}, but this "
                f"partition has seen {entry.coordinator_epoch}; a newer coordinator owns the transaction")

    def apply_marker(self, *, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                     offset: int, timestamp: int) -> CompletedTxn | None:
        """Record a marker written at `offset`; returns the transaction it closed, if one was open."""
        entry = self._entries.get(producer_id) or ProducerEntry(producer_id)
        first = entry.txn_first_offset
        self._install(replace(entry.at_epoch(producer_epoch), coordinator_epoch=coordinator_epoch,
                              last_timestamp=timestamp, txn_first_offset=None))
        if first is None:
            return None
        others = self.first_open_offset()
        completed = CompletedTxn(producer_id, producer_epoch, first, offset, committed,
                                 offset + 1 if others is None else min(others, offset + 1))
        self._unreplicated.append(completed)
        return completed

    def on_high_watermark(self, high_watermark: int) -> None:
        """Completions whose marker is now durable stop pinning the LSO."""
        while self._unreplicated and self._unreplicated[0].marker_offset < high_watermark:
            self._unreplicated.popleft()

    # ------------------------------------------------------------ recovery

    def replay(self, header: BatchHeader, *, committed: bool | None = None, coordinator_epoch: int = -1
               ) -> CompletedTxn | None:
        """Apply a batch read back from the log, without checks (it was checked when written).

        `committed` is None for a data batch, else the marker's outcome.
        """
        pid = header.producer_id
        if pid < 0:
            return None
        if committed is not None:
            return self.apply_marker(producer_id=pid, producer_epoch=header.producer_epoch, committed=committed,
                                     coordinator_epoch=coordinator_epoch, offset=header.base_offset,
                                     timestamp=header.max_timestamp)
        entry = self._entries.get(pid) or ProducerEntry(pid)
        self._install(entry.with_batch(header, header.base_offset, header.max_timestamp))
        return None

    # ------------------------------------------------------------ queries

    def first_open_offset(self) -> int | None:
        return min(self._open.values(), default=None)

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of a transaction that is open or whose marker is not durable."""
        candidates = [txn.first_offset for txn in self._unreplicated]
        if self._open:
            candidates.append(min(self._open.values()))
        return min(candidates, default=None)

    def has_open_transaction(self, producer_id: int) -> bool:
        return producer_id in self._open

    def entries(self) -> tuple[ProducerEntry, ...]:
        """Every producer's entry, by producer id (what a snapshot file stores)."""
        return tuple(self._entries[pid] for pid in sorted(self._entries))

    def snapshots(self) -> list[ProducerSnapshot]:
        return [self._entries[pid].snapshot() for pid in sorted(self._entries)]

    def open_transactions(self) -> list[OpenTransaction]:
        found = [OpenTransaction(pid, self._entries[pid].producer_epoch, first, self._entries[pid].last_timestamp)
                 for pid, first in self._open.items()]
        return sorted(found, key=lambda txn: (txn.first_offset, txn.producer_id))
