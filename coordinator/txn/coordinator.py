"""The transaction coordinator: Kafka's protocol, transactions V2 (KIP-890) for txnsim's producer and V1 for
Kafka clients on the wire port, per owned shard.

Invariants: at most one pending transition per transactional id (others get
CONCURRENT_TRANSACTIONS); metadata changes only after its log entry is durable and only if the
shard's coordinator epoch is unchanged; Prepare* is durable before EndTxn answers, markers
go out after, and Complete* is written only when every partition acknowledged its marker.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from coordinator.producer_ids import ProducerIdAllocator
from coordinator.txn import state_log
from coordinator.txn.batch_metadata import BatchTxn
from coordinator.txn.batches import BatchTransactions
from coordinator.txn.markers import Marker, MarkerWriter
from coordinator.txn.metadata import MAX_CLIENT_EPOCH, NO_EPOCH, NO_PRODUCER_ID, TxnMetadata
from partitions import PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
    code_of,
)
from proto.hashing import partition_for
from proto.structs import (
    CONSUMER_OFFSETS_TOPIC,
    MAX_TRANSACTIONAL_ID_LENGTH,
    TopicPartition,
    TransactionState,
)

S = TransactionState
log = logging.getLogger(__name__)
V = TypeVar("V", TxnMetadata, BatchTxn)
#: how long a new transaction's AddPartitions waits for the previous one's markers before it is answered
#: CONCURRENT_TRANSACTIONS (markers are retried until acknowledged; a partition owner down takes longer)
PREVIOUS_END_HOLD_S = 1.0
_KIND_NAMES = {TxnMetadata: "a transactional id", BatchTxn: "a batch transaction id (txnsim extension)"}


@dataclass
class TxnShard:
    """The in-memory cache of one owned __transaction_state partition."""

    shard: int
    log: PartitionLog
    coordinator_epoch: int
    loading: bool = True
    #: transactional ids and batch transaction ids (txnsim's extension) share the shard's keys
    entries: dict[str, TxnMetadata | BatchTxn] = field(default_factory=dict)
    pending: dict[str, TransactionState] = field(default_factory=dict)
    #: the phase-two completion of each Prepare* being completed
    completing: dict[str, Future] = field(default_factory=dict)
    writes_since_snapshot: int = 0


class TransactionCoordinator:
    def __init__(self, *, txn_shards: int, offsets_shards: int, transaction_max_timeout_ms: int,
                 transactional_id_expiration_ms: int, allocator: ProducerIdAllocator,
                 markers: MarkerWriter, partitions_for: Callable[[str], int | None],
                 now_ms: Callable[[], int], snapshot_interval_records: int = 1000,
                 assigned_here: Callable[[int], bool] = lambda shard: False) -> None:
        self.txn_shards = txn_shards
        self.offsets_shards = offsets_shards
        self.max_timeout_ms = transaction_max_timeout_ms
        self.expiration_ms = transactional_id_expiration_ms
        self._allocator = allocator
        self._markers = markers
        self._partitions_for = partitions_for
        self._now_ms = now_ms
        self._lock = threading.RLock()
        self._written = threading.Condition(self._lock)  # a pending write landed (or failed)
        self._shards: dict[int, TxnShard] = {}
        self._completions = ThreadPoolExecutor(max_workers=8, thread_name_prefix="txn-complete")
        self._snapshot_interval = snapshot_interval_records
        #: whether the placement gives `shard` to this node (then a request arriving before the
        #: takeover registered it hears COORDINATOR_LOAD_IN_PROGRESS, not NOT_COORDINATOR)
        self._assigned_here = assigned_here
        self._snapshotter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="txn-snapshot")
        self.batches = BatchTransactions(self)

    # ------------------------------------------------------------ shard ownership

    def shard_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.txn_shards)

    def begin_loading(self, shard: int, shard_log: PartitionLog) -> None:
        with self._lock:
            self._shards[shard] = TxnShard(shard, shard_log, shard_log.leader_epoch)

    def load_shard(self, shard: int, shard_log: PartitionLog) -> None:
        """Replay the shard's log, serve it, then finish every transaction left in Prepare*."""
        if shard not in self._shards or self._shards[shard].log is not shard_log:
            self.begin_loading(shard, shard_log)
        entries, replayed = state_log.load(shard_log)
        log.info("shard %d loaded at coordinator epoch %d: %d ids, %d log records replayed",
                 shard, shard_log.leader_epoch, len(entries), replayed)
        with self._lock:
            state = self._shards[shard]
            state.entries = entries
            state.loading = False
        for meta in entries.values():
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info("shard %d: resending %s markers for %r after load", shard, meta.state, meta.transactional_id)
                self._schedule_completion(shard, state.coordinator_epoch, meta)

    def unload_shard(self, shard: int) -> None:
        with self._lock:
            self._shards.pop(shard, None)

    def owned_shards(self) -> list[TxnShard]:
        with self._lock:
            return list(self._shards.values())

    def close(self) -> None:
        self._completions.shutdown(wait=False, cancel_futures=True)
        self._snapshotter.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ RPCs

    def init_producer_id(self, req: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
        if not req.HasField("transactional_id"):
            return pb.InitProducerIdResponse(producer_id=self._allocator.allocate(), producer_epoch=0)
        tid = req.transactional_id
        self._validate_id(tid)
        self._validate_timeout(req.transaction_timeout_ms)
        shard, epoch = self._owned(tid)
        now = self._now_ms()
        with self._lock:
            self._check_not_pending(shard, tid)
            current = self._entry(shard, tid, TxnMetadata)
            if current is None:
                new = TxnMetadata(tid, self._allocator.allocate(), 0, req.transaction_timeout_ms,
                                  S.EMPTY, last_update_time_ms=now)
                fence = None
            elif current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"[CONCURRENT_TRANSACTIONS] {tid!r} is completing its last transaction ({current.state}); retry")
            elif current.state == S.ONGOING:
                # A new instance fences the old one: abort its transaction at a bumped epoch; the
                # client retries and then gets its own epoch (§4 InitProducerId, Ongoing).
                new = None
                fence = self._fenced_abort(current, now)
            else:
                new = self._bump_for_init(current, req, now)
                fence = None
            shard.pending[tid] = (fence or new).state
        if fence is not None:
            self._persist(shard, epoch, fence)
            self._schedule_completion(shard.shard, epoch, fence)
            raise ConcurrentTransactionsError(
                f"[CONCURRENT_TRANSACTIONS] aborting the open transaction of {tid!r} left by a fenced producer; retry")
        assert new is not None
        if new is current:  # a recognised retry: nothing to write
            with self._lock:
                shard.pending.pop(tid, None)
        else:
            self._persist(shard, epoch, new)
        return pb.InitProducerIdResponse(producer_id=new.producer_id, producer_epoch=new.producer_epoch)

    def add_partitions(self, req: pb.AddPartitionsToTxnRequest) -> pb.AddPartitionsToTxnResponse:
        tid = req.transactional_id
        self._validate_id(tid)
        if not req.partitions:
            raise InvalidRequestError("[INVALID_REQUEST] AddPartitionsToTxn names no partition")
        wanted = [TopicPartition(p.topic, p.partition) for p in req.partitions]
        invalid = [tp for tp in wanted if not self._partition_exists(tp)]
        if invalid:
            return self._partition_results(wanted, {tp: UnknownTopicOrPartitionError.errno for tp in invalid},
                                           OperationNotAttemptedError.errno)
        shard, epoch = self._owned(tid)
        if isinstance(shard.entries.get(tid), BatchTxn):
            if req.verify_only:
                return self.batches.verify(shard.entries[tid], req, wanted)
            return self.batches.add_partitions(shard, epoch, req, wanted)
        if req.verify_only:
            return self._verify(shard, req, wanted)
        with self._lock:
            self._check_producer(shard, tid, req.producer_id, req.producer_epoch)
            self._await_previous_end(shard, tid)
            current = self._check_producer(shard, tid, req.producer_id, req.producer_epoch)
            self._check_not_pending(shard, tid)
            if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"[CONCURRENT_TRANSACTIONS] {tid!r} is still completing its previous transaction; retry")
            now = self._now_ms()
            if current.state == S.ONGOING and set(wanted) <= current.partitions:
                return self._partition_results(wanted, {}, 0)
            start = current.start_time_ms if current.state == S.ONGOING else now
            new = current.transit(S.ONGOING, now, partitions=current.partitions | set(wanted), start_time_ms=start)
            shard.pending[tid] = new.state
        self._persist(shard, epoch, new)
        return self._partition_results(wanted, {}, 0)

    def add_offsets(self, req: pb.AddOffsetsToTxnRequest) -> pb.AddOffsetsToTxnResponse:
        if not req.group_id:
            raise InvalidRequestError("[INVALID_REQUEST] AddOffsetsToTxn needs a group id")
        offsets_partition = partition_for(req.group_id, self.offsets_shards)
        response = self.add_partitions(pb.AddPartitionsToTxnRequest(
            transactional_id=req.transactional_id, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
            partitions=[pb.TopicPartitionRef(topic=CONSUMER_OFFSETS_TOPIC, partition=offsets_partition)]))
        for result in response.results:
            if result.error_code:
                return pb.AddOffsetsToTxnResponse(error_code=result.error_code, error_message=result.error_message)
        return pb.AddOffsetsToTxnResponse()

    def end_txn(self, req: pb.EndTxnRequest, *, transaction_version: int = 2) -> pb.EndTxnResponse:
        """Prepare the commit or abort, durably, then start phase two.

        `transaction_version` is the client's: 2 (txnsim's producer, KIP-890) bumps the epoch at every end;
        1 (Kafka clients, EndTxn < v5) keeps it, so the epoch moves only with InitProducerId, a fence or a
        timeout abort, and a retry is recognised by the same epoch finding the outcome already decided.
        """
        tid = req.transactional_id
        self._validate_id(tid)
        shard, epoch = self._owned(tid)
        now = self._now_ms()
        outcome = "commit" if req.committed else "abort"
        with self._lock:
            current = self._entry(shard, tid, TxnMetadata)
            if current is None:
                raise InvalidProducerIdMappingError(
                    f"[INVALID_PRODUCER_ID_MAPPING] {tid!r} is unknown; call init_transactions() first")
            if transaction_version >= 2:
                # Transactions V2: a retry finds the epoch already bumped by the EndTxn it repeats (§4.7, §12.12).
                retry = self._recognise_end_txn_retry(current, req)
                if retry is not None:
                    return retry
            self._check_producer(shard, tid, req.producer_id, req.producer_epoch)
            self._check_not_pending(shard, tid)
            if transaction_version < 2:  # V1: a retry comes at the same epoch
                decided = self._end_already_decided(current, req.committed)
                if decided is not None:
                    return decided
            if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(f"[CONCURRENT_TRANSACTIONS] {tid!r} is already ending; retry")
            if current.state != S.ONGOING and (req.committed or transaction_version < 2):
                raise InvalidTxnStateError(
                    f"[INVALID_TXN_STATE] cannot {outcome} {tid!r}: it has no ongoing transaction "
                    f"(state {current.state})")
            target = S.PREPARE_COMMIT if req.committed else S.PREPARE_ABORT
            if transaction_version >= 2:
                prepared = self._prepare_end(current, target, now)
            else:
                prepared = current.transit(target, now, ended_by_fence=False)
            shard.pending[tid] = prepared.state
        self._persist(shard, epoch, prepared)
        log.debug("%s: %s prepared at epoch %d (transactions V%d)", tid, outcome, prepared.producer_epoch,
                  transaction_version)
        self._schedule_completion(shard.shard, epoch, prepared)
        pid, new_epoch = self._client_identity(prepared)
        return pb.EndTxnResponse(producer_id=pid, producer_epoch=new_epoch)

    def list_transactions(self, req: pb.ListTransactionsRequest) -> pb.ListTransactionsResponse:
        states = set(req.state_filters)
        pids = set(req.producer_id_filters)
        listings = []
        for shard in self.owned_shards():
            for meta in list(shard.entries.values()):
                pid = meta.producer_id if isinstance(meta, TxnMetadata) else -1
                if (states and meta.state.value not in states) or (pids and pid not in pids):
                    continue
                listings.append(pb.TransactionListing(transactional_id=meta.transactional_id,
                                                      producer_id=pid, state=meta.state.value))
        return pb.ListTransactionsResponse(transactions=sorted(listings, key=lambda t: t.transactional_id))

    def describe_transactions(self, req: pb.DescribeTransactionsRequest,
                              node_id: int) -> pb.DescribeTransactionsResponse:
        out = []
        for tid in req.transactional_ids:
            try:
                shard, _epoch = self._owned(tid)
                meta = shard.entries.get(tid)
                if meta is None:
                    out.append(pb.TransactionDescription(
                        transactional_id=tid, error_code=105,
                        error_message=f"[TRANSACTIONAL_ID_NOT_FOUND] transactional id {tid!r} is unknown"))
                    continue
                ordinary = isinstance(meta, TxnMetadata)
                out.append(pb.TransactionDescription(
                    transactional_id=tid, state=meta.state.value, producer_id=meta.producer_id if ordinary else -1,
                    producer_epoch=meta.producer_epoch if ordinary else -1, timeout_ms=meta.timeout_ms,
                    start_time_ms=meta.start_time_ms, last_update_time_ms=meta.last_update_time_ms,
                    coordinator_id=node_id,
                    partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)
                                for tp in sorted(meta.partitions)]))
            except KafkaError as exc:
                out.append(pb.TransactionDescription(transactional_id=tid, error_code=code_of(exc),
                                                     error_message=str(exc)))
        return pb.DescribeTransactionsResponse(transactions=out)

    # ------------------------------------------------------------ timers

    def abort_timed_out_transactions(self) -> int:
        """Fence and abort every Ongoing transaction past its timeout; returns how many."""
        now = self._now_ms()
        started = 0
        for shard in self.owned_shards():
            if shard.loading:
                continue
            with self._lock:
                expired = [m for m in shard.entries.values()
                           if m.state == S.ONGOING and m.transactional_id not in shard.pending
                           and m.start_time_ms + m.timeout_ms < now]
                fences: list[TxnMetadata | BatchTxn] = []
                for meta in expired:
                    if isinstance(meta, BatchTxn):
                        fence = self.batches.timed_out(meta, now)
                    else:
                        fence = self._fenced_abort(meta, now)
                    shard.pending[meta.transactional_id] = fence.state
                    fences.append(fence)
            for fence in fences:
                log.info("aborting %r: open longer than its timeout (%d ms)", fence.transactional_id,
                         fence.timeout_ms)
                try:
                    self._persist(shard, shard.coordinator_epoch, fence)
                except KafkaError as exc:
                    log.warning("timeout abort of %r failed, will retry: %s", fence.transactional_id, exc)
                    continue
                self._schedule_completion(shard.shard, shard.coordinator_epoch, fence)
                started += 1
        return started

    def expire_transactional_ids(self) -> int:
        """Tombstone ids idle longer than transactional_id_expiration_ms (only when not in a transaction)."""
        now = self._now_ms()
        removed = 0
        for shard in self.owned_shards():
            if shard.loading:
                continue
            with self._lock:
                # batch transaction ids never expire: their last committed batch id must outlive any replay
                idle = [m for m in shard.entries.values()
                        if isinstance(m, TxnMetadata) and m.is_complete and m.transactional_id not in shard.pending
                        and m.last_update_time_ms + self.expiration_ms < now]
                for meta in idle:
                    meta.transit(S.DEAD, now)  # checks the table; Dead is never installed
                    shard.pending[meta.transactional_id] = S.DEAD
            for meta in idle:
                try:
                    state_log.append_entry(shard.log, meta.transactional_id, None)
                    with self._lock:
                        if shard.entries.get(meta.transactional_id) == meta:
                            del shard.entries[meta.transactional_id]
                        removed += 1
                finally:
                    with self._lock:
                        shard.pending.pop(meta.transactional_id, None)
        return removed

    # ------------------------------------------------------------ transitions

    def _bump_for_init(self, current: TxnMetadata, req: pb.InitProducerIdRequest, now: int) -> TxnMetadata:
        if req.producer_id >= 0:  # KIP-360: the caller names the pid/epoch it has
            if req.producer_id == current.producer_id and req.producer_epoch == current.last_producer_epoch:
                return current  # a retry of the bump that already happened
            if req.producer_id != current.producer_id or req.producer_epoch != current.producer_epoch:
                raise ProducerFencedError(
                    f"[PRODUCER_FENCED] {current.transactional_id!r} has producer {current.producer_id} epoch "
                    f"{current.producer_epoch}, not {req.producer_id}/{req.producer_epoch}")
        if current.producer_epoch >= MAX_CLIENT_EPOCH:
            return current.transit(S.EMPTY, now, producer_id=self._allocator.allocate(), producer_epoch=0,
                                   previous_producer_id=current.producer_id, next_producer_id=NO_PRODUCER_ID,
                                   timeout_ms=req.transaction_timeout_ms, partitions=frozenset(),
                                   start_time_ms=-1, last_producer_epoch=NO_EPOCH, ended_by_fence=False)
        return current.transit(S.EMPTY, now, producer_epoch=current.producer_epoch + 1, ended_by_fence=False,
                               last_producer_epoch=current.producer_epoch, timeout_ms=req.transaction_timeout_ms,
                               partitions=frozenset(), start_time_ms=-1)

    def _fenced_abort(self, current: TxnMetadata, now: int) -> TxnMetadata:
        """PrepareEpochFence (never persisted) then PrepareAbort at the bumped epoch."""
        fence = current.transit(S.PREPARE_EPOCH_FENCE, now, producer_epoch=current.producer_epoch + 1,
                                last_producer_epoch=current.producer_epoch, ended_by_fence=True)
        return fence.transit(S.PREPARE_ABORT, now)

    def _prepare_end(self, current: TxnMetadata, target: TransactionState, now: int) -> TxnMetadata:
        """Transactions V2: every end bumps the epoch; on overflow the next pid takes over at Complete*."""
        if current.producer_epoch + 1 >= MAX_CLIENT_EPOCH:
            return current.transit(target, now, producer_epoch=current.producer_epoch + 1,
                                   last_producer_epoch=current.producer_epoch, ended_by_fence=False,
                                   next_producer_id=self._allocator.allocate())
        return current.transit(target, now, producer_epoch=current.producer_epoch + 1,
                               last_producer_epoch=current.producer_epoch, ended_by_fence=False)

    @staticmethod
    def _client_identity(meta: TxnMetadata) -> tuple[int, int]:
        """The pid/epoch the client uses next: the rotated pid at epoch 0 if one is reserved."""
        if meta.next_producer_id != NO_PRODUCER_ID:
            return meta.next_producer_id, 0
        return meta.producer_id, meta.producer_epoch

    def _recognise_end_txn_retry(self, current: TxnMetadata, req: pb.EndTxnRequest) -> pb.EndTxnResponse | None:
        if current.ended_by_fence:
            return None  # the bump was a fence: the caller is the fenced producer, not a retry
        bumped_from_request = (
            (req.producer_id == current.producer_id and current.producer_epoch == req.producer_epoch + 1)
            or (req.producer_id == current.previous_producer_id and current.producer_epoch == 0
                and current.next_producer_id == NO_PRODUCER_ID))
        if not bumped_from_request:
            return None
        return self._end_already_decided(current, req.committed)

    @staticmethod
    def _end_already_decided(current: TxnMetadata, committed: bool) -> pb.EndTxnResponse | None:
        """The answer to an EndTxn retried after its outcome was decided: NONE once that outcome is complete, as
        Kafka answers; None if `current` holds no decision. Raises CONCURRENT_TRANSACTIONS while the same outcome
        is still completing and INVALID_TXN_STATE if the other one was decided."""
        same_outcome_done = S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT
        same_outcome_pending = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
        if current.state == same_outcome_done:
            return pb.EndTxnResponse(producer_id=current.producer_id, producer_epoch=current.producer_epoch)
        if current.state == same_outcome_pending:
            raise ConcurrentTransactionsError(
                f"[CONCURRENT_TRANSACTIONS] the {same_outcome_pending} of {current.transactional_id!r} is completing")
        if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            raise InvalidTxnStateError(
                f"[INVALID_TXN_STATE] {current.transactional_id!r} already ended with {current.state}")
        return None

    def _schedule_completion(self, shard_id: int, coordinator_epoch: int,
                             prepared: TxnMetadata | BatchTxn) -> Future:
        completion = self._completions.submit(self._complete, shard_id, coordinator_epoch, prepared)
        with self._lock:
            shard = self._shards.get(shard_id)
            if shard is not None:
                shard.completing[prepared.transactional_id] = completion
        return completion

    def _completion_of(self, shard: TxnShard, tid: str) -> Future | None:
        return shard.completing.get(tid)

    def _complete(self, shard_id: int, coordinator_epoch: int, prepared: TxnMetadata | BatchTxn) -> bool:
        """Phase two: markers to every partition (in parallel, until acknowledged), then Complete*.
        True once Complete* is durable; False if this node stopped owning the shard first."""

        def still_owner() -> bool:
            with self._lock:
                shard = self._shards.get(shard_id)
                return shard is not None and shard.coordinator_epoch == coordinator_epoch

        try:
            if not self._markers.write(self._markers_for(prepared), coordinator_epoch=coordinator_epoch,
                                       still_valid=still_owner):
                return False
            completed = self._completed_value(prepared, self._now_ms())
            with self._lock:
                shard = self._shards.get(shard_id)
                if shard is None or shard.coordinator_epoch != coordinator_epoch:
                    return False
                shard.pending[prepared.transactional_id] = completed.state
            for attempt in range(1000):
                try:
                    self._persist(shard, coordinator_epoch, completed)
                    return True
                except CoordinatorNotAvailableError:
                    if not still_owner():
                        return False
                    threading.Event().wait(min(0.01 * (attempt + 1), 0.5))
            return False
        except NotCoordinatorError:
            return False
        except Exception:  # a bug must not silently strand a transaction: say so loudly
            log.exception("completing %r failed", prepared.transactional_id)
            return False

    def _markers_for(self, prepared: TxnMetadata | BatchTxn) -> list[Marker]:
        if isinstance(prepared, BatchTxn):
            return self.batches.markers_for(prepared)
        return [Marker(prepared.producer_id, prepared.producer_epoch, prepared.state == S.PREPARE_COMMIT,
                       prepared.partitions)]

    def _completed_value(self, prepared: TxnMetadata | BatchTxn, now: int) -> TxnMetadata | BatchTxn:
        if isinstance(prepared, BatchTxn):
            return self.batches.completed(prepared, now)
        target = S.COMPLETE_COMMIT if prepared.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        changes: dict = {"partitions": frozenset(), "start_time_ms": -1}
        if prepared.next_producer_id != NO_PRODUCER_ID:
            changes.update(producer_id=prepared.next_producer_id, producer_epoch=0,
                           previous_producer_id=prepared.producer_id, next_producer_id=NO_PRODUCER_ID,
                           last_producer_epoch=NO_EPOCH)
        return prepared.transit(target, now, **changes)

    # ------------------------------------------------------------ helpers

    def _persist(self, shard: TxnShard, coordinator_epoch: int, new: TxnMetadata | BatchTxn) -> None:
        """Write `new` durably, then install it if this node is still the shard's coordinator."""
        tid = new.transactional_id
        try:
            state_log.append_entry(shard.log, tid, new)
        except KafkaError as exc:
            with self._lock:
                shard.pending.pop(tid, None)
                self._written.notify_all()
            if getattr(exc, "invalid_metadata", False) or exc.name in ("KAFKA_STORAGE_ERROR",):
                raise NotCoordinatorError(f"[NOT_COORDINATOR] lost the shard of {tid!r} while writing") from exc
            raise CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] could not log {tid!r}: {exc}") from exc
        with self._lock:
            shard.pending.pop(tid, None)
            self._written.notify_all()
            if new.is_complete:
                shard.completing.pop(tid, None)
            owner = self._shards.get(shard.shard)
            if owner is not shard or shard.coordinator_epoch != coordinator_epoch:
                raise NotCoordinatorError(f"[NOT_COORDINATOR] the shard of {tid!r} moved during the write")
            shard.entries[tid] = new
            shard.writes_since_snapshot += 1
            if shard.writes_since_snapshot >= self._snapshot_interval:
                shard.writes_since_snapshot = 0
                self._snapshotter.submit(self._snapshot, shard)

    def _snapshot(self, shard: TxnShard) -> None:
        """Snapshot the shard from its durable log and drop the segments the previous snapshot covers."""
        try:
            image = state_log.take_snapshot(shard.log)
            log.info("shard %d: snapshot of %d ids up to offset %d", shard.shard, len(image.values),
                     image.next_offset)
        except KafkaError as exc:  # the shard moved away meanwhile: the next owner snapshots
            log.info("shard %d: snapshot skipped: %s", shard.shard, exc)
        except OSError as exc:  # the log keeps everything; the next interval tries again
            log.warning("shard %d: snapshot failed: %s", shard.shard, exc)
        except Exception:  # a bug: say so (an executor would swallow it), the log still keeps everything
            log.exception("shard %d: snapshot failed", shard.shard)

    def _owned(self, tid: str) -> tuple[TxnShard, int]:
        shard_id = self.shard_of(tid)
        with self._lock:
            shard = self._shards.get(shard_id)
            if shard is None:
                if self._assigned_here(shard_id):
                    raise CoordinatorLoadInProgressError(
                        f"[COORDINATOR_LOAD_IN_PROGRESS] this node is taking shard {shard_id} of {tid!r} over; retry")
                raise NotCoordinatorError(f"[NOT_COORDINATOR] this node does not own shard {shard_id} of {tid!r}")
            if shard.loading:
                raise CoordinatorLoadInProgressError(
                    f"[COORDINATOR_LOAD_IN_PROGRESS] shard {shard_id} is still loading; retry")
            return shard, shard.coordinator_epoch

    def _await_previous_end(self, shard: TxnShard, tid: str) -> None:
        """Hold a transaction's first AddPartitions while the previous transaction's markers go out (caller
        holds the lock; waiting releases it). Answering CONCURRENT_TRANSACTIONS at once would make the client
        back off (librdkafka 20 ms, Kafka's Java client the same) for markers that take about a millisecond."""
        def settled() -> bool:
            current = shard.entries.get(tid)
            return tid not in shard.pending and not (
                isinstance(current, TxnMetadata) and current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT))
        self._written.wait_for(settled, PREVIOUS_END_HOLD_S)

    def _await_not_pending(self, shard: TxnShard, tid: str, timeout_s: float) -> None:
        """Wait (holding the lock between checks) for another write of `tid` to land; a batch's
        tasks join and add partitions at the same moment, and each change builds on the last."""
        if not self._written.wait_for(lambda: tid not in shard.pending, timeout_s):
            self._check_not_pending(shard, tid)

    @staticmethod
    def _entry(shard: TxnShard, tid: str, kind: type[V]) -> V | None:
        """The value of `tid` if it is of `kind` (or absent); transactional ids and batch
        transaction ids share the shard's keys, and one is never used as the other."""
        current = shard.entries.get(tid)
        if current is not None and not isinstance(current, kind):
            raise InvalidRequestError(
                f"[INVALID_REQUEST] {tid!r} is {_KIND_NAMES[type(current)]}, not {_KIND_NAMES[kind]}")
        return current

    @staticmethod
    def _check_not_pending(shard: TxnShard, tid: str) -> None:
        if tid in shard.pending:
            raise ConcurrentTransactionsError(
                f"[CONCURRENT_TRANSACTIONS] {tid!r} has a transition to {shard.pending[tid]} in flight; retry")

    @staticmethod
    def _check_producer(shard: TxnShard, tid: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        current = shard.entries.get(tid)
        if not isinstance(current, TxnMetadata) or current.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"[INVALID_PRODUCER_ID_MAPPING] producer id {producer_id} does not belong to {tid!r}; "
                "call init_transactions() first")
        if current.producer_epoch != producer_epoch:
            raise ProducerFencedError(
                f"[PRODUCER_FENCED] transactional id {tid!r} was fenced by a newer producer "
                f"(epoch {current.producer_epoch} > {producer_epoch}); create a new Producer")
        return current

    def _verify(self, shard: TxnShard, req: pb.AddPartitionsToTxnRequest,
                wanted: list[TopicPartition]) -> pb.AddPartitionsToTxnResponse:
        """KIP-890 part 1: a partition leader asks whether the partition is in this txn."""
        with self._lock:
            current = shard.entries.get(req.transactional_id)
        if current is None or current.producer_id != req.producer_id:
            code = InvalidProducerIdMappingError.errno
            return self._partition_results(wanted, {tp: code for tp in wanted}, code)
        if current.producer_epoch != req.producer_epoch:
            code = InvalidProducerEpochError.errno
            return self._partition_results(wanted, {tp: code for tp in wanted}, code)
        missing = {tp: TransactionAbortableError.errno for tp in wanted
                   if current.state != S.ONGOING or tp not in current.partitions}
        return self._partition_results(wanted, missing, 0)

    @staticmethod
    def _partition_results(wanted: list[TopicPartition], errors: dict[TopicPartition, int],
                           other_code: int) -> pb.AddPartitionsToTxnResponse:
        results = []
        for tp in wanted:
            code = errors.get(tp, other_code if errors else 0)
            results.append(pb.PartitionError(topic=tp.topic, partition=tp.partition, error_code=code))
        return pb.AddPartitionsToTxnResponse(results=results)

    def _partition_exists(self, tp: TopicPartition) -> bool:
        if tp.topic == CONSUMER_OFFSETS_TOPIC:
            return 0 <= tp.partition < self.offsets_shards
        count = self._partitions_for(tp.topic)
        return count is not None and 0 <= tp.partition < count

    def _validate_timeout(self, timeout_ms: int) -> None:
        if not 1 <= timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"[INVALID_TRANSACTION_TIMEOUT] transaction timeout {timeout_ms} ms is outside "
                f"1..{self.max_timeout_ms} ms (transaction_max_timeout_ms)")

    @staticmethod
    def _validate_id(tid: str) -> None:
        if not tid:
            raise InvalidRequestError("[INVALID_REQUEST] the transactional id is empty")
        if len(tid) > MAX_TRANSACTIONAL_ID_LENGTH:
            raise InvalidRequestError(
                f"[INVALID_REQUEST] the transactional id is {len(tid)} characters; the limit is "
                f"{MAX_TRANSACTIONAL_ID_LENGTH}")

