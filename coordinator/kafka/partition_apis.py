"""Produce, Fetch and ListOffsets on the Kafka port, answered by PartitionServer (the gRPC Partitions service's
logic): records travel as the client's v2 batches, byte for byte, in both directions.

Per-partition errors stay per partition, in the order of the request. No fetch sessions: every fetch
is a full one and answers session id 0, which tells a client that no session was created.
"""
from __future__ import annotations

from collections import Counter
from concurrent.futures import Future
from typing import Any

from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from coordinator.kafka.apis import WireError
from coordinator.later import answered, then
from coordinator.partition_service import PartitionServer, unique_partitions
from proto import records
from proto import txnsim_pb2 as pb
from proto.compression import CODEC_MASK, Codec
from proto.errors import (
    KafkaError,
    UnsupportedCompressionTypeError,
    code_of,
)

#: ListOffsets timestamps with a meaning of their own (Kafka's ListOffsetsRequest)
LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP = -1, -2, -3
READ_COMMITTED = 1
#: Kafka's ProduceRequest.validateRecords: zstd batches only from Produce v7 (KIP-110)
ZSTD_SINCE_PRODUCE_VERSION = 7


def _uses_zstd(data: bytes) -> bool:
    """Whether any batch of a partition's records is compressed with zstd (headers only; the node checks the
    rest)."""
    pos = 0
    try:
        while pos < len(data):
            header = records.read_header(data, pos)
            if header.attributes & CODEC_MASK == Codec.ZSTD:
                return True
            pos += header.size
    except KafkaError:
        return False  # garbage: the node answers CORRUPT_MESSAGE
    return False


class PartitionApis:
    def __init__(self, partitions: PartitionServer) -> None:
        self._partitions = partitions

    # ------------------------------------------------------------ Produce (0)

    def produce(self, request: ProduceRequest, version: int) -> ProduceResponse | None:
        wanted = [(topic.name, part.index, part.records or b"") for topic in request.topic_data
                  for part in topic.partition_data]
        results: dict[tuple[str, int], tuple[int, str | None, int, int]] = {}
        if version < ZSTD_SINCE_PRODUCE_VERSION:
            for t, p, data in wanted:
                if _uses_zstd(data):
                    results[(t, p)] = (UnsupportedCompressionTypeError.errno, f"Produce v{version} may not carry "
                                       f"zstd batches (from v{ZSTD_SINCE_PRODUCE_VERSION}, KIP-110)", -1, -1)
            wanted = [w for w in wanted if (w[0], w[1]) not in results]
        if request.acks not in (-1, 0, 1):
            code = WireError.INVALID_REQUIRED_ACKS
            results = {(t, p): (code, f"acks must be -1, 0 or 1, not {request.acks}", -1, -1)
                       for topic in request.topic_data for t, p in [(topic.name, part.index)
                                                                   for part in topic.partition_data]}
        elif wanted:
            produce = pb.ProduceRequest(acks=request.acks, timeout_ms=request.timeout_ms, partitions=[
                pb.PartitionRecords(topic=t, partition=p, records=records) for t, p, records in wanted])
            if request.transactional_id is not None:
                produce.transactional_id = request.transactional_id
            try:
                answer = self._partitions.produce(produce)
                for r in answer.partitions:
                    results[(r.topic, r.partition)] = (r.error_code, r.error_message or None,
                                                       r.base_offset, r.log_start_offset if not r.error_code else -1)
            except KafkaError as exc:
                results.update({(t, p): (code_of(exc), str(exc), -1, -1) for t, p, _ in wanted})
        if request.acks == 0:
            return None  # the client expects no response at all
        P = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
        return ProduceResponse(version=version, throttle_time_ms=0, responses=[
            ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=[
                P(index=part.index, error_code=code, base_offset=base_offset, log_append_time_ms=-1,
                  log_start_offset=log_start, record_errors=[], error_message=message)
                for part in topic.partition_data
                for code, message, base_offset, log_start in [results[(topic.name, part.index)]]])
            for topic in request.topic_data])

    # ------------------------------------------------------------ Fetch (1)

    def fetch(self, request: FetchRequest, version: int) -> FetchResponse:
        return self.fetch_later(request, version).result()

    def fetch_later(self, request: FetchRequest, version: int) -> Future[FetchResponse]:
        """The fetch's answer to come: it long-polls as a callback of the partitions it reads, not a thread."""
        if version >= 7 and request.session_id != 0:  # no session was ever created, so none can be found
            return answered(FetchResponse(version=version, throttle_time_ms=0, session_id=0, responses=[],
                                          error_code=WireError.FETCH_SESSION_ID_NOT_FOUND))
        committed = request.isolation_level == READ_COMMITTED
        wanted = unique_partitions(
            pb.FetchPartition(topic=topic.topic, partition=part.partition, fetch_offset=part.fetch_offset,
                              max_bytes=part.partition_max_bytes)
            for topic in request.topics for part in topic.partitions)
        try:
            pending = self._partitions.fetch_future(pb.FetchRequest(
                isolation_level=request.isolation_level, max_wait_ms=max(0, request.max_wait_ms),
                min_bytes=request.min_bytes, max_bytes=request.max_bytes, partitions=wanted))
        except KafkaError as exc:  # e.g. an isolation level other than 0 or 1
            pending = answered(pb.FetchResponse(partitions=[pb.FetchPartitionResult(error_code=code_of(exc))
                                                            for _ in wanted]))
        return then(pending, lambda answer: self._fetch_response(answer, wanted, committed, version))

    @staticmethod
    def _fetch_response(answer: pb.FetchResponse, wanted: list[pb.FetchPartition], committed: bool,
                        version: int) -> FetchResponse:
        # PartitionServer answers each partition once, in the order of `wanted`; grouped by topic as asked
        PartitionData = FetchResponse.FetchableTopicResponse.PartitionData
        by_topic: dict[str, list[Any]] = {}
        for part, r in zip(wanted, answer.partitions):
            failed = r.error_code != 0
            by_topic.setdefault(part.topic, []).append(PartitionData(
                partition_index=part.partition, error_code=r.error_code,
                high_watermark=-1 if failed else r.high_watermark,
                last_stable_offset=-1 if failed else r.last_stable_offset,
                log_start_offset=-1 if failed else r.log_start_offset,
                aborted_transactions=[PartitionData.AbortedTransaction(producer_id=a.producer_id,
                                                                       first_offset=a.first_offset)
                                      for a in r.aborted_transactions] if committed and not failed else None,
                preferred_read_replica=-1, records=r.records))
        responses = [FetchResponse.FetchableTopicResponse(topic=name, partitions=partitions)
                     for name, partitions in by_topic.items()]
        return FetchResponse(version=version, throttle_time_ms=0, error_code=0, session_id=0, responses=responses)

    # ------------------------------------------------------------ ListOffsets (2)

    def list_offsets(self, request: ListOffsetsRequest, version: int) -> ListOffsetsResponse:
        """-2 the log start, -1 the HW (the LSO for read_committed), -3 (v7+) the record with the largest
        timestamp, a time the first record at or after it; a time with no such record readable is -1/-1."""
        isolation = request.isolation_level if version >= 2 and request.isolation_level in (0, 1) else 0
        wanted = [(topic.name, part) for topic in request.topics for part in topic.partitions]
        # a partition named twice is INVALID_REQUEST for both namings, as Kafka's KafkaApis answers duplicates
        named = Counter((name, part.partition_index) for name, part in wanted)
        try:
            answer = self._partitions.list_offsets(pb.ListOffsetsRequest(
                partitions=[pb.TopicPartitionRef(topic=name, partition=part.partition_index) for name, part in wanted],
                timestamps=[part.timestamp for _name, part in wanted], isolation_level=isolation))
            found = iter(answer.partitions)
        except KafkaError as exc:
            found = iter([pb.PartitionOffsets(error_code=code_of(exc))] * len(wanted))
        Partition = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
        topics = []
        for topic in request.topics:
            partitions = []
            for part in topic.partitions:
                r = next(found)
                code, offset, timestamp = r.error_code, -1, -1
                if named[(topic.name, part.partition_index)] > 1:
                    code = WireError.INVALID_REQUEST
                if code == 0:
                    if part.timestamp == EARLIEST_TIMESTAMP:
                        offset = r.log_start_offset
                    elif part.timestamp == LATEST_TIMESTAMP:
                        offset = r.last_stable_offset if isolation == READ_COMMITTED else r.high_watermark
                    elif part.timestamp == MAX_TIMESTAMP and version < 7:
                        code = WireError.UNSUPPORTED_VERSION  # KIP-734: clients ask -3 only at v7+
                    else:
                        offset, timestamp = r.offset_for_timestamp, r.timestamp
                partitions.append(Partition(partition_index=part.partition_index, error_code=code,
                                            timestamp=timestamp, offset=offset, leader_epoch=-1))
            topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
        return ListOffsetsResponse(version=version, throttle_time_ms=0, topics=topics)
