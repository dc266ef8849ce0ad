"""A WriteTxnMarkers request carries markers of many transactions (the marker channels share requests), so a
node bug met while writing one marker fails that marker alone: its batch-mates are written and acknowledged."""
from __future__ import annotations

import logging

from coordinator.membership import Membership
from coordinator.partition_service import PartitionServer
from coordinator.topics import TopicStore
from partitions import LogManager, PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import UnknownServerError
from proto.structs import CONSUMER_OFFSETS_TOPIC
from tests.fakes import node_io
from txnsim.cluster import ClusterLayout

BROKEN_PRODUCER = 1


def server(tmp_path, on_offsets_marker=lambda *args: None) -> PartitionServer:
    membership = Membership(ClusterLayout(tmp_path), [0], own_node_id=0)
    io = node_io()
    return PartitionServer(io=io, logs=LogManager(tmp_path / "logs"), membership=membership,
                           topics=TopicStore(tmp_path / "metadata", tmp_path / "logs"), offsets_shards=2,
                           txn_shards=1, verify=lambda *args: args[-1]({}), on_offsets_marker=on_offsets_marker)


def marker(producer_id: int, partition: int = 0) -> pb.TxnMarker:
    return pb.TxnMarker(producer_id=producer_id, producer_epoch=0, committed=True, coordinator_epoch=0,
                        transaction_version=2,
                        partitions=[pb.TopicPartitionRef(topic=CONSUMER_OFFSETS_TOPIC, partition=partition)])


def codes(response: pb.WriteTxnMarkersResponse) -> dict[int, list[int]]:
    return {m.producer_id: [p.error_code for p in m.partitions] for m in response.markers}


def test_a_marker_that_meets_a_node_bug_fails_alone_and_its_batch_mates_are_acknowledged(tmp_path, caplog):
    told: list[int] = []

    def on_offsets_marker(partition: int, producer_id: int, committed: bool, offset: int) -> None:
        if producer_id == BROKEN_PRODUCER:
            raise RuntimeError("a bug in the group coordinator's marker handling")
        told.append(producer_id)

    partitions = server(tmp_path, on_offsets_marker)
    with caplog.at_level(logging.ERROR):
        response = partitions.write_txn_markers(pb.WriteTxnMarkersRequest(markers=[marker(0), marker(1), marker(2)]))

    assert codes(response) == {0: [0], 1: [UnknownServerError.errno], 2: [0]}
    assert told == [0, 2]
    failed = next(m for m in response.markers if m.producer_id == BROKEN_PRODUCER).partitions[0]
    assert "RuntimeError" in failed.error_message
    assert "offsets marker for producer 1" in caplog.text


def test_a_marker_whose_append_meets_a_node_bug_fails_alone(tmp_path, monkeypatch):
    append = PartitionLog.append_marker

    def failing_for_one_producer(self, **kwargs):
        if kwargs["producer_id"] == BROKEN_PRODUCER:
            raise RuntimeError("a bug in the log's marker append")
        return append(self, **kwargs)
    monkeypatch.setattr(PartitionLog, "append_marker", failing_for_one_producer)

    response = server(tmp_path).write_txn_markers(pb.WriteTxnMarkersRequest(markers=[marker(0), marker(1), marker(2)]))
    assert codes(response) == {0: [0], 1: [UnknownServerError.errno], 2: [0]}


def test_a_log_that_cannot_be_made_durable_fails_only_the_markers_written_to_it(tmp_path, monkeypatch):
    durable = PartitionLog.make_durable

    def failing_for_partition_one(self, end_offset):
        if self.partition == 1:
            raise OSError(5, "Input/output error")
        return durable(self, end_offset)
    monkeypatch.setattr(PartitionLog, "make_durable", failing_for_partition_one)

    request = pb.WriteTxnMarkersRequest(markers=[marker(0, partition=0), marker(1, partition=1), marker(2)])
    response = server(tmp_path).write_txn_markers(request)
    assert codes(response) == {0: [0], 1: [UnknownServerError.errno], 2: [0]}
