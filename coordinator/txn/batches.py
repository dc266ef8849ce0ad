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

These are the batch rules as plain functions of a value, a request and the time: the
coordinator core (core.py) owns the shard, the in-flight writes and phase two, and calls them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.txn.batch_metadata import BatchTxn, Participant
from coordinator.txn.metadata import Marker
from proto import txnsim_pb2 as pb
from proto.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from proto.structs import TopicPartition, TransactionState

S = TransactionState


@dataclass(frozen=True, slots=True)
class JoinPlan:
    """What a JoinBatchTxn asks of the shard: nothing (`already_committed`), an abort of the batch a
    newer one abandons (`abandoned`; the joiner retries), or the new value with the joiner in it."""

    already_committed: bool = False
    abandoned: BatchTxn | None = None
    joined: BatchTxn | None = None
    participant: Participant | None = None


def plan_join(current: BatchTxn | None, req: pb.JoinBatchTxnRequest, now: int,
              allocate: Callable[[], int]) -> JoinPlan:
    tid = req.batch_txn_id
    current = current or BatchTxn(tid, req.transaction_timeout_ms)
    if req.batch_id <= current.last_committed_batch:
        return JoinPlan(already_committed=True)
    if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        raise ConcurrentTransactionsError(
            f"[CONCURRENT_TRANSACTIONS] batch {current.batch_id} of {tid!r} is completing; retry")
    if current.state == S.ONGOING and current.batch_id != req.batch_id:
        if req.batch_id < current.batch_id:
            raise ProducerFencedError(
                f"[PRODUCER_FENCED] batch {req.batch_id} of {tid!r} is older than the open batch "
                f"{current.batch_id}: a stale task")
        return JoinPlan(abandoned=current.transit(S.PREPARE_ABORT, now, winners=frozenset()))
    ongoing = current.state == S.ONGOING
    joined = Participant(allocate(), 0, req.task, req.attempt)
    new = current.transit(
        S.ONGOING, now, batch_id=req.batch_id, winners=frozenset(),
        participants=(current.participants if ongoing else ()) + (joined,),
        # every join restarts the clock: a replay joining after its driver's restart must not
        # inherit the dead run's start (the timeout bounds silence, not the batch's length)
        start_time_ms=now,
        timeout_ms=current.timeout_ms if ongoing else req.transaction_timeout_ms)
    return JoinPlan(joined=new, participant=joined)


@dataclass(frozen=True, slots=True)
class EndPlan:
    """What an EndBatchTxn asks: a decision to write, or an answer now (`completed_now`), or the answer
    once the already-decided commit of that batch completes (`await_commit`)."""

    decided: BatchTxn | None = None
    completed_now: bool = False
    await_commit: bool = False
    #: the batch had committed already: the answer says the commit is repeated (a no-op)
    repeated: bool = False


def plan_end(current: BatchTxn | None, req: pb.EndBatchTxnRequest, now: int) -> EndPlan:
    tid = req.batch_txn_id
    winners = frozenset(req.winners)
    if current is None:
        if req.committed and winners:
            raise InvalidTxnStateError(f"[INVALID_TXN_STATE] batch transaction {tid!r} is unknown")
        return EndPlan(completed_now=True)
    if req.batch_id <= current.last_committed_batch:
        completing = current.state == S.PREPARE_COMMIT
        return EndPlan(await_commit=completing, completed_now=not completing, repeated=True)
    if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        raise ConcurrentTransactionsError(
            f"[CONCURRENT_TRANSACTIONS] batch {current.batch_id} of {tid!r} is completing; retry")
    if current.state == S.ONGOING and current.batch_id == req.batch_id:
        return EndPlan(decided=_decide(current, req.committed, winners, now))
    if req.committed and winners:
        raise InvalidTxnStateError(
            f"[INVALID_TXN_STATE] batch {req.batch_id} of {tid!r} cannot commit: it is no longer open "
            f"(it was aborted: its transaction timeout passed, or a newer batch began); restart the "
            f"query to replay it")
    return EndPlan(completed_now=True)  # nothing open, nothing written


def add_partitions(current: BatchTxn, req: pb.AddPartitionsToTxnRequest, wanted: list[TopicPartition],
                   now: int) -> BatchTxn | None:
    """The batch with the participant's new partitions, or None if it has them all already."""
    joined = _check_participant(current, req.producer_id, req.producer_epoch)
    if set(wanted) <= joined.partitions:
        return None
    grown = dataclasses.replace(joined, partitions=joined.partitions | set(wanted))
    return current.transit(S.ONGOING, now, participants=current.with_participant(grown))


def verify(current: BatchTxn, req: pb.AddPartitionsToTxnRequest,
           wanted: list[TopicPartition]) -> tuple[dict[TopicPartition, int], int]:
    """KIP-890 verification for a participant's first write: (errors per partition, the others' code)."""
    joined = _open_participant(current, req.producer_id, req.producer_epoch)
    if joined is None:
        code = InvalidProducerEpochError.errno
        return {tp: code for tp in wanted}, code
    return {tp: TransactionAbortableError.errno for tp in wanted if tp not in joined.partitions}, 0


def timed_out(current: BatchTxn, now: int) -> BatchTxn:
    """The PrepareAbort of an Ongoing batch its coordinator found past its timeout (the core judges the time:
    see core._timeout_start)."""
    return current.transit(S.PREPARE_ABORT, now, winners=frozenset())


def markers_for(prepared: BatchTxn) -> list[Marker]:
    """COMMIT for the winners, ABORT for every other participant; at epoch + 1 to fence them all."""
    committing = prepared.state == S.PREPARE_COMMIT
    return [Marker(p.producer_id, p.producer_epoch + 1, committing and p.producer_id in prepared.winners,
                   p.partitions, transaction_version=2)
            for p in prepared.participants if p.partitions]


def completed(prepared: BatchTxn, now: int) -> BatchTxn:
    target = S.COMPLETE_COMMIT if prepared.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
    return prepared.transit(target, now, participants=(), winners=frozenset(), start_time_ms=-1)


def _open_participant(current: BatchTxn, producer_id: int, producer_epoch: int) -> Participant | None:
    """The participant `producer_id` at `producer_epoch` if its batch is still open, else None."""
    joined = current.participant(producer_id)
    if joined is None or joined.producer_epoch != producer_epoch or current.state != S.ONGOING:
        return None
    return joined


def _check_participant(current: BatchTxn, producer_id: int, producer_epoch: int) -> Participant:
    joined = _open_participant(current, producer_id, producer_epoch)
    if joined is None:
        raise ProducerFencedError(
            f"[PRODUCER_FENCED] producer {producer_id} is not an open participant of {current.transactional_id!r} "
            f"(batch {current.batch_id}, {current.state}): its task attempt is stale")
    return joined


def _decide(current: BatchTxn, committed: bool, winners: frozenset[int], now: int) -> BatchTxn:
    if not committed:
        return current.transit(S.PREPARE_ABORT, now, winners=frozenset())
    strangers = winners - {p.producer_id for p in current.participants}
    if strangers:
        raise InvalidTxnStateError(
            f"[INVALID_TXN_STATE] producers {sorted(strangers)} are not participants of batch "
            f"{current.batch_id} of {current.transactional_id!r}")
    return current.transit(S.PREPARE_COMMIT, now, winners=winners, last_committed_batch=current.batch_id)
