"""PartitionLog: the durable, append-only, segmented log of one partition.

Owns offset assignment, segment rolling, the high watermark and the LSO. Invariants: an append
returns only once its bytes are fsynced; the high watermark is the end of the fsynced log and
nothing at or above it is ever read; the LSO is min(HW, first offset of the earliest transaction
whose marker is not yet below the HW). One lock guards the state; fsyncs run outside it.
A producer-state snapshot is written when a segment rolls and on a clean close, so that opening
the log replays only the batches after the newest snapshot.

Fencing (leader_epochs.py): a log opened with its claims writes only segment files named with
its own epoch (the first write after opening starts a fresh one), and after each fsync checks
that no later epoch was claimed before it moves the high watermark and acknowledges. Once a
later epoch exists the log is fenced: every waiting and later call gets NOT_LEADER_OR_FOLLOWER.

One replica of a replicated partition is a ReplicaLog (replica_log.py), which builds on this class
through the few hooks marked as such below.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path, PurePath

from partitions.group_commit import GroupCommitter
from partitions.leader_epochs import EpochLimits, LeaderEpochs
from partitions.log_start import read_log_start, write_log_start
from partitions.model import (
    AppendOrigin,
    AppendResult,
    FetchData,
    LogConfig,
    OpenTransaction,
    ProducerSnapshot,
    RecoveryStats,
    ReplicaRole,
)
from partitions.producer_snapshot import PartitionStateSnapshot, snapshot_name
from partitions.producer_state import ProducerStateTable
from partitions.producer_state_recovery import load_producer_state
from partitions.recovery import ScannedLog, clean_up, scan_segments
from partitions.recovery_point import (
    ACCEPT_LOSS_FILE,
    RecoveryPointWriter,
    accepted_loss,
    forget_accepted_loss,
    read_recovery_point,
)
from partitions.segment import Segment, delete_segment_files
from partitions.snapshot_files import delete_snapshots, list_snapshots, write_snapshot
from partitions.storage import FILE_STORAGE, Storage
from partitions.txn_index import AbortedTxn, AbortedTxnIndex, index_abort
from partitions.validation import parse_batches, validate_batches
from proto import records as codec
from proto.errors import (
    CorruptMessageError,
    InvalidRequestError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from proto.planted_bugs import PlantedBug
from proto.records import ControlType, RecordBatch
from proto.structs import IsolationLevel

logger = logging.getLogger(__name__)
#: stands for "every epoch there is" when a log is opened without claims (a single writer)
_ONLY_WRITER = 1 << 62


def _damage_below(name: str, scanned: ScannedLog, floor: int, directory: Path) -> KafkaStorageError:
    """The error of a log whose good prefix ends below offsets it acknowledged: logged, since the log
    stays closed until someone restores its files or gives those offsets up."""
    end = scanned.end_offset
    cut = next((cut for cut in scanned.cuts if cut.stop_offset < floor), None)
    if cut is not None:
        where = f"{cut.path} is damaged at byte {cut.problem.position}, offset {end} ({cut.problem.reason})"
    elif scanned.left_out:
        path, why = scanned.left_out[0]
        where = f"the log stops at offset {end}: {path} was left out ({why})"
    else:
        where = f"its segment files end at offset {end}"
    error = KafkaStorageError(
        f"[KAFKA_STORAGE_ERROR] {name}: {where}, below offset {floor}, up to which this log was fsynced and "
        f"may have acknowledged writes. txnsim keeps one copy of each log and cannot repair it, so the log "
        f"stays closed rather than give offsets {end} to {floor - 1} out again: restore the file from a copy, "
        f"or give them up with `echo {end} > {directory / ACCEPT_LOSS_FILE}`, then restart the node")
    logger.error("log recovery: %s", error.message)
    return error


def wall_clock_ms() -> int:
    """The real clock, the default of a log; a simulator passes its own (now_ms)."""
    return int(time.time() * 1000)


def _first_record_at_or_after(batch: RecordBatch, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the batch's first record with a timestamp >= `timestamp` (a compressed batch is
    inflated to find it)."""
    for record in batch.records():
        if record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return None


@dataclasses.dataclass(slots=True)
class Recovered:
    """What opening a log found on its disk: the good prefix's segments and the state rebuilt from them."""

    segments: list[Segment]
    state: ProducerStateTable
    aborted: AbortedTxnIndex
    report: list[str]
    stats: RecoveryStats
    recovery_point: RecoveryPointWriter
    log_start: int

    @property
    def end_offset(self) -> int:
        return self.segments[-1].next_offset

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
        self.recovery_point.close()


def recover(directory: Path, topic: str, partition: int, *, leader_epoch: int, config: LogConfig,
            epochs: LeaderEpochs | None, storage: Storage, refetch_damage: bool = False) -> Recovered:
    """Find the good prefix of the log in `directory` (creating it if missing), cut what lies past it, and
    load its state (see PartitionLog.open). `refetch_damage`: damage below the recovery point is cut like a
    torn tail, for a replica, whose leader has those offsets to send again."""
    storage.mkdir(directory)
    limits_before = epochs.limits() if epochs is not None else EpochLimits()
    scanned = scan_segments(directory, limits_before, storage,
                            check_saved_indexes=config.planted_bug is not PlantedBug.TRUST_SAVED_INDEX)
    try:
        end = scanned.end_offset
        latest_start = limits_before.starts[-1][1] if limits_before.starts else 0
        floor = max(read_recovery_point(directory, storage), latest_start)
        if end < floor and refetch_damage:
            logger.error("log recovery: %s-%s: this replica's log is damaged below offset %d, which it had "
                         "fsynced; it is cut at offset %d and fetches offsets %d to %d again from its leader",
                         topic, partition, floor, end, end, floor - 1)
        elif end < floor:
            accepted = accepted_loss(directory, storage)
            if accepted is None or accepted > end:
                raise _damage_below(f"{topic}-{partition}", scanned, floor, directory)
            logger.error("log recovery: %s-%s: offsets %d to %d are given up, as %s allows", topic, partition,
                         end, floor - 1, directory / ACCEPT_LOSS_FILE)
        if epochs is not None:
            epochs.record_start(leader_epoch, end)
            limits, older = epochs.limits(), (lambda epoch: epoch is None or epoch < leader_epoch)
        else:  # the only writer: everything on disk is older, and ends where the good prefix does
            limits, older = EpochLimits(((_ONLY_WRITER, end),)), (lambda _epoch: True)
        report = clean_up(directory, scanned, limits, older, sole_writer=epochs is None, storage=storage)
        segments = scanned.segments or [Segment.create(directory, end, leader_epoch, storage)]
        loaded = load_producer_state(directory, segments, f"{topic}-{partition}", limits, older, storage)
        if end < floor:  # the loss was accepted: the recovery point starts again from here
            forget_accepted_loss(directory, storage)
        recovery_point = RecoveryPointWriter.open(directory, leader_epoch, storage)
        log_start = min(read_log_start(directory, storage), end)
    except BaseException:
        for segment in scanned.segments:
            segment.close()
        raise
    stats = dataclasses.replace(loaded.stats, scanned_segments=len(scanned.scanned),
                                indexed_segments=len(scanned.segments) - len(scanned.scanned))
    return Recovered(segments, loaded.state, loaded.aborted, report, stats, recovery_point, log_start)


class PartitionLog:
    """One partition's log. Thread-safe; open it with PartitionLog.open().

    Also usable from a single thread (a simulator): an append is fsynced by its own caller, so
    nothing waits for another thread, and wait_for_data with a zero timeout never blocks.
    """

    #: a replica deletes its own empty active segment when it rolls (an unreplicated log in a shared
    #: directory may not: the file may be a later leader's)
    _replaces_empty_segments = False

    def __init__(self, directory: Path, topic: str, partition: int, leader_epoch: int, config: LogConfig,
                 recovered: Recovered, epochs: LeaderEpochs | None = None, storage: Storage = FILE_STORAGE,
                 now_ms: Callable[[], int] = wall_clock_ms, high_watermark: int | None = None) -> None:
        self.directory = directory
        #: the disk this log's files live on (the real one unless a simulator says otherwise)
        self.storage = storage
        self._now_ms = now_ms
        self.topic = topic
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.config = config
        self.recovery_report = recovered.report
        #: how the producer state was rebuilt on open (which snapshot, how many batches replayed)
        self.recovery_stats = recovered.stats
        #: fsyncs of segment data (group commit keeps this well below the number of appends)
        self.fsync_count = 0
        self._lock = threading.Lock()
        self._data_ready = threading.Condition(self._lock)
        self._segments = recovered.segments
        self._segment_bases = [segment.base_offset for segment in self._segments]
        self._state = recovered.state
        self._aborted = recovered.aborted
        self._log_end_offset = recovered.end_offset
        #: the end of what is fsynced: everything recovered is
        self._synced_end = self._log_end_offset
        #: everything recovered is durable, and so readable, unless replication says less of it is
        self._high_watermark = self._log_end_offset if high_watermark is None else min(high_watermark,
                                                                                       self._log_end_offset)
        self._state.on_high_watermark(self._high_watermark)
        #: how many times the log was cut back (a replica's): a flush that saw an older log proves nothing
        self._cuts = 0
        self._closed = False
        self._files_closed = False
        self._epochs = epochs
        self._fenced = False
        self._committer = GroupCommitter(self._flush, self._log_end_offset)
        self._recovery_point = recovered.recovery_point
        #: the first offset readable, when records before it were deleted inside a segment (DeleteRecords);
        #: the log start is the later of it and the first segment's base
        self._log_start = recovered.log_start
        self._recovery_point_failed = False
        #: damaged batches found by reads (segment file, byte position), each logged once
        self._reported_damage: set[tuple[PurePath, int]] = set()

    @classmethod
    def open(cls, directory: Path, topic: str, partition: int, *, leader_epoch: int,
             config: LogConfig = LogConfig(), epochs: LeaderEpochs | None = None,
             storage: Storage = FILE_STORAGE, now_ms: Callable[[], int] = wall_clock_ms) -> PartitionLog:
        """Open (creating if missing) the log in `directory`: find its good prefix, cut what lies past
        it, then load its state.

        With `epochs` (the log's claims, `leader_epoch` just claimed in them) the good prefix
        leaves out what earlier leaders wrote after they were cut off, its end is recorded as this
        epoch's start before anything is cut (NOT_LEADER_OR_FOLLOWER if a later claimant came
        first), and the log is fenced once a later epoch is claimed. Without, the caller is the
        only writer there is. The producer state and aborted index come from the newest usable
        snapshot plus a replay of the batches after it; recovery_stats says which and how many.

        Every file operation goes to `storage` (`epochs` should use the same one); `now_ms` is the
        clock for marker timestamps, so a simulator with its own gets identical bytes every run.
        """
        recovered = recover(directory, topic, partition, leader_epoch=leader_epoch, config=config, epochs=epochs,
                            storage=storage)
        return cls(directory, topic, partition, leader_epoch, config, recovered, epochs, storage, now_ms)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, epoch {self.leader_epoch}, "
                f"start {self.log_start_offset}, hw {self.high_watermark}, end {self.log_end_offset})")

    # ------------------------------------------------------------ offsets

    @property
    def log_start_offset(self) -> int:
        return max(self._segment_bases[0], self._log_start)

    @property
    def high_watermark(self) -> int:
        with self._lock:
            return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        with self._lock:
            return self._log_end_offset

    @property
    def last_stable_offset(self) -> int:
        with self._lock:
            return self._last_stable_offset()

    def _last_stable_offset(self) -> int:
        if self.config.planted_bug is PlantedBug.LSO_IGNORES_OPEN_TRANSACTIONS:
            return self._high_watermark
        unstable = self._state.first_unstable_offset()
        return self._high_watermark if unstable is None else min(unstable, self._high_watermark)

    def _readable_end(self, isolation: IsolationLevel) -> int:
        if isolation == IsolationLevel.READ_COMMITTED:
            return self._last_stable_offset()
        return self._high_watermark

    # ------------------------------------------------------------ appends

    def append(self, records: bytes, *, origin: AppendOrigin = AppendOrigin.CLIENT,
               verified_producer_ids: frozenset[int] = frozenset(), timestamp_ms: int | None = None,
               wait_durable: bool = True) -> AppendResult:
        """Validate, write and fsync the batches of `records`, all or none; returns where they landed.

        `timestamp_ms` is the node's clock for this append, recorded as the producer's last
        timestamp (default: each batch's max timestamp, as on replay). `wait_durable` False returns
        once written, before the fsync: the caller must call make_durable() before it acknowledges
        anything (a driver that charges the fsync's time itself, as the simulator does).
        """
        batches = validate_batches(records, self.config, origin)
        with self._lock:
            self._check_leading()
            placed, offset = [], self._log_end_offset
            for batch in batches:
                placed.append((batch.header, offset))
                offset += batch.header.last_offset_delta + 1
            plan = self._state.plan_append(placed, origin=origin, verified_producer_ids=verified_producer_ids,
                                           timestamp_ms=timestamp_ms)
            if plan.duplicates:
                result = AppendResult(plan.duplicates[0].base_offset, plan.duplicates[-1].last_offset,
                                      duplicate=True, log_start_offset=self.log_start_offset)
            else:
                self._write([codec.set_base_offset(batch.raw, base, self.leader_epoch)
                             for batch, (_header, base) in zip(batches, placed)],
                            [(base, base + header.last_offset_delta) for header, base in placed])
                self._state.apply(plan)
                result = AppendResult(placed[0][1], offset - 1, log_start_offset=self.log_start_offset)
        if wait_durable:
            self._committer.wait_until_durable(result.last_offset + 1)
        return result

    def make_durable(self, end_offset: int) -> None:
        """Return once every offset below `end_offset` is durable (fsynced; for a log that is the only copy,
        the high watermark past it), sharing fsyncs with concurrent callers; KafkaStorageError or NOT_LEADER_OR_FOLLOWER if it cannot be."""
        self._committer.wait_until_durable(end_offset)

    def needs_txn_verification(self, records: bytes) -> list[tuple[int, int]]:
        """(pid, epoch) of transactional batches whose producer has no open transaction here, or one of an
        older epoch (the next transaction's first write, arriving before the previous one's marker).

        The node asks the coordinator about these and passes the confirmed pids to append().
        Unparseable bytes raise CorruptMessageError, as append() would.
        """
        headers = [batch.header for batch in parse_batches(records)]
        with self._lock:
            return self._state.needs_verification(headers)

    def append_marker(self, *, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                      timestamp_ms: int | None = None, transaction_version: int = 0,
                      wait_durable: bool = True) -> AppendResult:
        """Write a COMMIT or ABORT marker for `producer_id`, closing its open transaction if it has one
        (`transaction_version` 2: the marker's epoch was bumped past its data's; see check_marker).
        `wait_durable` as for append()."""
        if producer_id < 0 or producer_epoch < 0:
            raise InvalidRequestError(f"a marker needs a producer id and epoch, not {producer_id}/{producer_epoch}")
        timestamp = self._now_ms() if timestamp_ms is None else timestamp_ms
        with self._lock:
            self._check_leading()
            late_check = 0 if self.config.planted_bug is PlantedBug.ACCEPT_LATE_MARKERS else transaction_version
            self._state.check_marker(producer_id, producer_epoch, coordinator_epoch, late_check)
            offset = self._log_end_offset
            marker = codec.encode_control_batch(
                producer_id=producer_id, producer_epoch=producer_epoch,
                control_type=ControlType.COMMIT if committed else ControlType.ABORT,
                coordinator_epoch=coordinator_epoch, timestamp=timestamp, base_offset=offset,
                partition_leader_epoch=self.leader_epoch)
            self._write([marker], [(offset, offset)])
            completed = self._state.apply_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                                 committed=committed, coordinator_epoch=coordinator_epoch,
                                                 offset=offset, timestamp=timestamp)
            index_abort(self._aborted, completed)
        if wait_durable:
            self._committer.wait_until_durable(offset + 1)
        return AppendResult(offset, offset, log_start_offset=self.log_start_offset)

    def _write(self, chunks: list[bytes], offsets: list[tuple[int, int]]) -> None:
        """Write whole batches at the log end (lock held), rolling first if they would overflow the
        segment or if the active segment belongs to an earlier leader epoch."""
        data = b"".join(chunks)
        active = self._segments[-1]
        try:
            if active.epoch != self.leader_epoch or (
                    active.size > 0 and active.size + len(data) > self.config.segment_bytes):
                active = self._roll()
            active.append(data, [(base, last, len(chunk)) for (base, last), chunk in zip(offsets, chunks)])
        except OSError as error:
            raise KafkaStorageError(f"cannot write to {active.path}: {error}") from error
        self._log_end_offset = offsets[-1][1] + 1

    def _roll(self) -> Segment:
        """Seal the active segment (fsynced, so only the newest segment is ever unsynced) and start one.

        The producer state at the new segment's base is snapshotted: everything below it is durable.
        """
        self._sync_active_segment()
        sealed = self._segments[-1]
        if self._replaces_empty_segments and sealed.size == 0:  # its own empty file: the new one takes its place
            self._segments.pop()
            self._segment_bases.pop()
            sealed.close()
            delete_segment_files(sealed.path, self.storage)
        elif sealed.epoch == self.leader_epoch:  # an inherited file is indexed by recovery, which checks it first
            sealed.save_index()
        segment = Segment.create(self.directory, self._log_end_offset, self.leader_epoch, self.storage)
        self._segments.append(segment)
        self._segment_bases.append(segment.base_offset)
        self._write_snapshot()
        return segment

    def _sync_active_segment(self) -> None:
        """fsync the newest segment now (lock held), so the whole log written so far is durable."""
        active = self._segments[-1]
        if self.config.fsync and active.synced_size < active.size:
            active.sync()
            self.fsync_count += 1
        active.mark_synced(active.size)

    def _write_snapshot(self) -> None:
        """Snapshot the producer state at the log end (lock held; everything below it must be durable).

        A failed write is logged, not raised: the snapshot only shortens the next open's replay,
        which falls back to an older snapshot or to the whole log.
        """
        if self._superseded():
            return  # a later leader owns the log: leave its snapshots alone
        snapshot = PartitionStateSnapshot(self._log_end_offset, self._state.entries(), self._aborted.entries)
        try:
            write_snapshot(self.directory, snapshot, self.leader_epoch, fsync=self.config.fsync, storage=self.storage)
        except (OSError, ValueError) as error:
            logger.warning("%s-%s: cannot write the producer snapshot at offset %d (%s); the next open "
                           "replays more of the log", self.topic, self.partition, snapshot.offset, error)

    def _flush(self) -> int:
        """One group-commit flush: fsync what is written now, then advance the high watermark to it."""
        with self._lock:
            if self._files_closed:
                raise NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] log {self.topic}-{self.partition} is closed")
            self._check_not_fenced()
            end, cuts = self._log_end_offset, self._cuts
            # segments are fsynced when rolled, so only the newest can hold unsynced bytes; -2 is cheap insurance
            dirty = [(segment, segment.size) for segment in self._segments[-2:] if segment.synced_size < segment.size]
        try:
            if self.config.fsync:
                for segment, _size in dirty:
                    segment.sync()
        except OSError as error:
            raise KafkaStorageError(f"fsync of {self.topic}-{self.partition} failed: {error}") from error
        if self.fenced:  # checked after the fsync: see leader_epochs.py for why that order
            self._check_not_fenced()
        with self._lock:
            if cuts != self._cuts:  # cut back meanwhile: the sizes fsynced belong to a log that is gone
                return self._synced_end
            for segment, size in dirty:
                segment.mark_synced(size)
            if self.config.fsync:
                self.fsync_count += len(dirty)
            if end > self._synced_end:
                self._synced_end = end
                self._record_recovery_point(end)
                self._advance_high_watermark()
        return end

    def _advance_high_watermark(self) -> None:
        """Move the high watermark to its target (lock held); it never goes back but for a cut."""
        mark = self._high_watermark_target()
        if mark <= self._high_watermark:
            return
        self._high_watermark = mark
        self._state.on_high_watermark(mark)
        self._data_ready.notify_all()
        self._high_watermark_moved(mark)

    def _high_watermark_target(self) -> int:
        """Hook (lock held): where the high watermark may go now; the only copy's is its fsynced end."""
        return self._synced_end

    def _high_watermark_moved(self, mark: int) -> None:
        """Hook (lock held): the high watermark is now `mark`."""

    def _record_recovery_point(self, end: int) -> None:
        """Note the durable end for recovery (lock held); a failure only weakens recovery's check, so it is
        logged once, not raised."""
        try:
            self._recovery_point.record(end)
        except OSError as error:
            if not self._recovery_point_failed:
                self._recovery_point_failed = True
                logger.warning("%s-%s: cannot record the recovery point (%s); recovery can then tell damage "
                               "from a torn tail only below older points", self.topic, self.partition, error)

    # ------------------------------------------------------------ reads

    def read(self, fetch_offset: int, max_bytes: int, isolation: IsolationLevel, *,
             min_one_batch: bool = True) -> FetchData:
        """Whole batches from the one holding `fetch_offset`, below the HW (or LSO for read_committed).

        At least one batch is returned when any is readable, however large (unless `min_one_batch` is
        off: Kafka grants that only to the first partition of a fetch that returns data); more while
        they fit in `max_bytes`. An offset past the readable end but not past the HW reads as empty
        (Kafka does the same for read_committed consumers positioned beyond the LSO).
        """
        with self._lock:
            self._check_open()
            high_watermark, lso = self._high_watermark, self._last_stable_offset()
            committed = isolation == IsolationLevel.READ_COMMITTED
            if self.config.planted_bug is PlantedBug.READ_PAST_HW and not committed:
                high_watermark = self._log_end_offset
            upper = self._highest_fetch_offset(high_watermark)
            out_of_range = fetch_offset < self.log_start_offset or fetch_offset > upper
            if not out_of_range:
                spans, end = self._spans(fetch_offset, lso if committed else high_watermark, max_bytes,
                                         take_one=min_one_batch)
                aborted = self._aborted.collect(fetch_offset, end) if committed and spans else []
        if out_of_range:
            # a consumer resets its position on this answer: a leader that was taken over must not give it
            # from the shorter log it held (see check_still_leader)
            self.check_still_leader()
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is outside {self.topic}-{self.partition}'s range "
                f"[{self.log_start_offset}, {upper}]")
        return FetchData(self._read_checked(spans), high_watermark, lso, self.log_start_offset, aborted)

    def _highest_fetch_offset(self, high_watermark: int) -> int:
        """Hook (lock held): the largest offset a fetch may ask for without OFFSET_OUT_OF_RANGE (an offset
        between the readable end and it reads as empty); the only copy's is its high watermark."""
        return high_watermark

    def _read_checked(self, spans: list[tuple[Segment, int, int]]) -> bytes:
        """The bytes of `spans`, up to the first batch that is not what its segment's index says (a
        flipped byte in a sealed segment); CORRUPT_MESSAGE if that is the very first batch."""
        chunks = []
        for segment, start, stop in spans:
            chunk = segment.read(start, stop)
            damage = segment.damage_in(start, chunk)
            if damage is None:
                chunks.append(chunk)
                continue
            position, problem = damage
            if position > start:
                chunks.append(chunk[:position - start])
            if not chunks:
                message = (f"[CORRUPT_MESSAGE] {self.topic}-{self.partition}: {segment.path} is damaged at byte "
                           f"{position}: {problem}; txnsim keeps one copy of each log and cannot serve it")
                if (segment.path, position) not in self._reported_damage:
                    self._reported_damage.add((segment.path, position))
                    logger.error("%s", message)
                raise CorruptMessageError(message)
            break
        return b"".join(chunks)

    def _spans(self, offset: int, upper_bound: int, max_bytes: float,
               take_one: bool = True) -> tuple[list[tuple[Segment, int, int]], int]:
        """(segment, start, end) byte ranges of the batches to read (lock held), and the offset after them."""
        spans: list[tuple[Segment, int, int]] = []
        if offset >= upper_bound:
            return spans, offset
        first = max(0, self._find_segment(offset))
        for segment in self._segments[first:]:
            start, end, offset = segment.span(offset, upper_bound, max_bytes, take_one=take_one and not spans)
            if end > start:
                spans.append((segment, start, end))
                max_bytes -= end - start
            if offset < segment.next_offset or offset >= upper_bound:
                break
        return spans, offset

    def _find_segment(self, offset: int) -> int:
        return bisect_right(self._segment_bases, offset) - 1

    def offset_for_timestamp(self, timestamp: int, isolation: IsolationLevel) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is >= `timestamp` (Kafka's ListOffsets by
        time), or None if there is none below the readable end (HW, or LSO for read_committed).

        As Kafka does, only the first segment reaching the timestamp is searched; batch headers (their max
        timestamps, indexed per segment) find the batch, and only that batch's records are decoded.
        """
        with self._lock:
            self._check_open()
            bound, durable = self._readable_end(isolation), self._high_watermark
            segment = next((s for s in self._segments if s.max_timestamp >= timestamp), None)
            if segment is None:
                return None
            for i in range(segment.first_batch_reaching(timestamp), segment.batch_count):
                batch = segment.batch_at_index(i)
                if batch.header.base_offset >= durable:
                    return None
                if batch.header.max_timestamp >= timestamp:
                    found = _first_record_at_or_after(batch, timestamp)
                    if found is not None:
                        return found if found[0] < bound else None
            return None

    def offset_of_max_timestamp(self, isolation: IsolationLevel) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the log's largest timestamp (ListOffsets -3,
        KIP-734), or None if the log is empty or that record is not below the readable end."""
        with self._lock:
            self._check_open()
            bound, durable = self._readable_end(isolation), self._high_watermark
            segment = max(self._segments, key=lambda s: s.max_timestamp)  # the first of equals
            largest = segment.max_timestamp
            if segment.batch_count == 0:
                return None
            batch = segment.batch_at_index(segment.first_batch_reaching(largest))
            if batch.header.base_offset >= durable:
                return None
            found = _first_record_at_or_after(batch, largest)
            return found if found is not None and found[0] < bound else None

    def wait_for_data(self, fetch_offset: int, isolation: IsolationLevel, timeout_s: float) -> bool:
        """Block until something at or after `fetch_offset` is readable, or the timeout passes."""
        with self._data_ready:
            self._data_ready.wait_for(lambda: self._closed or self._fenced or self._readable_end(isolation) > fetch_offset,
                                      timeout=max(0.0, timeout_s))
            return self._readable_end(isolation) > fetch_offset

    def batches(self, start_offset: int = 0, *, up_to: int | None = None,
                to_log_end: bool = False) -> Iterator[RecordBatch]:
        """Durable batches in offset order, from the one holding `start_offset` to those ending below `up_to`,
        up to the high watermark, or with `to_log_end` up to all this copy has fsynced. A coordinator taking
        a shard over reads to its log end, as Kafka's coordinators load theirs: a new leader's high
        watermark trails until its followers fetch again, and a write the old leader had replicated but not
        yet seen acknowledged is there (every decision a client sees after it waits for the ISR)."""
        with self._lock:
            self._check_open()
            end = self._synced_end if to_log_end else self._high_watermark
            bound = end if up_to is None else min(up_to, end)
            spans, _end = self._spans(max(start_offset, self.log_start_offset), bound, float("inf"))
        for segment, start, end in spans:
            yield from segment.iter_batches(start, end)

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: nothing below `offset` (-1: the high watermark) is readable from now on, durably;
        whole segments below it are deleted. Returns the log start offset after it (the low watermark).
        OFFSET_OUT_OF_RANGE for an offset past the high watermark or below -1."""
        with self._lock:
            self._check_open()
            target = self._high_watermark if offset == -1 else offset
            if target < 0 or target > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"[OFFSET_OUT_OF_RANGE] cannot delete the records of {self.topic}-{self.partition} before offset "
                    f"{offset}: it is past the high watermark {self._high_watermark}")
            if target <= self.log_start_offset:
                return self.log_start_offset
            write_log_start(self.directory, target, self.storage, fsync=self.config.fsync)
            self._log_start = target
            self._aborted.drop_before(target)
            self._log_start_moved(target)
        self.delete_segments_before(target)
        return self.log_start_offset

    def _log_start_moved(self, log_start: int) -> None:
        """Hook (lock held): nothing below `log_start` is readable any more, durably."""

    def apply_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Delete the oldest sealed segments that retention lets go: those whose newest record is older than
        `retention_ms` (-1: kept forever), and while the log exceeds `retention_bytes` by a whole segment (-1: no
        limit), as Kafka's retention does. The active segment always stays. Returns how many went."""
        with self._lock:
            self._check_open()
            sealed = self._segments[:-1]
            total = sum(segment.size for segment in self._segments)
            upto = None
            for segment, successor in zip(sealed, self._segments[1:]):
                expired = retention_ms >= 0 and 0 <= segment.max_timestamp < now_ms - retention_ms
                oversize = retention_bytes >= 0 and total - segment.size >= retention_bytes
                if not (expired or oversize):
                    break
                total -= segment.size
                upto = successor.base_offset
        if upto is None or upto <= self.log_start_offset:
            return 0
        before = len(self._segments)
        self.delete_records_before(upto)
        return before - len(self._segments)

    def delete_segments_before(self, offset: int) -> int:
        """Delete whole segments that lie entirely below `offset` (never the active one); returns how many.

        For logs whose owner keeps a snapshot of everything below `offset` (the coordinators'
        state logs), so that disk use and load time stay flat as history grows. The log start
        offset moves to the first remaining segment; aborts and producer snapshots below it are
        dropped, and if no snapshot at or above it is left one is written at the log end, since
        the state of producers seen only in the deleted segments can no longer be replayed.
        """
        with self._lock:
            self._check_open()
            doomed = []
            for segment, successor in zip(self._segments, self._segments[1:]):
                if successor.base_offset > offset or segment.synced_size < segment.size:
                    break
                doomed.append(segment)
            if not doomed:
                return 0
            self._segments = self._segments[len(doomed):]
            self._segment_bases = self._segment_bases[len(doomed):]
            log_start = self._segment_bases[0]
            self._aborted.drop_before(log_start)
            snapshots = list_snapshots(self.directory, self.storage)
            if not any(file.offset >= log_start for file in snapshots):
                # written before the segments go, so a crash in between still finds a usable snapshot
                self._sync_active_segment()
                self._write_snapshot()
        for segment in doomed:
            segment.close()
            delete_segment_files(segment.path, self.storage)
        delete_snapshots(self.directory, [file for file in snapshots if file.offset < log_start], fsync=False,
                         storage=self.storage)
        self.storage.fsync_directory(self.directory)
        return len(doomed)

    # ------------------------------------------------------------ state

    def producer_snapshots(self) -> list[ProducerSnapshot]:
        with self._lock:
            return self._state.snapshots()

    def open_transactions(self) -> list[OpenTransaction]:
        with self._lock:
            return self._state.open_transactions()

    def aborted_transactions(self) -> tuple[AbortedTxn, ...]:
        """Every indexed abort (dump-log and tests; fetches use read())."""
        with self._lock:
            return self._aborted.entries

    @property
    def role(self) -> ReplicaRole | None:
        """LEADER or FOLLOWER for a replica's log; None for a log that is the only copy (it always leads)."""
        return None

    def _check_leading(self) -> None:
        """Hook (lock held), before a client write or a marker: open and not fenced."""
        self._check_open()

    def _closing_files(self) -> None:
        """Hook (lock held): close() closes the files now."""

    def _check_open(self) -> None:
        if self._closed:
            raise NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] log {self.topic}-{self.partition} is closed on "
                                           "this node")
        self._check_not_fenced()

    def _check_not_fenced(self) -> None:
        if self._fenced:
            raise NotLeaderOrFollowerError(
                f"[NOT_LEADER_OR_FOLLOWER] {self.topic}-{self.partition}: epoch {self.leader_epoch} was "
                "superseded by a later leader; nothing more is written or acknowledged here")

    def _superseded(self) -> bool:
        if self.config.planted_bug is PlantedBug.NO_FENCING:
            return False
        return self._epochs is not None and self._epochs.superseded(self.leader_epoch)

    def check_still_leader(self) -> None:
        """NOT_LEADER_OR_FOLLOWER once a later epoch was claimed; call it after reading what a client is told.

        Writes are fenced by their acknowledgement check, but a leader stalled past its session (a
        long pause, SIGSTOP) wakes up still holding the log as it was when a new leader took over:
        without this it would answer fetches and offsets from there, an end offset behind a commit
        the new leader already marked. A read confirmed after it was taken is one no later leader
        had changed yet (the claim comes before the new leader's first write). One stat() per call.
        """
        if self.config.planted_bug is PlantedBug.STALE_READS:
            return
        if self.fenced:
            self._check_not_fenced()

    @property
    def fenced(self) -> bool:
        """True once a later leader epoch was claimed (checked now, not only at the next write)."""
        if not self._fenced and self._superseded():
            with self._lock:
                self._fenced = True
                self._data_ready.notify_all()
        return self._fenced

    def close(self) -> None:
        """Refuse new work, wait until everything written is durable, then close the files."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            end = self._log_end_offset
            self._data_ready.notify_all()
        durable = False
        try:
            self._committer.wait_until_durable(end)
            durable = True
        except NotLeaderOrFollowerError:
            if not self._fenced:
                raise  # fenced: what was not acknowledged stays unacknowledged; the files still close
        finally:
            with self._lock:
                self._files_closed = True
                for segment in self._segments:
                    segment.close()
                self._recovery_point.close()
                self._closing_files()
                if durable and not self.storage.exists(self.directory / snapshot_name(end, self.leader_epoch)):
                    self._write_snapshot()  # the next open then replays nothing
