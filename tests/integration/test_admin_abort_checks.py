"""`transactions abort` writes an ABORT marker only for the open transaction it names: the client refuses a
negative start offset, and the partition leader refuses, with Kafka's error, a marker for a producer with
nothing open or a transaction that starts elsewhere (no stray marker reaches the log)."""
from __future__ import annotations

import pytest

from client.cluster import ClusterClient
from client.transport import call
from proto import txnsim_pb2 as pb
from proto.errors import InvalidRequestError, InvalidTxnStateError, code_of
from tests.helpers import wait_until
from txnsim import Producer, TopicPartition


def _admin_abort(bootstrap_servers: str, tp: TopicPartition, producer_id: int, epoch: int,
                 start_offset: int) -> pb.PartitionError:
    """The marker `Admin.abort_transaction` sends, sent as is (so the leader's own check is what answers)."""
    client = ClusterClient(bootstrap_servers)
    try:
        marker = pb.TxnMarker(producer_id=producer_id, producer_epoch=epoch, committed=False, coordinator_epoch=0,
                              partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)],
                              admin_abort_start_offset=start_offset)
        response = call(client.stubs(client.leader_address(tp)).partitions.WriteTxnMarkers,
                        pb.WriteTxnMarkersRequest(markers=[marker]), 10)
        result: pb.PartitionError = response.markers[0].partitions[0]
        return result
    finally:
        client.close()


def test_the_leader_refuses_an_admin_abort_of_nothing_open(cluster, admin, topic, txn_id):
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value=b"v", partition=0)
        p.commit_transaction()
        # the COMMIT marker is written after commit_transaction returns
        (state,) = wait_until(lambda: [s for s in admin.describe_producers(tp) if s.current_txn_start_offset == -1],
                              timeout_s=10, what="the COMMIT marker to close the transaction")
        end = admin.end_offsets([tp])[tp]
        with pytest.raises(InvalidRequestError, match="negative"):
            admin.abort_transaction(topic, 0, -1)
        negative = _admin_abort(cluster.bootstrap_servers, tp, state.producer_id, state.producer_epoch, -1)
        assert negative.error_code == code_of(InvalidRequestError("")), negative
        idle = _admin_abort(cluster.bootstrap_servers, tp, state.producer_id, state.producer_epoch, 0)
        assert idle.error_code == code_of(InvalidTxnStateError("")), idle
        assert "no open transaction" in idle.error_message
        assert admin.end_offsets([tp])[tp] == end  # no stray ABORT marker

        p.begin_transaction()
        start = p.send(topic, value=b"open", partition=0).get(timeout=10).offset
        wrong = _admin_abort(cluster.bootstrap_servers, tp, state.producer_id, state.producer_epoch, start + 1)
        assert wrong.error_code == code_of(InvalidRequestError("")) and f"starts at offset {start}" in \
            wrong.error_message, wrong
        assert admin.last_stable_offsets([tp])[tp] == start
        admin.abort_transaction(topic, 0, start)  # the right one is still aborted
        assert admin.last_stable_offsets([tp])[tp] == admin.end_offsets([tp])[tp]
