"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit on the Kafka port, answered by the transaction
and group coordinators behind the gRPC services.

Kafka clients speak transactions V1: they add partitions themselves and keep their epoch across transactions,
so EndTxn reaches the coordinator as V1 (EndTxn v5, transactions V2, is not served: no client asks for it
without Produce v12, which is not served either). A request-level failure (NOT_COORDINATOR, ...) is every
partition's error, as Kafka answers it.
"""
from __future__ import annotations

from collections.abc import Callable

from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from coordinator.group import GroupCoordinator
from coordinator.kafka.apis import ApiKey
from coordinator.kafka.dispatch import Handler
from coordinator.kafka.group_apis import offset_entry
from coordinator.txn.coordinator import TransactionCoordinator
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, code_of

#: Kafka's transaction version for EndTxn below v5
TRANSACTIONS_V1 = 1

TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = TopicResult.AddPartitionsToTxnPartitionResult


class TxnApis:
    def __init__(self, *, txn: TransactionCoordinator, groups: GroupCoordinator) -> None:
        self._txn = txn
        self._groups = groups

    def handlers(self) -> dict[ApiKey, Handler]:
        return {
            ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            ApiKey.END_TXN: self.end_txn,
            ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
        }

    # ------------------------------------------------------------ AddPartitionsToTxn (24)

    def add_partitions_to_txn(self, request: AddPartitionsToTxnRequest, version: int) -> AddPartitionsToTxnResponse:
        if version <= 3:  # a client's request: one transaction
            results = self._add(request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                request.v3_and_below_producer_epoch, request.v3_and_below_topics, verify_only=False)
            return AddPartitionsToTxnResponse(version=version, throttle_time_ms=0,
                                              results_by_topic_v3_and_below=results)
        # v4+: a broker's batch, each transaction possibly verify-only (KIP-890 part 1)
        return AddPartitionsToTxnResponse(version=version, throttle_time_ms=0, error_code=0, results_by_transaction=[
            AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id,
                topic_results=self._add(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                                        verify_only=txn.verify_only))
            for txn in request.transactions])

    def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
             topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic],  # a v3- or a v4+ request's
             *, verify_only: bool) -> list[AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]:
        wanted = [(topic.name, partition) for topic in topics for partition in topic.partitions]
        codes: dict[tuple[str, int], int] = {}
        try:
            answer = self._txn.add_partitions(pb.AddPartitionsToTxnRequest(
                transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
                verify_only=verify_only,
                partitions=[pb.TopicPartitionRef(topic=t, partition=p) for t, p in wanted]))
            codes = {(r.topic, r.partition): r.error_code for r in answer.results}
        except KafkaError as exc:
            codes = {tp: code_of(exc) for tp in wanted}
        return [TopicResult(name=topic.name, results_by_partition=[
            PartitionResult(partition_index=p, partition_error_code=codes.get((topic.name, p), 0))
            for p in topic.partitions]) for topic in topics]

    # ------------------------------------------------------------ AddOffsetsToTxn (25)

    def add_offsets_to_txn(self, request: AddOffsetsToTxnRequest, version: int) -> AddOffsetsToTxnResponse:
        code = _code_of_call(lambda: self._txn.add_offsets(pb.AddOffsetsToTxnRequest(
            transactional_id=request.transactional_id, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, group_id=request.group_id)))
        return AddOffsetsToTxnResponse(version=version, throttle_time_ms=0, error_code=code)

    # ------------------------------------------------------------ EndTxn (26)

    def end_txn(self, request: EndTxnRequest, version: int) -> EndTxnResponse:
        code = _code_of_call(lambda: self._txn.end_txn(pb.EndTxnRequest(
            transactional_id=request.transactional_id, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, committed=request.committed), transaction_version=TRANSACTIONS_V1))
        return EndTxnResponse(version=version, throttle_time_ms=0, error_code=code)

    # ------------------------------------------------------------ TxnOffsetCommit (28)

    def txn_offset_commit(self, request: TxnOffsetCommitRequest, version: int) -> TxnOffsetCommitResponse:
        wanted = [(topic.name, part) for topic in request.topics for part in topic.partitions]
        codes: dict[tuple[str, int], int] = {}
        try:
            answer = self._groups.txn_offset_commit(pb.TxnOffsetCommitRequest(
                transactional_id=request.transactional_id, group_id=request.group_id,
                producer_id=request.producer_id, producer_epoch=request.producer_epoch,
                generation_id=request.generation_id if version >= 3 else -1,
                member_id=(request.member_id or "") if version >= 3 else "",
                group_instance_id=(request.group_instance_id or "") if version >= 3 else "",
                offsets=[offset_entry(name, part.partition_index, part.committed_offset, part.committed_metadata,
                                      part.committed_leader_epoch if version >= 2 else -1) for name, part in wanted]))
            codes = {(r.topic, r.partition): r.error_code for r in answer.results}
            if answer.error_code:
                codes = {(name, part.partition_index): answer.error_code for name, part in wanted}
        except KafkaError as exc:
            codes = {(name, part.partition_index): code_of(exc) for name, part in wanted}
        Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
        return TxnOffsetCommitResponse(version=version, throttle_time_ms=0, topics=[
            Topic(name=topic.name, partitions=[
                Topic.TxnOffsetCommitResponsePartition(partition_index=part.partition_index,
                                                       error_code=codes.get((topic.name, part.partition_index), 0))
                for part in topic.partitions])
            for topic in request.topics])


def _code_of_call(call: Callable[[], object]) -> int:
    """The Kafka error code of a coordinator call: its response's error_code, or the KafkaError it raised."""
    try:
        answer = call()
    except KafkaError as exc:
        return code_of(exc)
    return int(getattr(answer, "error_code", 0))
