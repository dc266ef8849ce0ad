"""The group coordinator: the __consumer_offsets shards this node owns, their groups' offsets (plain and
transactional) and, through GroupMembership (membership.py), their membership. No gRPC here: it runs over
the node's I/O (coordinator/runtime/io.py), so the simulator runs this same driver on its simulated clock,
disk and network.

Every change is appended to the shard's log under the group's lock and applied or answered only once the
I/O says it is durable (prepare, append, make durable, apply), so memory always equals what a replay of
the log rebuilds. The group lock is reentrant: the node's I/O may call back on the caller's thread (it
fsyncs inline), and a membership write's callback takes the lock its write was made under. Transactional
offsets stay pending per producer id until its marker reaches the shard. Every `snapshot_interval_records`
writes the shard is snapshotted from its durable log apart from the caller (snapshots.py), so loading
replays only the tail after the newest snapshot. Each group's deadlines (initial delay, rebalance
timeout, session expiry) are one timer on the I/O, armed at the group's next deadline.
Request-level failures are raised as KafkaError or handed to `done` (the servicers turn them into error
codes); per-partition failures come back in the response.
"""
from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from coordinator.group import log_format, snapshots
from coordinator.group.classic import GroupConfig, GroupState
from coordinator.group.membership import GroupMembership
from coordinator.group.metadata import GroupMetadata, PartitionCount
from coordinator.group.offsets import (
    add_pending,
    check_txn_offset_request,
    fetch_offsets,
    prepare_txn_offset_commit,
)
from coordinator.group.shard import Shard, ShardLoad
from coordinator.group.validation import (
    map_append_error,
    validate_group_id,
    validate_offsets,
)
from coordinator.observers import NO_OBSERVER, GroupObserver
from coordinator.runtime.io import Failures, NodeIO, wait_for
from coordinator.runtime.shard_status import ShardStatus, still_loading
from coordinator.shard_snapshots import SnapshottedLog
from coordinator.verification import AsyncVerifier, Codes, verification_error
from partitions.model import AppendOrigin, AppendResult
from proto import consumer_protocol
from proto import txnsim_pb2 as pb
from proto.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InvalidRequestError,
    KafkaError,
    NonEmptyGroupError,
    NotCoordinatorError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from proto.hashing import partition_for
from proto.planted_bugs import PlantedBug
from proto.records import encode_batch
from proto.structs import CONSUMER_OFFSETS_TOPIC, TopicPartition

logger = logging.getLogger(__name__)


#: what a write's continuation gets: None once it is durable, else why not (a coordinator error)
Written = Callable[["KafkaError | None"], None]
#: a callback-style request's outcome: its response, or the KafkaError that stands for one
Done = Callable[[Any], None]


def _random_member_id(client_id: str, instance_id: str | None) -> str:
    """Kafka's form: the client id (or the instance id of a static member), a dash, a random UUID."""
    return f"{instance_id or client_id or 'consumer'}-{uuid.uuid4()}"


class GroupCoordinator(GroupMembership):
    """Serves the group RPCs for the __consumer_offsets shards loaded into it."""

    def __init__(self, offsets_shards: int, *, io: NodeIO,
                 min_session_timeout_ms: int = 6000, max_session_timeout_ms: int = 1_800_000,
                 partitions_for: PartitionCount | None = None, snapshot_interval_records: int = 1000,
                 initial_rebalance_delay_ms: int = 3000,
                 new_member_id: Callable[[str, str | None], str] = _random_member_id,
                 run_timers: bool = True, observer: GroupObserver = NO_OBSERVER,
                 add_to_transaction: AsyncVerifier | None = None, planted_bug: PlantedBug | None = None) -> None:
        """`run_timers=False` arms no group deadlines: the owner calls expire_members() itself (tests on a
        manual clock). `planted_bug` switches off one protection, for the simulator's planted bugs only."""
        if offsets_shards < 1:
            raise ValueError(f"offsets_shards must be at least 1, not {offsets_shards}")
        if snapshot_interval_records < 1:
            raise ValueError(f"snapshot_interval_records must be at least 1, not {snapshot_interval_records}")
        self.offsets_shards = offsets_shards
        #: asks a transaction's coordinator to add partitions to it (the node's; None: TxnOffsetCommit's
        #: implicit add is refused)
        self._add_to_transaction = add_to_transaction
        self._io = io
        self._now_ms = io.now_ms
        self._observer = observer
        self._planted_bug = planted_bug
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self._partitions_for = partitions_for
        self._lock = threading.Lock()
        self._shards: dict[int, Shard] = {}
        self._snapshot_interval = snapshot_interval_records
        self._closed = False
        self._group_config = GroupConfig(initial_rebalance_delay_ms, min_session_timeout_ms, max_session_timeout_ms,
                                         planted_bug=planted_bug)
        self._new_member_id = new_member_id
        self._run_timers = run_timers

    # ------------------------------------------------------------ shards

    def shard_of(self, group_id: str) -> int:
        return partition_for(group_id, self.offsets_shards)

    def owns_group(self, group_id: str) -> bool:
        """True while this coordinator owns the group's shard (loaded or still loading)."""
        with self._lock:
            return self.shard_of(group_id) in self._shards

    def load_shard(self, shard: int, log: Any) -> ShardLoad | None:
        """Load the shard (newest snapshot + log tail), then serve it; meanwhile its groups get
        COORDINATOR_LOAD_IN_PROGRESS. None when the shard was unloaded while it replayed."""
        state = Shard(shard, log, snapshotted=isinstance(log, SnapshottedLog))
        with self._lock:
            self._shards[shard] = state
        try:
            loaded = self._replay(state)
        except Exception:
            with self._lock:
                if self._shards.get(shard) is state:
                    del self._shards[shard]
            raise
        while True:  # markers that came in during the replay are applied before anyone is served
            with self._lock:
                if self._shards.get(shard) is not state:
                    return None
                deferred, state.deferred = state.deferred, []
                if not deferred:
                    state.status = ShardStatus.SERVING
                    break
            for producer_id, committed, marker_offset in deferred:
                self._complete(state, producer_id, committed, marker_offset)
        logger.info("loaded __consumer_offsets-%d: %d groups, snapshot at %s, %d log records replayed", shard,
                    len(state.groups), loaded.snapshot_offset, loaded.replayed)
        for group in list(state.groups.values()):
            with group.lock:
                if group.offsets:
                    self._observer.offsets_committed(group.group_id,
                                                     {tp: value.offset for tp, value in group.offsets.items()})
                self._arm(state, group)
        self._drop_offsets_of_deleted_topics(state)
        return loaded

    def unload_shard(self, shard: int) -> None:
        with self._lock:
            state = self._shards.pop(shard, None)
        if state is not None:
            self._cancel_timers(state)
            self._fail_waiters(state, NotCoordinatorError(
                f"[NOT_COORDINATOR] __consumer_offsets-{shard} moved away; find the coordinator again"))

    def close(self) -> None:
        """Stop: JoinGroups and SyncGroups held at a barrier hear NOT_COORDINATOR now (a held join can wait out
        a five-minute rebalance timeout, holding up the node's exit), nothing new is served, the groups' timers
        stop, and snapshots not yet taken are skipped (the log still holds everything, so only the next load's
        replay is longer)."""
        with self._lock:
            self._closed = True
            shards = list(self._shards.values())
        for state in shards:
            self._cancel_timers(state)
            self._fail_waiters(state, _stopping(state))

    def loaded_shards(self) -> list[int]:
        """Shards this coordinator owns now (loaded or loading)."""
        with self._lock:
            return list(self._shards)

    def _replay(self, shard: Shard) -> ShardLoad:
        """Rebuild the shard's groups from its newest snapshot and the log after it (replay.py)."""
        contents = snapshots.restore(shard.log, shard.number, self._now_ms(), to_log_end=True)
        for group in contents.groups.values():
            self._configure(group)
        shard.groups, shard.txn_groups = contents.groups, contents.txn_groups
        return ShardLoad(contents.snapshot_offset, contents.replayed)

    def _group(self, group_id: str, *, create: bool) -> tuple[Shard, GroupMetadata | None]:
        validate_group_id(group_id)
        number = self.shard_of(group_id)
        with self._lock:
            shard = self._shards.get(number)
            if shard is None:
                raise NotCoordinatorError(f"[NOT_COORDINATOR] this node does not own __consumer_offsets-{number}, "
                                          f"the shard of group {group_id!r}; find the coordinator again")
            if shard.status is ShardStatus.LOADING:
                raise still_loading(f"__consumer_offsets-{number}")
            group = shard.groups.get(group_id)
            if create and (group is None or group.classic.state is GroupState.DEAD):
                group = shard.groups[group_id] = self._configure(GroupMetadata(group_id))
            return shard, group

    def _configure(self, group: GroupMetadata) -> GroupMetadata:
        group.classic.config = self._group_config
        group.classic.new_member_id = self._new_member_id
        return group

    def _check_serving(self, shard: Shard) -> None:
        with self._lock:
            if self._closed:
                raise _stopping(shard)
            if self._shards.get(shard.number) is not shard:
                raise NotCoordinatorError(f"[NOT_COORDINATOR] __consumer_offsets-{shard.number} moved away; "
                                          f"find the coordinator again")

    def _check_still_leader(self, shard: Shard) -> None:
        """NOT_COORDINATOR if a later owner claimed the shard's log: a node woken from a stall past its
        session would otherwise answer from offsets the new owner has moved on from (a copier that
        restarted from them would copy twice). After the read, so the answer was current when read."""
        if self._taken_over(shard):
            raise NotCoordinatorError(f"[NOT_COORDINATOR] __consumer_offsets-{shard.number} was taken over by "
                                      "another node; find the coordinator again")

    @staticmethod
    def _taken_over(shard: Shard) -> bool:
        """Whether a later owner has claimed the shard's log (a stat of its claims; see _check_still_leader)."""
        return bool(getattr(shard.log, "fenced", False))

    def _append(self, shard: Shard, batch: bytes, *, offsets: bool = False) -> AppendResult:
        """Append `batch` to the shard's log, not yet durable (`_when_durable` makes it so). Failures raise as
        coordinator errors (§2)."""
        try:
            result: AppendResult = shard.log.append(batch, origin=AppendOrigin.COORDINATOR, wait_durable=False)
        except KafkaError as exc:
            raise map_append_error(exc, shard.number, offsets=offsets) from None
        except OSError as exc:
            raise NotCoordinatorError(f"[NOT_COORDINATOR] __consumer_offsets-{shard.number} cannot be written: "
                                      f"{exc}") from None
        return result

    def _when_durable(self, shard: Shard, appended: AppendResult, records: int, then: Written, *,
                      offsets: bool = False) -> None:
        """Make the shard's log durable through `appended`, then `then(None)`, or `then(error)` with what its
        clients hear when it could not be (or the shard moved away meanwhile)."""
        def durable(failures: Failures) -> None:
            for exc in failures.values():
                then(map_append_error(exc, shard.number, offsets=offsets))
                return
            self._wrote(shard, records)
            try:
                self._check_serving(shard)
            except KafkaError as exc:
                then(exc)
                return
            then(None)
        self._io.durable({shard.log: appended.last_offset + 1}, durable)

    def _write(self, shard: Shard, batch: bytes, records: int, then: Written, *, offsets: bool = False) -> None:
        """Append `batch` (of `records` records) and make it durable; then `then` as _when_durable."""
        try:
            appended = self._append(shard, batch, offsets=offsets)
        except KafkaError as exc:
            then(exc)
            return
        self._when_durable(shard, appended, records, then, offsets=offsets)

    def _write_blocking(self, shard: Shard, batch: bytes, records: int, *, offsets: bool = False) -> None:
        """_write, waited for on the caller's thread (the admin paths: deletions); raises what it failed with.
        Only for a node process: the node's I/O completes the write on its own threads."""
        wait_for(lambda done: self._write(shard, batch, records, done, offsets=offsets))

    # ------------------------------------------------------------ snapshots

    def _wrote(self, shard: Shard, records: int) -> None:
        """Count records written to the shard; every snapshot interval, snapshot it apart from the caller."""
        if not shard.snapshotted:
            return
        with self._lock:
            shard.writes_since_snapshot += records
            if self._closed or shard.writes_since_snapshot < self._snapshot_interval:
                return
            shard.writes_since_snapshot = 0
        self._io.soon(functools.partial(self._snapshot, shard), f"snapshot of __consumer_offsets-{shard.number}")

    def _snapshot(self, shard: Shard) -> None:
        """Snapshot the shard from its durable log and drop the segments the previous snapshot covers."""
        with self._lock:
            if self._closed or self._shards.get(shard.number) is not shard:
                return  # moved away meanwhile: the next owner snapshots
        try:
            contents = snapshots.take_snapshot(shard.log, shard.number)
        except KafkaError as exc:  # the log was closed or fenced meanwhile
            logger.info("__consumer_offsets-%d: snapshot skipped: %s", shard.number, exc)
            return
        except OSError as exc:  # the log keeps everything; the next interval tries again
            logger.warning("__consumer_offsets-%d: snapshot failed: %s", shard.number, exc)
            return
        logger.info("__consumer_offsets-%d: snapshot of %d groups up to offset %d", shard.number,
                    len(contents.groups), contents.next_offset)
        self._observer.shard_snapshotted(CONSUMER_OFFSETS_TOPIC, shard.number, contents.next_offset,
                                         shard.log.log_start_offset)

    # ------------------------------------------------------------ offsets

    def offset_commit(self, req: pb.OffsetCommitRequest) -> pb.OffsetCommitResponse:
        """OffsetCommit, waited for on the caller's thread (a node process's front doors)."""
        return wait_for(functools.partial(self.offset_commit_async, req))  # type: ignore[no-any-return]

    def offset_commit_async(self, req: pb.OffsetCommitRequest, done: Done) -> None:
        """OffsetCommit: the offsets are written, then applied and answered once durable."""
        try:
            shard, group = self._group(req.group_id, create=req.generation_id < 0)
            if group is None:  # Kafka: only a commit outside any generation creates a group
                raise IllegalGenerationError(f"[ILLEGAL_GENERATION] group {req.group_id!r} does not exist, so "
                                             f"generation {req.generation_id} is not current")
            now = self._now_ms()
            with group.lock:
                self._check_serving(shard)
                group.classic.validate_offset_commit(req.generation_id, req.member_id,
                                                     req.group_instance_id or None, transactional=False)
                results, accepted = validate_offsets(req.offsets, now, self._partition_exists)
                appended = None
                if accepted:
                    records = [(now, log_format.offset_key(group.group_id, tp), log_format.encode_offset(v), ())
                               for tp, v in accepted]
                    appended = self._append(shard, encode_batch(records), offsets=True)
                else:
                    group.classic.commit_heartbeat(now, req.member_id)
        except KafkaError as exc:
            done(exc)
            return
        response = pb.OffsetCommitResponse(results=results)
        if appended is None:
            done(response)
            return

        def written(error: KafkaError | None) -> None:
            if error is not None:
                done(error)
                return
            assert appended is not None
            with group.lock:
                for i, (tp, value) in enumerate(accepted):
                    group.apply_commit(tp, replace(value, log_offset=appended.base_offset + i))
                group.classic.commit_heartbeat(now, req.member_id)
                current = {tp: group.offsets[tp].offset for tp, _ in accepted if tp in group.offsets}
            self._observer.offsets_committed(group.group_id, current)
            done(response)
        self._when_durable(shard, appended, len(accepted), written, offsets=True)

    def txn_offset_commit(self, req: pb.TxnOffsetCommitRequest) -> pb.TxnOffsetCommitResponse:
        """TxnOffsetCommit, waited for on the caller's thread (a node process's front doors)."""
        return wait_for(functools.partial(self.txn_offset_commit_async, req))  # type: ignore[no-any-return]

    def txn_offset_commit_async(self, req: pb.TxnOffsetCommitRequest, done: Done) -> None:
        """TxnOffsetCommit: the offsets are written as the producer's transactional batch and stay pending
        until its marker; answered once durable."""
        try:
            check_txn_offset_request(req)
        except KafkaError as exc:
            done(exc)
            return
        if not req.add_partitions:
            self._txn_offset_commit(req, done)
            return
        # Transactions V2's TxnOffsetCommit (Kafka's v5): the group's offsets partition joins the transaction
        # here, durably at its coordinator before any offset is written, instead of by the producer's
        # AddOffsetsToTxn. Asked before the group's lock is taken: the coordinator may hold the call until
        # the previous transaction's markers, one of which this node may have to write.
        tp = TopicPartition(CONSUMER_OFFSETS_TOPIC, partition_for(req.group_id, self.offsets_shards))
        if self._add_to_transaction is None:
            done(InvalidRequestError("[INVALID_REQUEST] this group coordinator cannot add the offsets partition "
                                     "to a transaction; send AddOffsetsToTxn first"))
            return

        def added(codes: Codes) -> None:
            error = verification_error(codes.get(tp, UnknownServerError.errno), req.transactional_id, tp,
                                       req.producer_id, req.producer_epoch)
            if error is not None:
                done(error)
            else:
                self._txn_offset_commit(req, done)
        self._add_to_transaction(req.transactional_id, req.producer_id, req.producer_epoch, [tp], True, added)

    def _txn_offset_commit(self, req: pb.TxnOffsetCommitRequest, done: Done) -> None:
        try:
            shard, group = self._group(req.group_id, create=True)
            assert group is not None
            now = self._now_ms()
            with group.lock:
                self._check_serving(shard)
                write = prepare_txn_offset_commit(group, req, now, self._partition_exists,
                                                  check_generation=self._planted_bug is not PlantedBug.NO_GENERATION_FENCE)
                appended = None
                if write.batch is not None:
                    with self._lock:  # registered before the write, so a marker racing it finds this group
                        shard.txn_groups.setdefault(req.producer_id, set()).add(group.group_id)
                    appended = self._append(shard, write.batch, offsets=True)
                    # pending from the append on, as a replay of the log has them: a marker that lands before
                    # the fsync completes them (they stay invisible until then either way)
                    add_pending(group, req.producer_id, write, appended.base_offset)
        except KafkaError as exc:
            done(exc)
            return
        response = pb.TxnOffsetCommitResponse(results=write.results)
        if appended is None:
            done(response)
            return
        self._when_durable(shard, appended, len(write.accepted), lambda error: done(error or response),
                           offsets=True)

    def offset_fetch(self, req: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
        shard, group = self._group(req.group_id, create=False)
        honour = self._planted_bug is not PlantedBug.UNSTABLE_OFFSET_FETCH
        if group is None:
            return fetch_offsets(None, req, honour_require_stable=honour)
        with group.lock:
            self._check_serving(shard)
            answer = fetch_offsets(group, req, honour_require_stable=honour)
        self._check_still_leader(shard)
        return answer

    def delete_topic_offsets(self, topic: str) -> int:
        """Tombstone every group's committed and pending offsets of `topic` in the shards loaded here (the
        topic was deleted: Kafka's GroupCoordinator.onPartitionsDeleted), so a topic created again under the
        name starts with no committed offsets. Returns how many were removed."""
        with self._lock:
            shards = [shard for shard in self._shards.values() if shard.status is ShardStatus.SERVING]
        removed: list[int] = []
        for shard in shards:
            for group in list(shard.groups.values()):
                self._tombstone(shard, group, topic, done=removed.append, wait=True)
        return sum(removed)

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Kafka's OffsetDelete: the group's offsets of `partitions` go (tombstoned), except of topics its members
        are subscribed to (GROUP_SUBSCRIBED_TO_TOPIC). The error code of each partition; GROUP_ID_NOT_FOUND for no
        group, NON_EMPTY_GROUP for a group with members that is not a consumer group."""
        shard, group = self._group(group_id, create=False)
        if group is None or group.classic.state is GroupState.DEAD:
            raise GroupIdNotFoundError(f"[GROUP_ID_NOT_FOUND] group {group_id!r} does not exist")
        codes: dict[TopicPartition, int] = {}
        with group.lock:
            classic = group.classic
            if not classic.is_empty() and classic.protocol_type != consumer_protocol.PROTOCOL_TYPE:
                raise NonEmptyGroupError(f"[NON_EMPTY_GROUP] group {group_id!r} has members and is not a consumer "
                                         "group")
            subscribed = set()
            for member in classic.members.values():
                try:
                    subscribed.update(consumer_protocol.decode_subscription(member.metadata(classic.protocol_name)))
                except ValueError:
                    continue
            doomed = set()
            for tp in partitions:
                if not self._partition_exists(tp):
                    codes[tp] = UnknownTopicOrPartitionError.errno
                elif tp.topic in subscribed:
                    codes[tp] = GroupSubscribedToTopicError.errno
                else:
                    codes[tp] = 0
                    if tp in group.offsets or tp in group.pending_partitions():
                        doomed.add(tp)
        if doomed:
            self._tombstone(shard, group, partitions=doomed, wait=True)
        return codes

    def _tombstone(self, shard: Shard, group: GroupMetadata, topic: str | None = None, *,
                   partitions: set[TopicPartition] | None = None, done: Callable[[int], None] = lambda count: None,
                   wait: bool = False) -> None:
        """Tombstone the group's offsets of `topic` (or of `partitions`), then forget them; `done(count)` with
        how many went. With `wait`, on the caller's thread (admin paths, in a node process only)."""
        with group.lock:
            doomed = group.partitions_of(topic) if topic is not None else set(partitions or ())
            if not doomed:
                done(0)
                return
            why = f"deleted topic {topic}" if topic is not None else "OffsetDelete"

            def written(error: KafkaError | None) -> None:
                if error is not None:  # moved away meanwhile: its next owner drops them at load
                    logger.warning("group %r keeps its offsets of %s for now: %s", group.group_id, why, error)
                    done(0)
                    return
                with group.lock:
                    group.remove_offsets(doomed)
                logger.info("group %r: offsets of %s removed (%d partitions)", group.group_id, why, len(doomed))
                done(len(doomed))
            try:
                self._check_serving(shard)
            except KafkaError as exc:
                written(exc)
                return
            now = self._now_ms()
            batch = encode_batch([(now, log_format.offset_key(group.group_id, tp), None, ()) for tp in sorted(doomed)])
            if not wait:
                self._write(shard, batch, len(doomed), written, offsets=True)
                return
        try:
            self._write_blocking(shard, batch, len(doomed), offsets=True)
        except KafkaError as exc:
            written(exc)
            return
        written(None)

    def _drop_offsets_of_deleted_topics(self, shard: Shard) -> None:
        """After a load: offsets of topics that no longer exist (deleted while no node had this shard loaded)
        are tombstoned as the deletion would have."""
        if self._partitions_for is None:
            return
        topics = {tp.topic for group in list(shard.groups.values()) for tp in set(group.offsets)
                  | group.pending_partitions()}
        for topic in sorted(topics):
            try:
                exists = self._partitions_for(topic) is not None
            except KafkaError:
                continue  # cannot tell now (topics.json unreadable): keep them
            if not exists:
                for group in list(shard.groups.values()):
                    self._tombstone(shard, group, topic)

    def _partition_exists(self, tp: TopicPartition) -> bool:
        if not tp.topic or tp.partition < 0:
            return False
        if self._partitions_for is None:
            return True
        try:
            count = self._partitions_for(tp.topic)
        except KafkaError:
            return False
        return count is not None and tp.partition < count

    # ------------------------------------------------------------ transaction markers

    def complete_transaction(self, shard: int, producer_id: int, committed: bool,
                             marker_offset: int | None = None) -> None:
        """The node appended a COMMIT/ABORT marker of `producer_id` to shard `shard`: apply or drop its offsets.

        `marker_offset` (the marker's offset, when known) keeps offsets written after the
        marker pending, exactly as a replay would.
        """
        with self._lock:
            state = self._shards.get(shard)
            if state is None:
                return
            if state.status is ShardStatus.LOADING:
                state.deferred.append((producer_id, committed, marker_offset))
                return
        self._complete(state, producer_id, committed, marker_offset)
        self._wrote(state, 1)  # the node wrote the marker to the shard's log

    def _complete(self, shard: Shard, producer_id: int, committed: bool, marker_offset: int | None) -> None:
        with self._lock:
            names = list(shard.txn_groups.get(producer_id, ()))
        for name in names:
            group = shard.groups.get(name)
            if group is None:
                continue
            with group.lock:
                group.complete_pending(producer_id, committed, marker_offset)
                done = producer_id not in group.pending
                current = {tp: value.offset for tp, value in group.offsets.items()} if committed else {}
            if current:
                self._observer.offsets_committed(name, current)
            if done:
                with self._lock:
                    remaining = shard.txn_groups.get(producer_id)
                    if remaining is not None:
                        remaining.discard(name)
                        if not remaining:
                            del shard.txn_groups[producer_id]
        logger.debug("__consumer_offsets-%d: %s of producer %d applied to %d groups", shard.number,
                  "COMMIT" if committed else "ABORT", producer_id, len(names))


def _stopping(shard: Shard) -> NotCoordinatorError:
    """What the shard's members hear from a closed coordinator: held JoinGroups and SyncGroups at close,
    every request after."""
    return NotCoordinatorError(
        f"[NOT_COORDINATOR] this node is stopping; find the coordinator of __consumer_offsets-{shard.number} again")
