"""Where users found txnsim's producer differing from Kafka's TransactionManager: each rule, against the fake nodes."""
from __future__ import annotations

import pytest

from producer.transaction_manager import TransactionState
from proto import errors as e

S = TransactionState


def transactional(make_producer, cluster, tid: str = "tx-1", **kw):
    producer = make_producer(cluster, transactional_id=tid, **kw)
    producer.init_transactions()
    return producer


def test_abort_after_invalid_producer_id_mapping_skips_end_txn_and_gets_a_new_producer_id(fake_cluster,
                                                                                          make_producer):
    """The transactional id expired: the coordinator answers every request of the old producer id with
    INVALID_PRODUCER_ID_MAPPING, EndTxn included. Kafka skips EndTxn and goes to InitProducerId."""
    p = transactional(make_producer, fake_cluster)
    pid, epoch = p.producer_id_and_epoch
    p.begin_transaction()
    fake_cluster.script("AddPartitionsToTxn", 49)
    fake_cluster.script("EndTxn", *([49] * 100))  # a real coordinator would refuse EndTxn forever
    with pytest.raises(e.InvalidProducerIdMappingError):
        p.send("orders", value=b"v", partition=0).get(timeout=5)
    with pytest.raises(e.InvalidProducerIdMappingError, match="abort_transaction"):
        p.commit_transaction()
    p.abort_transaction()
    assert fake_cluster.calls_of("EndTxn") == []
    (_, bump) = fake_cluster.calls_of("InitProducerId")
    assert (bump.producer_id, bump.producer_epoch) == (pid, epoch)
    assert p.transaction_state is S.READY
    fake_cluster.scripts["EndTxn"].clear()  # the new producer id is the coordinator's again
    p.begin_transaction()
    assert p.send("orders", value=b"w", partition=0).get(timeout=5).offset >= 0
    p.commit_transaction()


def test_abort_whose_end_txn_meets_invalid_producer_id_mapping_still_completes(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0).get(timeout=5)
    fake_cluster.script("EndTxn", *([49] * 100))
    p.abort_transaction()
    assert p.transaction_state is S.READY
    assert len(fake_cluster.calls_of("EndTxn")) == 1 and len(fake_cluster.calls_of("InitProducerId")) == 2


def test_commit_after_a_delivery_timeout_is_abortable_not_retriable(fake_cluster, make_producer):
    """Kafka fails commitTransaction() with a non-retriable KafkaException after an expired batch: retrying
    the commit can never succeed, the transaction must be aborted."""
    p = transactional(make_producer, fake_cluster, request_timeout_ms=100, delivery_timeout_ms=300)
    p.begin_transaction()
    fake_cluster.script("Produce", *([6] * 1000))  # NOT_LEADER_OR_FOLLOWER until the batch expires
    with pytest.raises(e.KafkaTimeoutError, match="delivery_timeout_ms"):
        p.send("orders", value=b"v", partition=0).get(timeout=5)
    for _ in range(2):  # the same answer however often it is retried
        with pytest.raises(e.TransactionAbortableError, match="abort_transaction") as failure:
            p.commit_transaction()
        assert not failure.value.retriable and failure.value.abortable
        assert isinstance(failure.value.__cause__, e.KafkaTimeoutError)
    assert p.transaction_state is S.ABORTABLE_ERROR
    fake_cluster.scripts["Produce"].clear()
    p.abort_transaction()
    assert p.transaction_state is S.READY
    p.begin_transaction()
    assert p.send("orders", value=b"w", partition=0).get(timeout=5).offset >= 0
    p.commit_transaction()


def test_a_commit_that_runs_out_of_max_block_ms_is_still_a_retriable_timeout(fake_cluster, make_producer):
    """Only the delivery timeout of a record is abortable; commit's own deadline keeps meaning 'call again'."""
    p = transactional(make_producer, fake_cluster, max_block_ms=300)
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0).get(timeout=5)
    fake_cluster.script("EndTxn", *([51] * 1000))  # CONCURRENT_TRANSACTIONS until the deadline
    with pytest.raises(e.KafkaTimeoutError) as failure:
        p.commit_transaction()
    assert failure.value.retriable and not isinstance(failure.value, e.TransactionAbortableError)
    fake_cluster.scripts["EndTxn"].clear()
    p.commit_transaction()
    assert p.transaction_state is S.READY
