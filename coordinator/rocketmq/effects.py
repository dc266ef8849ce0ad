"""Writes a half-message shard owes to data partitions: the copy of a committed message to its
real topic (an idempotent batch, so a redone copy is a duplicate the partition recognises), and
the producer state that tells which copies already landed. Local partitions are written in
process, the others through their owner's Partitions service (routing.OwnerRouter).
"""
from __future__ import annotations

from collections.abc import Callable

from client.transport import Stubs, call
from coordinator.rocketmq.routing import OwnerRouter
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, code_of
from proto.records import NO_SEQUENCE
from proto.structs import TopicPartition


class PartitionWriter:
    def __init__(self, *, router: OwnerRouter,
                 produce_locally: Callable[[pb.ProduceRequest], pb.ProduceResponse],
                 describe_locally: Callable[[pb.DescribeProducersRequest], pb.DescribeProducersResponse]) -> None:
        self._router = router
        self._produce_locally = produce_locally
        self._describe_locally = describe_locally

    def produce(self, tp: TopicPartition, records: bytes, transactional_id: str | None = None) -> tuple[int, str]:
        """(error code, message) of appending `records` to `tp` durably; 0 when written (or a duplicate)."""
        request = pb.ProduceRequest(acks=-1, partitions=[
            pb.PartitionRecords(topic=tp.topic, partition=tp.partition, records=records)])
        if transactional_id is not None:
            request.transactional_id = transactional_id

        def on_owner(stubs: Stubs | None, timeout_s: float) -> pb.ProduceResponse:
            request.timeout_ms = int(timeout_s * 1000)
            if stubs is None:
                return self._produce_locally(request)
            answer: pb.ProduceResponse = call(stubs.partitions.Produce, request, timeout_s, check=False)
            return answer

        try:
            response = self._router.call(tp.topic, tp.partition, on_owner)
        except KafkaError as exc:
            return code_of(exc), str(exc)
        if response.error_code:
            return response.error_code, response.error_message
        result = response.partitions[0]
        return result.error_code, result.error_message

    def last_sequence(self, tp: TopicPartition, producer_id: int) -> int | None:
        """The last sequence `producer_id` wrote to `tp` (NO_SEQUENCE: none), None if it cannot be told now."""
        request = pb.DescribeProducersRequest(partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)])

        def on_owner(stubs: Stubs | None, timeout_s: float) -> pb.DescribeProducersResponse:
            if stubs is None:
                return self._describe_locally(request)
            answer: pb.DescribeProducersResponse = call(stubs.partitions.DescribeProducers, request, timeout_s,
                                                        check=False)
            return answer

        try:
            response = self._router.call(tp.topic, tp.partition, on_owner)
        except KafkaError:
            return None
        if response.error_code or not response.partitions or response.partitions[0].error_code:
            return None
        for producer in response.partitions[0].active_producers:
            if producer.producer_id == producer_id:
                return producer.last_sequence
        return NO_SEQUENCE
