"""A WriteTxnMarkers request carries markers of many transactions (the marker channels share requests), so a
node bug met while writing one marker fails that marker alone: its batch-mates are written and acknowledged."""
from __future__ import annotations

import logging

from coordinator.membership import Membership
from coordinator.partition_service import PartitionServer
from coordinator.topics import TopicStore
from partitions import LogManager
from proto import txnsim_pb2 as pb
from proto.errors import UnknownServerError
from proto.structs import CONSUMER_OFFSETS_TOPIC
from txnsim.cluster import ClusterLayout

BROKEN_PRODUCER = 1


def server(tmp_path, on_offsets_marker) -> PartitionServer:
    membership = Membership(ClusterLayout(tmp_path), [0], own_node_id=0)
    return PartitionServer(node_id=0, logs=LogManager(tmp_path / "logs"), membership=membership,
                           topics=TopicStore(tmp_path / "metadata", tmp_path / "logs"), offsets_shards=1,
                           txn_shards=1, verify=lambda *args: {}, on_offsets_marker=on_offsets_marker)


def marker(producer_id: int) -> pb.TxnMarker:
    return pb.TxnMarker(producer_id=producer_id, producer_epoch=0, committed=True, coordinator_epoch=0,
                        transaction_version=2,
                        partitions=[pb.TopicPartitionRef(topic=CONSUMER_OFFSETS_TOPIC, partition=0)])


def test_a_marker_that_meets_a_node_bug_fails_alone_and_its_batch_mates_are_acknowledged(tmp_path, caplog):
    told: list[int] = []

    def on_offsets_marker(partition: int, producer_id: int, committed: bool, offset: int) -> None:
        if producer_id == BROKEN_PRODUCER:
            raise RuntimeError("a bug in the group coordinator's marker handling")
        told.append(producer_id)

    partitions = server(tmp_path, on_offsets_marker)
    with caplog.at_level(logging.ERROR):
        response = partitions.write_txn_markers(pb.WriteTxnMarkersRequest(markers=[marker(0), marker(1), marker(2)]))

    errors = {m.producer_id: [p.error_code for p in m.partitions] for m in response.markers}
    assert errors == {0: [0], 1: [UnknownServerError.errno], 2: [0]}
    assert told == [0, 2]
    failed = next(m for m in response.markers if m.producer_id == BROKEN_PRODUCER).partitions[0]
    assert "RuntimeError" in failed.error_message
    assert "offsets marker for producer 1" in caplog.text
