"""Batch transactions: one transaction written by many producers, decided by one record.

txnsim's extension of Kafka's protocol (docs/spark-exactly-once.md). Kafka has no
transaction spanning producers, so a Spark micro-batch written by N tasks would commit as N
transactions, one by one, and a driver dying between them would leave half a batch
visible. Here each task attempt joins the query's batch transaction and gets a fresh
producer id (JoinBatchTxn); it writes as an ordinary transactional producer (its partitions
are added and verified as in KIP-890); the driver ends the batch with EndBatchTxn naming the
winning attempts. One durable PrepareCommit names the winners and records the batch id as
committed, so the decision is atomic and a repeated commit of that batch is a no-op. Markers
then COMMIT the winners' partitions and ABORT everyone else's, at epoch + 1 so that a
stale attempt can never write again.

A batch left Ongoing longer than its timeout after its last join is aborted, never committed: nothing of it was
acknowledged to Spark, which replays the batch (same id, same offsets) when the query
restarts, so a driver down for longer than the timeout loses nothing.
"""
from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING

from coordinator.txn.batch_metadata import BatchTxn, Participant
from coordinator.txn.markers import Marker
from proto import txnsim_pb2 as pb
from proto.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidRequestError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from proto.structs import TopicPartition, TransactionState

if TYPE_CHECKING:
    from coordinator.txn.coordinator import TransactionCoordinator, TxnShard

S = TransactionState
log = logging.getLogger(__name__)

#: how long a request waits for another write of the same batch to land before CONCURRENT_TRANSACTIONS
_QUEUE_WAIT_S = 2.0


class BatchTransactions:
    """The batch-transaction RPCs of one node's TransactionCoordinator (which owns shards and the log)."""

    def __init__(self, host: TransactionCoordinator) -> None:
        self._host = host

    # ------------------------------------------------------------ RPCs

    def join(self, req: pb.JoinBatchTxnRequest) -> pb.JoinBatchTxnResponse:
        host = self._host
        tid = req.batch_txn_id
        host._validate_id(tid)
        if req.batch_id < 0:
            raise InvalidRequestError(f"[INVALID_REQUEST] batch id {req.batch_id} is negative")
        host._validate_timeout(req.transaction_timeout_ms)
        shard, epoch = host._owned(tid)
        now = host._now_ms()
        with host._lock:
            current = self._current(shard, tid) or BatchTxn(tid, req.transaction_timeout_ms)
            if req.batch_id <= current.last_committed_batch:
                return pb.JoinBatchTxnResponse(already_committed=True)
            if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"[CONCURRENT_TRANSACTIONS] batch {current.batch_id} of {tid!r} is completing; retry")
            abandoned = None
            if current.state == S.ONGOING and current.batch_id != req.batch_id:
                if req.batch_id < current.batch_id:
                    raise ProducerFencedError(
                        f"[PRODUCER_FENCED] batch {req.batch_id} of {tid!r} is older than the open batch "
                        f"{current.batch_id}: a stale task")
                abandoned = current.transit(S.PREPARE_ABORT, now, winners=frozenset())
                shard.pending[tid] = abandoned.state
            else:
                ongoing = current.state == S.ONGOING
                joined = Participant(host._allocator.allocate(), 0, req.task, req.attempt)
                new = current.transit(
                    S.ONGOING, now, batch_id=req.batch_id, winners=frozenset(),
                    participants=(current.participants if ongoing else ()) + (joined,),
                    # every join restarts the clock: a replay joining after its driver's restart must not
                    # inherit the dead run's start (the timeout bounds silence, not the batch's length)
                    start_time_ms=now,
                    timeout_ms=current.timeout_ms if ongoing else req.transaction_timeout_ms)
                shard.pending[tid] = new.state
        if abandoned is not None:
            log.info("%s: aborting batch %d, abandoned for batch %d", tid, current.batch_id, req.batch_id)
            host._persist(shard, epoch, abandoned)
            host._schedule_completion(shard.shard, epoch, abandoned)
            raise ConcurrentTransactionsError(
                f"[CONCURRENT_TRANSACTIONS] aborting the abandoned batch {current.batch_id} of {tid!r}; retry")
        host._persist(shard, epoch, new)
        log.debug("%s: task %d attempt %d joined batch %d as producer %d", tid, req.task, req.attempt,
                  req.batch_id, joined.producer_id)
        return pb.JoinBatchTxnResponse(producer_id=joined.producer_id, producer_epoch=joined.producer_epoch)

    def end(self, req: pb.EndBatchTxnRequest) -> pb.EndBatchTxnResponse:
        host = self._host
        tid = req.batch_txn_id
        host._validate_id(tid)
        shard, epoch = host._owned(tid)
        now = host._now_ms()
        winners = frozenset(req.winners)
        with host._lock:
            current = self._current(shard, tid)
            if current is None:
                if req.committed and winners:
                    raise InvalidTxnStateError(f"[INVALID_TXN_STATE] batch transaction {tid!r} is unknown")
                return pb.EndBatchTxnResponse(completed=True)
            if req.batch_id <= current.last_committed_batch:
                if not req.committed:
                    log.info("%s: abort of batch %d ignored: it committed", tid, req.batch_id)
                pending = host._completion_of(shard, tid) if current.state == S.PREPARE_COMMIT else None
                decided = None
            elif current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"[CONCURRENT_TRANSACTIONS] batch {current.batch_id} of {tid!r} is completing; retry")
            elif current.state == S.ONGOING and current.batch_id == req.batch_id:
                decided = self._decide(current, req.committed, winners, now)
                shard.pending[tid] = decided.state
            elif req.committed and winners:
                raise InvalidTxnStateError(
                    f"[INVALID_TXN_STATE] batch {req.batch_id} of {tid!r} cannot commit: it is no longer open "
                    f"(it was aborted: its transaction timeout passed, or a newer batch began); restart the "
                    f"query to replay it")
            else:
                return pb.EndBatchTxnResponse(completed=True)  # nothing open, nothing written
        if decided is None:
            return pb.EndBatchTxnResponse(repeated_commit=req.committed,
                                          completed=self._wait(pending, req.wait_ms))
        host._persist(shard, epoch, decided)
        log.info("%s: batch %d %s with %d of %d participants", tid, req.batch_id,
                 "prepared to commit" if req.committed else "prepared to abort", len(decided.winners),
                 len(decided.participants))
        completion = host._schedule_completion(shard.shard, epoch, decided)
        return pb.EndBatchTxnResponse(completed=self._wait(completion, req.wait_ms))

    def add_partitions(self, shard: TxnShard, epoch: int, req: pb.AddPartitionsToTxnRequest,
                       wanted: list[TopicPartition]) -> pb.AddPartitionsToTxnResponse:
        host = self._host
        tid = req.transactional_id
        now = host._now_ms()
        with host._lock:
            current = self._current(shard, tid)
            assert current is not None
            joined = self._check_participant(current, req.producer_id, req.producer_epoch)
            if set(wanted) <= joined.partitions:
                return host._partition_results(wanted, {}, 0)
            grown = dataclasses.replace(joined, partitions=joined.partitions | set(wanted))
            new = current.transit(S.ONGOING, now, participants=current.with_participant(grown))
            shard.pending[tid] = new.state
        host._persist(shard, epoch, new)
        return host._partition_results(wanted, {}, 0)

    def verify(self, current: BatchTxn, req: pb.AddPartitionsToTxnRequest,
               wanted: list[TopicPartition]) -> pb.AddPartitionsToTxnResponse:
        """KIP-890 verification for a participant's first write to a partition."""
        joined = self._open_participant(current, req.producer_id, req.producer_epoch)
        if joined is None:
            code = InvalidProducerEpochError.errno
            return self._host._partition_results(wanted, {tp: code for tp in wanted}, code)
        missing = {tp: TransactionAbortableError.errno for tp in wanted if tp not in joined.partitions}
        return self._host._partition_results(wanted, missing, 0)

    # ------------------------------------------------------------ timers and completion

    @staticmethod
    def timed_out(current: BatchTxn, now: int) -> BatchTxn | None:
        """The PrepareAbort of an Ongoing batch past its timeout, else None."""
        if current.state == S.ONGOING and current.start_time_ms + current.timeout_ms < now:
            return current.transit(S.PREPARE_ABORT, now, winners=frozenset())
        return None

    @staticmethod
    def markers_for(prepared: BatchTxn) -> list[Marker]:
        """COMMIT for the winners, ABORT for every other participant; at epoch + 1 to fence them all."""
        committing = prepared.state == S.PREPARE_COMMIT
        return [Marker(p.producer_id, p.producer_epoch + 1, committing and p.producer_id in prepared.winners,
                       p.partitions)
                for p in prepared.participants if p.partitions]

    @staticmethod
    def completed(prepared: BatchTxn, now: int) -> BatchTxn:
        target = S.COMPLETE_COMMIT if prepared.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return prepared.transit(target, now, participants=(), winners=frozenset(), start_time_ms=-1)

    # ------------------------------------------------------------ helpers

    def _current(self, shard: TxnShard, tid: str) -> BatchTxn | None:
        """The batch's value once no other write of it is in flight (waits briefly, under the lock)."""
        self._host._await_not_pending(shard, tid, _QUEUE_WAIT_S)
        return self._host._entry(shard, tid, BatchTxn)

    @staticmethod
    def _open_participant(current: BatchTxn, producer_id: int, producer_epoch: int) -> Participant | None:
        """The participant `producer_id` at `producer_epoch` if its batch is still open, else None."""
        joined = current.participant(producer_id)
        if joined is None or joined.producer_epoch != producer_epoch or current.state != S.ONGOING:
            return None
        return joined

    @classmethod
    def _check_participant(cls, current: BatchTxn, producer_id: int, producer_epoch: int) -> Participant:
        joined = cls._open_participant(current, producer_id, producer_epoch)
        if joined is None:
            raise ProducerFencedError(
                f"[PRODUCER_FENCED] producer {producer_id} is not an open participant of {current.transactional_id!r} "
                f"(batch {current.batch_id}, {current.state}): its task attempt is stale")
        return joined

    @staticmethod
    def _decide(current: BatchTxn, committed: bool, winners: frozenset[int], now: int) -> BatchTxn:
        if not committed:
            return current.transit(S.PREPARE_ABORT, now, winners=frozenset())
        strangers = winners - {p.producer_id for p in current.participants}
        if strangers:
            raise InvalidTxnStateError(
                f"[INVALID_TXN_STATE] producers {sorted(strangers)} are not participants of batch "
                f"{current.batch_id} of {current.transactional_id!r}")
        return current.transit(S.PREPARE_COMMIT, now, winners=winners, last_committed_batch=current.batch_id)

    @staticmethod
    def _wait(completion: Future | None, wait_ms: int) -> bool:
        if completion is None:
            return True
        try:
            return bool(completion.result(timeout=max(wait_ms, 0) / 1000))
        except FutureTimeout:
            return False
