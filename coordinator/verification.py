"""A transaction's first write to a partition, checked with the transaction's coordinator (KIP-890).

Part 1: before a producer's first transactional batch opens a transaction on a partition, the partition's
leader asks the coordinator whether the partition is in that transaction (AddPartitionsToTxn, verify only).
Part 2 (transactions V2): the same call adds it, so the producer sends no AddPartitionsToTxn of its own;
a group coordinator does the same for a TxnOffsetCommit's offsets partition. Shared by the partition
leaders, the group coordinator and the simulator (TransactionVerifier carries the calls over a node's I/O).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from coordinator.placement import NO_OWNER
from coordinator.rocketmq.log_format import shard_of_transactional_id
from coordinator.runtime.io import NodeIO, Outcome
from proto import txnsim_pb2 as pb
from proto.errors import (
    ERRORS_BY_CODE,
    BrokerResponseError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    KafkaError,
    NotEnoughReplicasError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionAbortableError,
    UnknownServerError,
    code_of,
    name_of,
)
from proto.hashing import partition_for
from proto.structs import HALF_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition

#: how long a leader or group coordinator waits for the coordinator's answer: longer than the coordinator
#: holds an add for the previous transaction's markers (PREVIOUS_END_HOLD_MS, 1 s), so a held add is
#: answered, not timed out while it still lands
ADD_CALL_TIMEOUT_S = 5.0
#: the codes of each partition, to whoever asked
Codes = dict[TopicPartition, int]
#: asks the coordinator of a transactional id whether these partitions are in the open transaction of a
#: producer id and epoch (KIP-890 part 1), or, when the bool is True, to add them to it (part 2's implicit
#: add); the callback gets the error code per partition, 0 where it may be written (TransactionVerifier.verify)
AsyncVerifier = Callable[[str, int, int, list[TopicPartition], bool, Callable[[Codes], None]], None]


def verification_error(code: int, tid: str, tp: TopicPartition, producer_id: int,
                       producer_epoch: int) -> KafkaError | None:
    """What a partition leader answers a transactional write whose verification (KIP-890 part 1: is `tp` in
    the open transaction of `tid`?, or part 2: add it) came back with `code`; None when it may be appended.
    Shared by the node, the group coordinator and the simulator."""
    if code == 0:
        return None
    if ERRORS_BY_CODE.get(code, UnknownServerError).retriable or code == OperationNotAttemptedError.errno:
        # OPERATION_NOT_ATTEMPTED: another partition of the same call was refused (a topic the coordinator
        # does not know yet); this one was never looked at, so it is retried like the rest.
        # The coordinator moved or is loading: the producer should retry the same batch, as
        # Kafka's leader answers NOT_ENOUGH_REPLICAS when verification cannot complete.
        return NotEnoughReplicasError(
            f"[NOT_ENOUGH_REPLICAS] could not verify {tp} with the coordinator of {tid!r} ({name_of(code)}); retry")
    if code in (ProducerFencedError.errno, InvalidProducerEpochError.errno):
        # Kafka's leader answers a fenced producer's produce with INVALID_PRODUCER_EPOCH, which
        # producers handle there (abortable; their EndTxn then learns PRODUCER_FENCED)
        return InvalidProducerEpochError(
            f"[INVALID_PRODUCER_EPOCH] producer {producer_id} wrote to {tp} with epoch {producer_epoch}, "
            f"but the coordinator of {tid!r} has a newer one ({name_of(code)}): a newer producer "
            "instance fenced this one")
    if code == InvalidProducerIdMappingError.errno:
        # passed on as Kafka's leader does: the id expired, so the producer's abort skips EndTxn and takes a
        # new producer id (what a producer's own AddPartitionsToTxn would have told it)
        return InvalidProducerIdMappingError(
            f"[INVALID_PRODUCER_ID_MAPPING] the coordinator of {tid!r} does not know producer {producer_id} "
            f"(the transactional id expired or moved on); abort the transaction")
    return TransactionAbortableError(
        f"[TRANSACTION_ABORTABLE] {tp} is not part of the open transaction of {tid!r} "
        f"(producer {producer_id}, epoch {producer_epoch}); abort the transaction")


class TransactionVerifier:
    """KIP-890's first-write check as calls over a node's I/O: one AddPartitionsToTxn for all of a producer's
    partitions to the coordinator of its transactional id (verify-only, or adding them), or, for a RocketMQ
    message stored in place (a half-message transaction id), one VerifyHalfWrite per partition to its half
    shard's owner. An unreachable or silent coordinator is COORDINATOR_NOT_AVAILABLE: it is moving, not saying
    no, and the writer is told to retry."""

    def __init__(self, *, io: NodeIO, owner_of: Callable[[str, int], int], txn_shards: int) -> None:
        self._io = io
        self._owner_of = owner_of
        self._txn_shards = txn_shards

    def verify(self, tid: str, producer_id: int, producer_epoch: int, tps: list[TopicPartition], add: bool,
               done: Callable[[Codes], None]) -> None:
        half_shard = shard_of_transactional_id(tid)
        if half_shard is not None:
            self._verify_half_writes(half_shard, producer_id, tps, done)
            return
        owner = self._owner_of(TRANSACTION_STATE_TOPIC, partition_for(tid, self._txn_shards))
        if owner == NO_OWNER:
            done(dict.fromkeys(tps, CoordinatorNotAvailableError.errno))
            return
        request = pb.AddPartitionsToTxnRequest(
            transactional_id=tid, producer_id=producer_id, producer_epoch=producer_epoch, verify_only=not add,
            partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in tps])

        def answered(outcome: Outcome) -> None:
            if isinstance(outcome, BaseException):
                done(dict.fromkeys(tps, _unavailable_code(outcome)))
            elif outcome.error_code:
                done(dict.fromkeys(tps, outcome.error_code))
            else:
                codes = {TopicPartition(r.topic, r.partition): r.error_code for r in outcome.results}
                done({tp: codes.get(tp, UnknownServerError.errno) for tp in tps})
        self._io.call(owner, request, int(ADD_CALL_TIMEOUT_S * 1000), answered)

    def _verify_half_writes(self, shard: int, producer_id: int, tps: list[TopicPartition],
                            done: Callable[[Codes], None]) -> None:
        owner = self._owner_of(HALF_TOPIC, shard)
        codes: Codes = {}

        def answered(tp: TopicPartition, outcome: Outcome) -> None:
            codes[tp] = _unavailable_code(outcome) if isinstance(outcome, BaseException) else outcome.error_code
            if len(codes) == len(tps):
                done({t: codes[t] for t in tps})
        for tp in tps:
            if owner == NO_OWNER:
                answered(tp, CoordinatorNotAvailableError("[COORDINATOR_NOT_AVAILABLE] no live node owns the shard"))
                continue
            request = pb.VerifyHalfWriteRequest(shard=shard, producer_id=producer_id, topic=tp.topic,
                                                partition=tp.partition)
            self._io.call(owner, request, int(ADD_CALL_TIMEOUT_S * 1000), functools.partial(answered, tp))


def _unavailable_code(error: Any) -> int:
    """A coordinator's own error keeps its code; no answer at all is COORDINATOR_NOT_AVAILABLE."""
    return code_of(error) if isinstance(error, BrokerResponseError) else CoordinatorNotAvailableError.errno
