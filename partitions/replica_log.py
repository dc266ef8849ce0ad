"""ReplicaLog: one replica's copy of a replicated partition's log, in a directory of its own.

A PartitionLog with a role instead of shared epoch claims. As leader it stamps client writes with its
leader epoch; as follower it appends its leader's batches as they are and rebuilds the producer state and
aborted index from them, so once it leads it dedupes and fences exactly as the old leader did; when it
follows a new leader it may be cut back to where that leader's history parts from its own (Kafka's
truncateTo, after the diverging-epoch answer of follower_fetch.py). It keeps the epoch that wrote each
offset (epoch_checkpoint.py), and its high watermark is set by replication (the ISR's lowest fsynced end,
leader_replicas.py), never past its own fsynced end, in a file like the recovery point so that a restart
does not serve offsets its ISR may never have had. Damage found on open, in the tail or in a sealed
segment, is cut like a torn tail: the leader has those offsets to send again.

Role changes, the fetch loop and acks=all belong to the node's replication driver; this object only
keeps the log consistent with whatever the driver does.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from partitions import epoch_checkpoint
from partitions.epoch_cache import EpochCache, EpochEnd
from partitions.leader_epochs import LeaderEpochs
from partitions.log import PartitionLog, Recovered, recover, wall_clock_ms
from partitions.log_start import write_log_start
from partitions.model import AppendResult, FetchData, LogConfig, ReplicaRole
from partitions.producer_state import ProducerStateTable
from partitions.producer_state_recovery import load_producer_state, replay_batch
from partitions.recovery_point import HIGH_WATERMARK_FILE, RecoveryPointWriter, read_recovery_point
from partitions.segment import Segment, delete_segment_files, index_path
from partitions.snapshot_files import delete_snapshots, list_snapshots
from partitions.storage import FILE_STORAGE, Storage
from partitions.txn_index import AbortedTxnIndex
from partitions.validation import parse_batches
from proto.errors import InvalidRecordError, KafkaStorageError, NotLeaderOrFollowerError, OffsetOutOfRangeError
from proto.records import RecordBatch

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class ReplicaFiles:
    """What a replica keeps beside its segments: the epoch that wrote each offset, its high watermark."""

    epochs: EpochCache
    high_watermark: int
    high_watermark_file: RecoveryPointWriter


def open_replica_files(directory: Path, name: str, recovered: Recovered, leader_epoch: int,
                       storage: Storage) -> ReplicaFiles:
    """A recovered replica's epoch cache and high watermark (never past its log end: a mark from before a cut
    starts over from there)."""
    end = recovered.end_offset

    def batches() -> Iterator[RecordBatch]:
        for segment in recovered.segments:
            yield from segment.iter_batches(0, segment.size)

    epochs = epoch_checkpoint.load(directory, name, end, batches(), storage)
    high_watermark = read_recovery_point(directory, storage, HIGH_WATERMARK_FILE)
    writer = RecoveryPointWriter.open(directory, leader_epoch, storage, HIGH_WATERMARK_FILE)
    if high_watermark > end:
        writer.restart_at(end, leader_epoch)
    return ReplicaFiles(epochs, min(high_watermark, end), writer)


class ReplicaLog(PartitionLog):
    """One replica's log. Thread-safe; open it with ReplicaLog.open(), as a follower."""

    _replaces_empty_segments = True

    def __init__(self, directory: Path, topic: str, partition: int, leader_epoch: int, config: LogConfig,
                 recovered: Recovered, files: ReplicaFiles, storage: Storage = FILE_STORAGE,
                 now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._files = files
        self._role = ReplicaRole.FOLLOWER
        #: the high watermark replication last set; the log's is the lower of it and the fsynced end
        self._replicated_hw = files.high_watermark
        self._high_watermark_file_failed = False
        #: the epoch cache holds an epoch this replica leads that its file does not yet (written before the
        #: first batch of that epoch)
        self._epoch_unsaved = False
        super().__init__(directory, topic, partition, leader_epoch, config, recovered, None, storage, now_ms,
                         high_watermark=files.high_watermark)

    @classmethod
    def open(cls, directory: Path, topic: str, partition: int, *, leader_epoch: int,
             config: LogConfig = LogConfig(), epochs: LeaderEpochs | None = None,
             storage: Storage = FILE_STORAGE, now_ms: Callable[[], int] = wall_clock_ms) -> ReplicaLog:
        """Open (creating if missing) this replica's log, as a follower at `leader_epoch` until told to lead.
        As PartitionLog.open, except that there are no claims and that damage is cut, not refused."""
        if epochs is not None:
            raise ValueError("a replica's log has its own directory and no epoch claims")
        recovered = recover(directory, topic, partition, leader_epoch=leader_epoch, config=config, epochs=None,
                            storage=storage, refetch_damage=True)
        try:
            files = open_replica_files(directory, f"{topic}-{partition}", recovered, leader_epoch, storage)
        except BaseException:
            recovered.close()
            raise
        log = cls(directory, topic, partition, leader_epoch, config, recovered, files, storage, now_ms)
        log._cut_at_damage()
        return log

    def __repr__(self) -> str:
        return (f"ReplicaLog({self.topic}-{self.partition}, {self._role.value} at epoch {self.leader_epoch}, "
                f"start {self.log_start_offset}, hw {self.high_watermark}, end {self.log_end_offset})")

    # ------------------------------------------------------------ roles

    @property
    def role(self) -> ReplicaRole:
        return self._role

    def become_leader(self, leader_epoch: int) -> None:
        """This replica leads from `leader_epoch` on: its client writes are stamped with it, and the epoch
        starts at the log end (Kafka's maybeAssignEpochStartOffset). The file takes the epoch before the
        epoch's first batch is written, not here: a failover makes a node lead dozens of partitions at once,
        and two fsyncs each, one after the other, kept the last of them unserved for hundreds of
        milliseconds. An epoch a crash takes from the file before anything was written in it is one this
        replica led without writes, which becoming a follower drops anyway (become_follower); offsets for
        leader epoch answer the same with or without it, its start being the log end."""
        with self._lock:
            self._check_open()
            self._check_epoch_grows(leader_epoch)
            self.leader_epoch, self._role = leader_epoch, ReplicaRole.LEADER
            if leader_epoch > self._files.epochs.latest_epoch:
                self._files.epochs.assign(leader_epoch, self._log_end_offset)
                self._epoch_unsaved = True

    def _write(self, chunks: list[bytes], offsets: list[tuple[int, int]]) -> None:
        if self._epoch_unsaved:  # the epoch these batches start, durably first (see epoch_checkpoint.py)
            epoch_checkpoint.write(self.directory, self._files.epochs, self.storage)
            self._epoch_unsaved = False
        super()._write(chunks, offsets)

    def become_follower(self, leader_epoch: int) -> None:
        """This replica follows the leader of `leader_epoch`: client writes are refused from now on. What it
        wrote as leader stays until its first fetch says where to cut (truncate_to). An epoch it led without
        writing anything (its start at the log end) goes from the epoch cache: it holds no batch to compare,
        and the leader's batches of an older epoch at that offset must be taken (Kafka's cache drops such an
        entry when an older epoch is assigned over it), not refused as an epoch going back."""
        with self._lock:
            self._check_open()
            self._check_epoch_grows(leader_epoch)
            self.leader_epoch, self._role = leader_epoch, ReplicaRole.FOLLOWER
            epoch_checkpoint.truncate_from(self.directory, self._files.epochs, self._log_end_offset, self.storage)

    def _check_epoch_grows(self, leader_epoch: int) -> None:
        if leader_epoch < self.leader_epoch:
            raise ValueError(f"{self.topic}-{self.partition} is at leader epoch {self.leader_epoch}; "
                             f"{leader_epoch} is older")

    def _check_leading(self) -> None:
        self._check_open()
        if self._role is ReplicaRole.FOLLOWER:
            raise NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] this replica of {self.topic}-{self.partition} "
                                           f"follows the leader of epoch {self.leader_epoch}")

    # ------------------------------------------------------------ epochs

    def epoch_cache(self) -> EpochCache:
        """A copy of the (epoch, start offset) pairs of this log, for the replication cores."""
        with self._lock:
            return EpochCache(self._files.epochs.entries())

    def end_offset_for_epoch(self, epoch: int) -> EpochEnd:
        """Where `epoch` ends in this log (Kafka's OffsetForLeaderEpoch answer; see EpochCache.end_offset_for)."""
        with self._lock:
            return self._files.epochs.end_offset_for(epoch, self._log_end_offset)

    def _log_start_moved(self, log_start: int) -> None:
        self._files.epochs.truncate_before(log_start)
        epoch_checkpoint.write(self.directory, self._files.epochs, self.storage)

    # ------------------------------------------------------------ following

    def append_as_follower(self, records: bytes, *, wait_durable: bool = True) -> AppendResult:
        """Append the leader's batches exactly as they are (offsets, leader epochs, producer ids, markers), at
        the log end, all or none; the producer state and aborted index follow them, unchecked, as on
        recovery (the leader checked them). CORRUPT_MESSAGE for a bad CRC; INVALID_RECORD for a batch that
        does not start where the previous one ended or whose epoch goes back. `wait_durable` as for append().
        """
        batches = parse_batches(records)
        if not batches:
            raise InvalidRecordError(f"[INVALID_RECORD] {self.topic}-{self.partition}: no batch to append")
        with self._lock:
            self._check_open()
            if self._role is not ReplicaRole.FOLLOWER:
                raise NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] this replica leads {self.topic}-"
                                               f"{self.partition} at epoch {self.leader_epoch}; it does not follow")
            expected, new_epochs = self._continues_log(batches)
            for epoch, start in new_epochs:  # the epochs first (see epoch_checkpoint.py)
                self._files.epochs.assign(epoch, start)
            if new_epochs:
                epoch_checkpoint.write(self.directory, self._files.epochs, self.storage)
            self._write([batch.raw for batch in batches],
                        [(batch.header.base_offset, batch.header.last_offset) for batch in batches])
            for batch in batches:
                replay_batch(self._state, self._aborted, batch)
            result = AppendResult(batches[0].header.base_offset, expected - 1, log_start_offset=self.log_start_offset)
        if wait_durable:
            self._committer.wait_until_durable(expected)
        return result

    def _continues_log(self, batches: list[RecordBatch]) -> tuple[int, list[tuple[int, int]]]:
        """The end the leader's `batches` bring the log to and the epochs they start (lock held), or
        INVALID_RECORD if they do not continue it."""
        expected, latest, new_epochs = self._log_end_offset, self._files.epochs.latest_epoch, []
        for batch in batches:
            header = batch.header
            if header.base_offset != expected or header.last_offset_delta < 0:
                raise InvalidRecordError(
                    f"[INVALID_RECORD] {self.topic}-{self.partition}: the leader's batch holds offsets "
                    f"{header.base_offset} to {header.last_offset}; this replica's log goes on at {expected}")
            if header.partition_leader_epoch < latest:
                raise InvalidRecordError(
                    f"[INVALID_RECORD] {self.topic}-{self.partition}: the leader's batch at offset "
                    f"{header.base_offset} is of epoch {header.partition_leader_epoch}, after epoch {latest}")
            if header.partition_leader_epoch > latest:
                latest = header.partition_leader_epoch
                new_epochs.append((latest, header.base_offset))
            expected = header.last_offset + 1
        return expected, new_epochs

    def read_for_follower(self, fetch_offset: int, max_bytes: int) -> FetchData:
        """Whole batches for a follower from `fetch_offset` up to the log end (a follower's fetch is what moves
        the high watermark, so it reads past it), at least one; OFFSET_OUT_OF_RANGE outside the log."""
        with self._lock:
            self._check_open()
            if fetch_offset < self.log_start_offset or fetch_offset > self._log_end_offset:
                raise OffsetOutOfRangeError(
                    f"[OFFSET_OUT_OF_RANGE] a follower asked {self.topic}-{self.partition} for offset {fetch_offset}, "
                    f"outside [{self.log_start_offset}, {self._log_end_offset}]")
            spans, _end = self._spans(fetch_offset, self._log_end_offset, max_bytes)
            high_watermark, lso = self._high_watermark, self._last_stable_offset()
        return FetchData(self._read_checked(spans), high_watermark, lso, self.log_start_offset)

    # ------------------------------------------------------------ the high watermark

    def set_high_watermark(self, high_watermark: int) -> int:
        """Replication moved the high watermark (the leader's ISR reached it, or the leader said so to this
        follower); it never passes what this replica has fsynced and never goes back. Returns it now."""
        with self._lock:
            self._replicated_hw = max(self._replicated_hw, high_watermark)
            self._advance_high_watermark()
            return self._high_watermark

    def _high_watermark_target(self) -> int:
        return min(self._synced_end, self._replicated_hw)

    def _high_watermark_moved(self, mark: int) -> None:
        try:
            self._files.high_watermark_file.record(mark)
        except OSError as error:
            if not self._high_watermark_file_failed:
                self._high_watermark_file_failed = True
                logger.warning("%s-%s: cannot record the high watermark (%s); after a restart this replica "
                               "serves from an older one until replication moves it", self.topic, self.partition,
                               error)

    def _highest_fetch_offset(self, high_watermark: int) -> int:
        # a replica's high watermark may trail its log end for a while (a new leader's, before its followers
        # fetch): offsets between them read as empty, as Kafka's do, instead of resetting the consumer
        return self._log_end_offset

    def _closing_files(self) -> None:
        self._files.high_watermark_file.close()

    # ------------------------------------------------------------ cutting back

    def truncate_to(self, offset: int) -> int:
        """Cut the log so that it keeps only whole batches below `offset` (Kafka's truncateTo): the batch
        holding `offset` goes too. Returns the log end after the cut. The producer state and aborted index
        are rebuilt from the newest snapshot at or below it, the epoch cache loses the epochs past it, and
        writes waiting for a removed offset fail with NOT_LEADER_OR_FOLLOWER. The recovery point and high
        watermark come down first, so a crash mid-cut is not taken for damage."""
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                return self._log_end_offset
            if offset < self.log_start_offset:
                raise OffsetOutOfRangeError(f"[OFFSET_OUT_OF_RANGE] cannot cut {self.topic}-{self.partition} at "
                                            f"{offset}, below its log start {self.log_start_offset}")
            first_cut = max(0, self._find_segment(offset))
            position, end = self._segments[first_cut].batch_reaching(offset)
            self._cuts += 1
            self._recovery_point.restart_at(end, self.leader_epoch)
            if self._high_watermark > end:
                self._files.high_watermark_file.restart_at(end, self.leader_epoch)
            self._cut_segments(first_cut, position)
            doomed = [file for file in list_snapshots(self.directory, self.storage) if file.offset > end]
            delete_snapshots(self.directory, doomed, storage=self.storage)
            loaded = load_producer_state(self.directory, self._segments, f"{self.topic}-{self.partition}",
                                         storage=self.storage)
            self._state, self._aborted = loaded.state, loaded.aborted
            self._log_end_offset, self._synced_end = end, min(self._synced_end, end)
            # the batch cut may straddle a log start set inside it (DeleteRecords): the log start comes down to the
            # end, never past it (Kafka's truncateTo does the same)
            self._log_start = min(self._log_start, end)
            self._high_watermark = min(self._high_watermark, end)
            self._replicated_hw = min(self._replicated_hw, end)
            self._state.on_high_watermark(self._high_watermark)
            epoch_checkpoint.truncate_from(self.directory, self._files.epochs, end, self.storage)
            self._committer.cut_back(end)
            self._data_ready.notify_all()
        logger.info("%s-%s: cut back to offset %d to follow its leader's history", self.topic, self.partition, end)
        return end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Throw the whole log away and start it again, empty, at `offset` (Kafka's truncateFullyAndStartAt): a
        follower whose log ends below its leader's log start has nothing the leader could send on from."""
        with self._lock:
            self._check_open()
            if offset < self._log_end_offset:
                raise ValueError(f"{self.topic}-{self.partition} ends at {self._log_end_offset}; starting over at "
                                 f"{offset} would drop offsets a cut should")
            self._cuts += 1
            self._recovery_point.restart_at(offset, self.leader_epoch)
            self._files.high_watermark_file.restart_at(offset, self.leader_epoch)
            write_log_start(self.directory, offset, self.storage, fsync=self.config.fsync)
            for segment in self._segments:
                segment.close()
                delete_segment_files(segment.path, self.storage)
            delete_snapshots(self.directory, list_snapshots(self.directory, self.storage), storage=self.storage)
            self._segments = [Segment.create(self.directory, offset, self.leader_epoch, self.storage)]
            self._segment_bases = [offset]
            self._state, self._aborted = ProducerStateTable(), AbortedTxnIndex()
            self._log_start = self._log_end_offset = self._synced_end = offset
            self._high_watermark = self._replicated_hw = offset
            self._files.epochs = EpochCache()
            epoch_checkpoint.write(self.directory, self._files.epochs, self.storage)
            self._committer.start_over(offset)
            self._data_ready.notify_all()
        logger.warning("%s-%s: the log ended below its leader's log start; it starts over, empty, at offset %d",
                       self.topic, self.partition, offset)

    def _cut_segments(self, first_cut: int, position: int) -> None:
        """Truncate segment `first_cut` at byte `position` and delete the segments after it (lock held); an
        emptied segment goes too, unless it is the only one."""
        keep = first_cut + 1 if position > 0 or first_cut == 0 else first_cut
        doomed: list[Segment] = self._segments[keep:]
        if keep > first_cut:
            segment = self._segments[first_cut]
            if self.storage.exists(index_path(segment.path)):  # a saved index describes the file before the cut
                self.storage.delete(index_path(segment.path))
            try:
                segment.truncate(position)
            except OSError as error:
                raise KafkaStorageError(f"cannot cut {segment.path} at byte {position}: {error}") from error
        for segment in doomed:
            segment.close()
            delete_segment_files(segment.path, self.storage)
        del self._segments[keep:], self._segment_bases[keep:]
        if doomed:
            self.storage.fsync_directory(self.directory)

    def _cut_at_damage(self) -> None:
        """Check, once, on open, each batch that saved indexes vouch for only by position (a flipped byte in a
        sealed segment), and cut at the first damaged one: the leader has the rest to send again."""
        for segment in list(self._segments):
            damage = segment.verify()
            if damage is not None:
                offset, position, problem = damage
                logger.error("log recovery: %s-%s: %s is damaged at byte %d, offset %d (%s); this replica is cut "
                             "there and fetches offsets %d to %d again from its leader", self.topic, self.partition,
                             segment.path, position, offset, problem, offset, self.log_end_offset - 1)
                self.truncate_to(offset)
                return
