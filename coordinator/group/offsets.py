"""The offset rules of the group coordinator, without I/O: what a TxnOffsetCommit writes and what an
OffsetFetch answers. The threaded coordinator (coordinator.py) and the simulator's node
(txnsim/simulate/cluster/groups.py) both call these, around their own ways of writing the log.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from coordinator.group import log_format
from coordinator.group.metadata import CommittedOffset, GroupMetadata
from coordinator.group.validation import validate_offsets
from proto import txnsim_pb2 as pb
from proto.errors import InvalidRequestError, UnstableOffsetCommitError
from proto.records import encode_batch
from proto.structs import TopicPartition


@dataclass(frozen=True, slots=True)
class TxnOffsetWrite:
    """What a TxnOffsetCommit asks to write: `batch` (None when no offset was accepted) of `accepted`."""

    results: list[pb.PartitionError]
    accepted: list[tuple[TopicPartition, CommittedOffset]]
    batch: bytes | None


def check_txn_offset_request(req: pb.TxnOffsetCommitRequest) -> None:
    """What Kafka refuses before it looks for the group: INVALID_REQUEST."""
    if not req.transactional_id:
        raise InvalidRequestError("[INVALID_REQUEST] TxnOffsetCommit needs a transactional id")
    if req.producer_id < 0 or req.producer_epoch < 0:
        raise InvalidRequestError(f"[INVALID_REQUEST] TxnOffsetCommit needs a producer id and epoch, got "
                                  f"{req.producer_id}/{req.producer_epoch}")


def prepare_txn_offset_commit(group: GroupMetadata, req: pb.TxnOffsetCommitRequest, now_ms: int,
                              partition_exists: Callable[[TopicPartition], bool], *,
                              check_generation: bool = True) -> TxnOffsetWrite:
    """Validate (raises KafkaError: INVALID_REQUEST, and the member and generation rule of KIP-447) and
    encode the producer's transactional batch of offsets. `check_generation=False` is a simulator's
    planted bug only."""
    check_txn_offset_request(req)
    if check_generation:
        group.classic.validate_offset_commit(req.generation_id, req.member_id, req.group_instance_id or None,
                                             transactional=True)
    results, accepted = validate_offsets(req.offsets, now_ms, partition_exists)
    if not accepted:
        return TxnOffsetWrite(results, accepted, None)
    records = [(now_ms, log_format.offset_key(group.group_id, tp), log_format.encode_offset(v), ())
               for tp, v in accepted]
    batch = encode_batch(records, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
                         transactional=True)
    return TxnOffsetWrite(results, accepted, batch)


def add_pending(group: GroupMetadata, producer_id: int, write: TxnOffsetWrite, base_offset: int | None) -> None:
    """The batch is in the log at `base_offset`: its offsets wait for the producer's marker."""
    for i, (tp, value) in enumerate(write.accepted):
        group.add_pending(producer_id, tp, replace(value, log_offset=None if base_offset is None else base_offset + i))


def fetch_offsets(group: GroupMetadata | None, req: pb.OffsetFetchRequest, *,
                  honour_require_stable: bool = True) -> pb.OffsetFetchResponse:
    """Committed offsets; with require_stable, UNSTABLE_OFFSET_COMMIT for a partition whose transactional
    commit awaits its marker (KIP-447). No partitions asked: every partition the group has."""
    wanted = [TopicPartition(p.topic, p.partition) for p in req.partitions]
    if group is None:
        return pb.OffsetFetchResponse(results=[pb.OffsetFetchResult(topic=tp.topic, partition=tp.partition,
                                                                    offset=-1, leader_epoch=-1) for tp in wanted])
    pending = group.pending_partitions() if req.require_stable and honour_require_stable else set()
    if not wanted:
        wanted = sorted(set(group.offsets) | pending)
    results = []
    for tp in wanted:
        result = pb.OffsetFetchResult(topic=tp.topic, partition=tp.partition, offset=-1, leader_epoch=-1)
        if tp in pending:
            result.error_code = UnstableOffsetCommitError.errno
            result.error_message = (f"[UNSTABLE_OFFSET_COMMIT] {tp} of group {req.group_id!r} has a "
                                    f"transactional commit awaiting its marker")
        elif tp in group.offsets:
            committed = group.offsets[tp]
            result.offset, result.metadata = committed.offset, committed.metadata
            result.leader_epoch = committed.leader_epoch
        results.append(result)
    return pb.OffsetFetchResponse(results=results)
