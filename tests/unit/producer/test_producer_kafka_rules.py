"""Where users found txnsim's producer differing from Kafka's TransactionManager: each rule, against the fake nodes."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from producer.transaction_manager import TransactionState
from proto import errors as e
from proto import txnsim_pb2 as pb
from proto.records import iter_batches

S = TransactionState


def transactional(make_producer, cluster, tid: str = "tx-1", **kw):
    producer = make_producer(cluster, transactional_id=tid, **kw)
    producer.init_transactions()
    return producer


def test_abort_after_invalid_producer_id_mapping_skips_end_txn_and_gets_a_new_producer_id(fake_cluster,
                                                                                          make_producer):
    """The transactional id expired: the coordinator answers every request of the old producer id with
    INVALID_PRODUCER_ID_MAPPING, EndTxn included. Kafka skips EndTxn and goes to InitProducerId.
    (Here the producer's own AddPartitionsToTxn hears it; with the implicit add the leader passes it on
    in the produce answer, test_abort_succeeds_after_the_transactional_id_expired in the integration tests.)"""
    p = transactional(make_producer, fake_cluster, explicit_add=True)
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


# ---------------------------------------------------------------- MESSAGE_TOO_LARGE: split, do not fail


def refuse_batches_above(cluster, max_records: int, times: int = 100) -> None:
    """Answer MESSAGE_TOO_LARGE, as a node with a small message_max_bytes does, to a request holding a batch
    of more records (the tests below write to one partition, so a request holds one batch)."""
    def answer(request, node_id):
        counts = [next(iter(iter_batches(p.records))).header.records_count for p in request.partitions]
        if max(counts) <= max_records:
            return None  # written as usual
        return pb.ProduceResponse(partitions=[
            pb.PartitionProduceResult(topic=p.topic, partition=p.partition, base_offset=-1, error_code=10,
                                      error_message="too large") for p in request.partitions])
    cluster.script("Produce", *([answer] * times))


@pytest.mark.parametrize("max_records", [4, 2, 1])
def test_a_batch_over_the_nodes_limit_is_split_and_resent_in_order(fake_cluster, make_producer, max_records):
    p = make_producer(fake_cluster, linger_ms=30_000, delivery_timeout_ms=60_000)
    called_back: list[int] = []
    futures = [p.send("orders", value=b"v%d" % i, partition=0) for i in range(8)]
    futures[5].add_callback(lambda meta: called_back.append(meta.offset))
    refuse_batches_above(fake_cluster, max_records)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(futures[7].get, 5)  # blocked on the batch before it is split
        p.flush(timeout=5)
        assert waiting.result(5).offset == 7
    assert [f.get(timeout=5).offset for f in futures] == list(range(8))
    assert called_back == [5]
    entries = fake_cluster.data("orders", 0)
    assert [r for entry in entries for r in entry.records] == [(None, b"v%d" % i) for i in range(8)]
    # the parts keep the original batch's sequences: each starts where the one before ended
    assert [entry.base_sequence for entry in entries] == list(range(0, 8, max(e.count for e in entries)))
    assert all(entry.count <= max_records for entry in entries)
    assert len({entry.producer_epoch for entry in entries}) == 1


def test_a_transaction_commits_only_once_every_part_of_a_split_batch_is_written(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster, linger_ms=30_000, delivery_timeout_ms=60_000)
    p.begin_transaction()
    futures = [p.send("orders", value=b"t%d" % i, partition=1) for i in range(6)]
    refuse_batches_above(fake_cluster, 2)
    p.commit_transaction()
    assert all(f.is_done and f.succeeded() for f in futures)
    assert [f.get(0).offset for f in futures] == list(range(6))
    methods = fake_cluster.methods()
    assert methods[-1] == "EndTxn" and methods.count("Produce") >= 4
    assert p.transaction_state is S.READY


def test_a_single_record_over_the_nodes_limit_still_fails(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    fake_cluster.script("Produce", 10)
    with pytest.raises(e.RecordTooLargeError):
        p.send("orders", value=b"alone", partition=0).get(timeout=5)
