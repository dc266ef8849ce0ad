"""A transaction's first write to a partition, checked with the transaction's coordinator (KIP-890).

Part 1: before a producer's first transactional batch opens a transaction on a partition, the partition's
leader asks the coordinator whether the partition is in that transaction (AddPartitionsToTxn, verify only).
Part 2 (transactions V2): the same call adds it, so the producer sends no AddPartitionsToTxn of its own;
a group coordinator does the same for a TxnOffsetCommit's offsets partition. Shared by the partition
leaders, the group coordinator and the simulator.
"""
from __future__ import annotations

from collections.abc import Callable

from proto.errors import (
    ERRORS_BY_CODE,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    KafkaError,
    NotEnoughReplicasError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionAbortableError,
    UnknownServerError,
    name_of,
)
from proto.structs import TopicPartition

#: asks the coordinator of a transactional id whether these partitions are in the open transaction of a
#: producer id and epoch (KIP-890 part 1), or, when the last argument is True, to add them to it (part 2's
#: implicit add); the error code per partition, 0 where it may be written
Verifier = Callable[[str, int, int, list[TopicPartition], bool], dict[TopicPartition, int]]
#: how long a leader or group coordinator waits for the coordinator's answer: longer than the coordinator
#: holds an add for the previous transaction's markers (PREVIOUS_END_HOLD_MS, 1 s), so a held add is
#: answered, not timed out while it still lands
ADD_CALL_TIMEOUT_S = 5.0


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
