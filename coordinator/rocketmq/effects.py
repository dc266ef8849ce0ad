"""Writes a half-message shard owes to data partitions: the copy of a committed message to its
real topic (an idempotent batch, so a redone copy is a duplicate the partition recognises), and
the producer state that tells which copies already landed. Local partitions are written in
process, the others through their owner's Partitions service.
"""
from __future__ import annotations

from collections.abc import Callable

from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, code_of
from proto.records import NO_SEQUENCE
from proto.structs import TopicPartition
from proto.transport import NodeChannels, call


class PartitionWriter:
    def __init__(self, *, local_node_id: int, owner_of: Callable[[TopicPartition], int],
                 address_of: Callable[[int], str],
                 produce_locally: Callable[[pb.ProduceRequest], pb.ProduceResponse],
                 describe_locally: Callable[[pb.DescribeProducersRequest], pb.DescribeProducersResponse],
                 channels: NodeChannels, request_timeout_s: float = 5.0) -> None:
        self._local = local_node_id
        self._owner_of = owner_of
        self._address_of = address_of
        self._produce_locally = produce_locally
        self._describe_locally = describe_locally
        self._channels = channels
        self._timeout_s = request_timeout_s

    def produce(self, tp: TopicPartition, records: bytes, transactional_id: str | None = None) -> tuple[int, str]:
        """(error code, message) of appending `records` to `tp` durably; 0 when written (or a duplicate)."""
        request = pb.ProduceRequest(acks=-1, timeout_ms=int(self._timeout_s * 1000), partitions=[
            pb.PartitionRecords(topic=tp.topic, partition=tp.partition, records=records)])
        if transactional_id is not None:
            request.transactional_id = transactional_id
        try:
            owner = self._owner_of(tp)
            if owner == self._local:
                response = self._produce_locally(request)
            elif owner < 0:
                return 15, f"[COORDINATOR_NOT_AVAILABLE] no live node owns {tp}"
            else:
                stubs = self._channels.stubs(self._address_of(owner))
                response = call(stubs.partitions.Produce, request, self._timeout_s, check=False)
        except KafkaError as exc:
            return code_of(exc), str(exc)
        if response.error_code:
            return response.error_code, response.error_message
        result = response.partitions[0]
        return result.error_code, result.error_message

    def last_sequence(self, tp: TopicPartition, producer_id: int) -> int | None:
        """The last sequence `producer_id` wrote to `tp` (NO_SEQUENCE: none), None if it cannot be told now."""
        request = pb.DescribeProducersRequest(partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)])
        try:
            owner = self._owner_of(tp)
            if owner == self._local:
                response = self._describe_locally(request)
            elif owner < 0:
                return None
            else:
                stubs = self._channels.stubs(self._address_of(owner))
                response = call(stubs.partitions.DescribeProducers, request, self._timeout_s, check=False)
        except KafkaError:
            return None
        if response.error_code or not response.partitions or response.partitions[0].error_code:
            return None
        for producer in response.partitions[0].active_producers:
            if producer.producer_id == producer_id:
                return producer.last_sequence
        return NO_SEQUENCE
