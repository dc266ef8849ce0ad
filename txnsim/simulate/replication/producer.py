"""The replication model's clients: idempotent producers writing with acks=all, as a Kafka producer with
enable.idempotence does: one batch in flight per partition, retried with the same sequence number until
answered, so a batch written twice (answered late, or across a leader change) is one record. A producer
that does not know the leader tries the brokers in turn. What was acknowledged is the model's ground truth.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from proto import records
from proto import txnsim_pb2 as pb
from proto.errors import NONE, name_of
from proto.structs import TopicPartition
from txnsim.simulate.network import TIMED_OUT, Network

PRODUCE_TIMEOUT_MS = 1_500
RETRY_BACKOFF_MS = 50
SEND_INTERVAL_MS = (5, 40)
#: errors after which the same batch is sent again (to the next broker when it was not the leader)
RETRIABLE = frozenset({"NOT_LEADER_OR_FOLLOWER", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
                       "REQUEST_TIMED_OUT", "UNKNOWN_TOPIC_OR_PARTITION", "KAFKA_STORAGE_ERROR"})


class Producer:
    def __init__(self, name: str, producer_id: int, network: Network, rng: random.Random, brokers: Sequence[str],
                 partitions: Sequence[TopicPartition], *, on_acked: Callable[[TopicPartition, bytes, int], None],
                 on_refused: Callable[[str], None]) -> None:
        self.name = name
        self.producer_id = producer_id
        self.network = network
        self.rng = rng
        self.brokers = list(brokers)
        self.partitions = list(partitions)
        self._on_acked = on_acked
        self._on_refused = on_refused
        self._sequence = {tp: 0 for tp in self.partitions}
        self._leader = {tp: 0 for tp in self.partitions}  # an index into brokers
        self.stopped = False
        self.sent = 0

    def start(self) -> None:
        for tp in self.partitions:
            self.network.set_timer(self.name, self.rng.randint(*SEND_INTERVAL_MS), self._next, tp, label="produce")

    def stop(self) -> None:
        self.stopped = True

    def _next(self, tp: TopicPartition) -> None:
        if self.stopped:
            return
        value = f"{self.name}-{tp.partition}-{self._sequence[tp]}".encode()
        batch = records.encode_batch([(0, None, value, ())], producer_id=self.producer_id, producer_epoch=0,
                                     base_sequence=self._sequence[tp])
        self._send(tp, value, batch)

    def _send(self, tp: TopicPartition, value: bytes, batch: bytes) -> None:
        broker = self.brokers[self._leader[tp]]
        request = pb.ProduceRequest(acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS, partitions=[
            pb.PartitionRecords(topic=tp.topic, partition=tp.partition, records=batch)])
        self.sent += 1
        self.network.call(self.name, broker, request, PRODUCE_TIMEOUT_MS,
                          lambda response: self._answered(tp, value, batch, response))

    def _answered(self, tp: TopicPartition, value: bytes, batch: bytes, response: object) -> None:
        error = "REQUEST_TIMED_OUT" if response is TIMED_OUT else None
        offset = -1
        if isinstance(response, pb.ProduceResponse):
            if response.error_code != NONE:
                error = name_of(response.error_code)
            else:
                result = response.partitions[0]
                error = None if result.error_code == NONE else name_of(result.error_code)
                offset = result.base_offset
        if error is None:
            self._on_acked(tp, value, offset)
            self._sequence[tp] += 1
            self.network.set_timer(self.name, self.rng.randint(*SEND_INTERVAL_MS), self._next, tp, label="produce")
            return
        if error not in RETRIABLE:  # (OUT_OF_ORDER_SEQUENCE_NUMBER: the leader lacks an earlier acked batch)
            self._on_refused(f"{self.name}: {tp} refused sequence {self._sequence[tp]} with {error}")
            return
        if error in ("NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT", "UNKNOWN_TOPIC_OR_PARTITION"):
            self._leader[tp] = (self._leader[tp] + 1) % len(self.brokers)
        if not self.stopped:  # once the run quiesces, an unanswered batch is simply not acknowledged
            self.network.set_timer(self.name, RETRY_BACKOFF_MS, self._send, tp, value, batch, label="produce retry")
