"""The Producer end to end against the scripted fake nodes of conftest.py (real gRPC, one process)."""
from __future__ import annotations

import pytest

from producer import Producer
from producer.transaction_manager import TransactionState
from proto import errors as e
from proto import txnsim_pb2 as pb
from proto.records import iter_batches
from proto.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

S = TransactionState
#: batches wait for flush, commit or close, never for the linger timer
LONG_LINGER = dict(linger_ms=30_000, delivery_timeout_ms=60_000)


def transactional(make_producer, cluster, tid: str = "tx-1", **kw) -> Producer:
    producer = make_producer(cluster, transactional_id=tid, **kw)
    producer.init_transactions()
    return producer


# ---------------------------------------------------------------- the happy path


@pytest.mark.parametrize("explicit_add", [False, True], ids=["implicit add", "explicit add"])
def test_commit_registers_partitions_before_producing_and_adopts_the_new_epoch(fake_cluster, make_producer,
                                                                                explicit_add):
    """Transactions V2: the produce requests ask their leaders to add the partitions (the leaders' adds are
    the coordinator's only AddPartitionsToTxn); a batch participant's producer registers them itself first."""
    p = transactional(make_producer, fake_cluster, explicit_add=explicit_add)
    pid, epoch = p.producer_id_and_epoch
    p.begin_transaction()
    futures = [p.send("orders", value=b"v%d" % i, key=b"k%d" % i) for i in range(30)]
    p.commit_transaction()
    metas = [f.get(timeout=5) for f in futures]
    assert {m.partition for m in metas} == {0, 1, 2}
    methods = fake_cluster.methods()
    if explicit_add:
        assert methods.index("AddPartitionsToTxn") < methods.index("Produce")
    else:
        assert methods.index("Produce") < methods.index("AddPartitionsToTxn")
    assert all(r.add_partitions is not explicit_add for r in fake_cluster.calls_of("Produce"))
    assert methods[-1] == "EndTxn"
    (end,) = fake_cluster.calls_of("EndTxn")
    assert end.committed and (end.producer_id, end.producer_epoch) == (pid, epoch)
    assert p.producer_id_and_epoch == (pid, epoch + 1)  # Transactions V2
    assert p.transaction_state is S.READY
    for produce in fake_cluster.calls_of("Produce"):
        assert produce.transactional_id == "tx-1"
    registered = {(tp.topic, tp.partition) for r in fake_cluster.calls_of("AddPartitionsToTxn") for tp in r.partitions}
    assert registered == {("orders", 0), ("orders", 1), ("orders", 2)}
    # the keyed records landed where murmur2 says, with consecutive offsets per partition
    for partition in range(3):
        entries = fake_cluster.data("orders", partition)
        assert all(entry.transactional for entry in entries)
        assert [m.offset for m in metas if m.partition == partition] == list(range(sum(e.count for e in entries)))


def test_next_transaction_restarts_sequences_under_the_bumped_epoch(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    for _ in range(2):
        p.begin_transaction()
        for i in range(5):
            p.send("orders", value=b"x", partition=1).get(timeout=5)
        p.commit_transaction()
    entries = fake_cluster.data("orders", 1)
    epochs = sorted({entry.producer_epoch for entry in entries})
    assert len(epochs) == 2 and epochs[1] == epochs[0] + 1
    for epoch in epochs:
        sequences = [entry.base_sequence for entry in entries if entry.producer_epoch == epoch]
        assert sequences[0] == 0 and sequences == sorted(sequences)


def test_idempotent_producer_gets_its_id_lazily_and_sends_plain_batches(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    assert fake_cluster.calls_of("InitProducerId") == []
    meta = p.send("orders", value=b"v", key=b"order-1").get(timeout=5)
    assert meta.partition == 1  # murmur2(b"order-1") % 3
    (init,) = fake_cluster.calls_of("InitProducerId")
    assert not init.HasField("transactional_id")
    (produce,) = fake_cluster.calls_of("Produce")
    assert not produce.HasField("transactional_id")
    (batch,) = iter_batches(produce.partitions[0].records)
    assert batch.header.producer_id > 0 and batch.header.base_sequence == 0 and not batch.header.is_transactional


def test_one_produce_request_per_node_carries_every_ready_partition(fake_cluster, make_producer):
    p = make_producer(fake_cluster, **LONG_LINGER)
    futures = [p.send("orders", value=b"v", partition=i % 3) for i in range(9)]
    p.flush(timeout=5)
    assert all(f.is_done for f in futures)
    (produce,) = fake_cluster.calls_of("Produce")
    assert sorted(part.partition for part in produce.partitions) == [0, 1, 2]


def test_unkeyed_records_fill_one_partition_batch_at_a_time(fake_cluster, make_producer):
    p = make_producer(fake_cluster, **LONG_LINGER)
    futures = [p.send("orders", value=b"x" * 50) for _ in range(10)]
    p.flush(timeout=5)
    assert len({f.get(0).partition for f in futures}) == 1


def test_context_manager_closes_and_flushes(fake_cluster):
    with Producer(bootstrap_servers=fake_cluster.bootstrap, **LONG_LINGER) as p:
        future = p.send("orders", value=b"v", partition=0)
    assert future.get(timeout=0).offset == 0
    with pytest.raises(e.IllegalStateError, match="closed"):
        p.send("orders", value=b"v")


# ---------------------------------------------------------------- retries and duplicates


def test_not_leader_retries_the_same_bytes_with_the_same_sequence(fake_cluster, make_producer):
    fake_cluster.script("Produce", 6, 6)
    p = make_producer(fake_cluster)
    assert p.send("orders", value=b"v", partition=2).get(timeout=5).offset == 0
    payloads = [call.partitions[0].records for call in fake_cluster.calls_of("Produce")]
    assert len(payloads) == 3 and len(set(payloads)) == 1
    assert len(fake_cluster.calls_of("Metadata")) >= 2  # the leader was looked up again


def test_lost_answer_is_retried_and_the_duplicate_gets_the_original_offset(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    p.send("orders", value=b"first", partition=0).get(timeout=5)
    fake_cluster.script("Produce", ("after", 7))  # written, but the answer says REQUEST_TIMED_OUT
    meta = p.send("orders", value=b"second", partition=0).get(timeout=5)
    assert meta.offset == 1
    assert [entry.records for entry in fake_cluster.data("orders", 0)] == [[(None, b"first")], [(None, b"second")]]


def test_leader_move_to_another_node_is_followed(fake_cluster2, make_producer):
    cluster = fake_cluster2
    p = make_producer(cluster)
    assert p.send("orders", value=b"a", partition=0).get(timeout=5).offset == 0
    cluster.leaders[("orders", 0)] = 1
    assert p.send("orders", value=b"b", partition=0).get(timeout=5).offset == 1
    nodes = [node for name, node, _ in cluster.calls if name == "Produce"]
    assert nodes[0] == 0 and nodes[-1] == 1


def test_dead_node_is_a_connection_error_that_is_retried_elsewhere(fake_cluster2, make_producer):
    cluster = fake_cluster2
    p = make_producer(cluster)
    p.send("orders", value=b"a", partition=1).get(timeout=5)  # partition 1 lives on node 1
    cluster.stop_node(1)
    cluster.leaders[("orders", 1)] = 0
    assert p.send("orders", value=b"b", partition=1).get(timeout=5).offset == 1


def test_delivery_timeout_fails_the_record_with_kafka_timeout_error(fake_cluster, make_producer):
    fake_cluster.script("Produce", *([6] * 1000))
    p = make_producer(fake_cluster, request_timeout_ms=100, delivery_timeout_ms=300)
    with pytest.raises(e.KafkaTimeoutError, match="delivery_timeout_ms"):
        p.send("orders", value=b"v", partition=0).get(timeout=5)


def test_init_retries_load_in_progress_and_concurrent_transactions(fake_cluster, make_producer):
    fake_cluster.script("InitProducerId", 14, 51)
    p = transactional(make_producer, fake_cluster)
    assert p.transaction_state is S.READY
    assert len(fake_cluster.calls_of("InitProducerId")) == 3


def test_end_txn_retries_and_rediscovers_a_moved_coordinator(fake_cluster2, make_producer):
    cluster = fake_cluster2
    p = transactional(make_producer, cluster)
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0)
    cluster.script("EndTxn", 51, 16)
    finds_before = len(cluster.calls_of("FindCoordinator"))
    p.commit_transaction()
    assert len(cluster.calls_of("EndTxn")) == 3
    assert len(cluster.calls_of("FindCoordinator")) > finds_before
    assert p.transaction_state is S.READY


def test_end_txn_retried_after_a_lost_answer_is_recognised(fake_cluster2, make_producer):
    cluster = fake_cluster2
    p = transactional(make_producer, cluster)
    pid, epoch = p.producer_id_and_epoch
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0)

    def fail_over(request, node_id):
        cluster._EndTxn(node_id, request)  # committed on node 0 ...
        cluster.txn_coordinator = 1        # ... which then loses the shard before answering
        return pb.EndTxnResponse(error_code=16)

    cluster.script("EndTxn", fail_over)
    p.commit_transaction()
    ends = cluster.calls_of("EndTxn")
    assert len(ends) == 2 and ends[1].producer_epoch == epoch
    assert [node for name, node, _ in cluster.calls if name == "EndTxn"] == [0, 1]
    assert p.producer_id_and_epoch == (pid, epoch + 1)
    assert cluster.txns["tx-1"].state == "CompleteCommit"


def test_coordinator_retries_stop_at_max_block_ms(fake_cluster, make_producer):
    fake_cluster.script("EndTxn", *([51] * 10_000))
    p = transactional(make_producer, fake_cluster, max_block_ms=200)
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0)
    with pytest.raises(e.KafkaTimeoutError, match="EndTxn"):
        p.commit_transaction()
    assert p.transaction_state is S.COMMITTING_TRANSACTION
    fake_cluster.scripts["EndTxn"].clear()
    p.commit_transaction()  # resumes
    assert p.transaction_state is S.READY


# ---------------------------------------------------------------- empty transactions


def test_empty_transaction_sends_no_end_txn(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    p.begin_transaction()
    p.commit_transaction()
    p.begin_transaction()
    p.abort_transaction()
    assert fake_cluster.calls_of("EndTxn") == []
    assert p.transaction_state is S.READY


# ---------------------------------------------------------------- abortable and fatal errors


def test_failed_batch_makes_commit_raise_and_abort_recovers(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    p.begin_transaction()
    fake_cluster.script("Produce", 45)
    future = p.send("orders", value=b"v", partition=0)
    with pytest.raises(e.OutOfOrderSequenceError):
        future.get(timeout=5)
    with pytest.raises(e.OutOfOrderSequenceError, match="abort_transaction"):
        p.commit_transaction()
    assert p.transaction_state is S.ABORTABLE_ERROR
    with pytest.raises(e.OutOfOrderSequenceError):
        p.send("orders", value=b"v", partition=0)
    p.abort_transaction()
    assert p.transaction_state is S.READY
    assert [end.committed for end in fake_cluster.calls_of("EndTxn")] == [False]
    p.begin_transaction()
    assert p.send("orders", value=b"w", partition=0).get(timeout=5).offset >= 0
    p.commit_transaction()


def test_transaction_abortable_from_a_partition_fails_the_rest_of_the_transaction(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster, **LONG_LINGER)
    p.begin_transaction()
    fake_cluster.script("Produce", 120)
    first = p.send("orders", value=b"v", partition=0)
    p.flush(timeout=5)
    with pytest.raises(e.TransactionAbortableError):
        first.get(0)
    with pytest.raises(e.TransactionAbortableError):
        p.commit_transaction()
    p.abort_transaction()
    assert p.transaction_state is S.READY


def test_abort_discards_unsent_records(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster, **LONG_LINGER)
    p.begin_transaction()
    futures = [p.send("orders", value=b"v", partition=i % 3) for i in range(6)]
    p.abort_transaction()
    for future in futures:
        with pytest.raises(e.TransactionAbortedError):
            future.get(timeout=0)
    assert fake_cluster.calls_of("Produce") == []
    assert p.transaction_state is S.READY


def test_fenced_producer_fails_every_call_but_close(fake_cluster, make_producer):
    """Its own AddPartitionsToTxn hears PRODUCER_FENCED: fatal at once."""
    old = transactional(make_producer, fake_cluster, explicit_add=True)
    transactional(make_producer, fake_cluster)  # same id: fences `old`
    old.begin_transaction()
    future = old.send("orders", value=b"zombie", partition=0)
    with pytest.raises(e.ProducerFencedError, match="fenced by a newer producer.*create a new Producer"):
        old.commit_transaction()
    with pytest.raises(e.ProducerFencedError):
        future.get(timeout=5)
    assert_fenced_for_good(old, fake_cluster)


def test_a_fenced_producer_with_the_implicit_add_learns_it_from_its_abort(fake_cluster, make_producer):
    """Kafka's order under transactions V2: the zombie's send fails with INVALID_PRODUCER_EPOCH (abortable),
    its abort with PRODUCER_FENCED (fatal)."""
    old = transactional(make_producer, fake_cluster)
    transactional(make_producer, fake_cluster)  # same id: fences `old`
    old.begin_transaction()
    future = old.send("orders", value=b"zombie", partition=0)
    with pytest.raises(e.InvalidProducerEpochError):
        future.get(timeout=5)
    with pytest.raises(e.InvalidProducerEpochError, match="abort_transaction"):
        old.commit_transaction()
    with pytest.raises(e.ProducerFencedError):
        old.abort_transaction()
    assert_fenced_for_good(old, fake_cluster)


def assert_fenced_for_good(old: Producer, fake_cluster) -> None:
    assert old.transaction_state is S.FATAL_ERROR
    for call in (old.begin_transaction, old.abort_transaction, old.commit_transaction, old.init_transactions,
                 old.flush, lambda: old.send("orders", value=b"v"), lambda: old.partitions_for("orders")):
        with pytest.raises(e.ProducerFencedError):
            call()
    old.close()
    assert fake_cluster.data("orders", 0) == []


def test_fenced_end_txn_is_fatal(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0).get(timeout=5)
    fake_cluster.script("EndTxn", 47)  # INVALID_PRODUCER_EPOCH from a coordinator means fenced
    with pytest.raises(e.ProducerFencedError, match="'tx-1'"):
        p.commit_transaction()
    assert p.transaction_state is S.FATAL_ERROR


def test_invalid_txn_state_from_coordinator_is_fatal(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0).get(timeout=5)
    fake_cluster.script("EndTxn", 48)
    with pytest.raises(e.InvalidTxnStateError):
        p.commit_transaction()
    with pytest.raises(e.InvalidTxnStateError):
        p.begin_transaction()


def test_node_rejects_a_timeout_above_its_maximum(fake_cluster, make_producer):
    p = make_producer(fake_cluster, transactional_id="tx-1", transaction_timeout_ms=10_000_000)
    with pytest.raises(e.InvalidTransactionTimeoutError):
        p.init_transactions()
    assert p.transaction_state is S.FATAL_ERROR


def test_client_rejects_a_timeout_outside_int32(fake_cluster):
    with pytest.raises(e.InvalidTransactionTimeoutError):
        Producer(bootstrap_servers=fake_cluster.bootstrap, transactional_id="tx-1", transaction_timeout_ms=0)


# ---------------------------------------------------------------- offsets in the transaction


@pytest.mark.parametrize("explicit_add", [False, True], ids=["implicit add", "explicit add"])
def test_send_offsets_with_a_bare_group_id(fake_cluster, make_producer, explicit_add):
    """Transactions V2: the TxnOffsetCommit asks the group coordinator to add the offsets partition (Kafka's
    v5); with the explicit add, AddOffsetsToTxn goes first."""
    p = transactional(make_producer, fake_cluster, explicit_add=explicit_add)
    p.begin_transaction()
    p.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(42)}, "group-1")
    adds = fake_cluster.calls_of("AddOffsetsToTxn")
    (commit,) = fake_cluster.calls_of("TxnOffsetCommit")
    assert [add.group_id for add in adds] == (["group-1"] if explicit_add else [])
    assert commit.add_partitions is not explicit_add
    assert (commit.generation_id, commit.member_id, commit.group_id) == (-1, "", "group-1")
    assert [(o.topic, o.partition, o.offset) for o in commit.offsets] == [("in", 0, 42)]
    p.commit_transaction()
    assert fake_cluster.calls_of("EndTxn")[0].committed  # offsets alone make the transaction non-empty
    assert fake_cluster.committed_offsets["group-1"] == {("in", 0): 42}


def test_send_offsets_with_consumer_group_metadata(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    p.begin_transaction()
    metadata = ConsumerGroupMetadata("group-1", generation_id=3, member_id="m-1", group_instance_id="i-1")
    p.send_offsets_to_transaction({TopicPartition("in", 1): 7}, metadata)
    (commit,) = fake_cluster.calls_of("TxnOffsetCommit")
    assert (commit.generation_id, commit.member_id, commit.group_instance_id) == (3, "m-1", "i-1")


def test_stale_generation_on_offset_commit_is_abortable(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    p.begin_transaction()
    fake_cluster.script("TxnOffsetCommit", 22)
    with pytest.raises(e.IllegalGenerationError):
        p.send_offsets_to_transaction({TopicPartition("in", 0): 1}, ConsumerGroupMetadata("g", 1, "m"))
    assert p.transaction_state is S.ABORTABLE_ERROR
    p.abort_transaction()
    assert p.transaction_state is S.READY


def test_offset_commit_follows_a_moved_group_coordinator(fake_cluster2, make_producer):
    cluster = fake_cluster2
    p = transactional(make_producer, cluster)
    p.begin_transaction()
    cluster.group_coordinator = 1
    cluster.script("TxnOffsetCommit", 16)
    p.send_offsets_to_transaction({TopicPartition("in", 0): 5}, "g")
    assert [node for name, node, _ in cluster.calls if name == "TxnOffsetCommit"][-1] == 1


# ---------------------------------------------------------------- misuse and limits, rejected before the wire


def test_misuse_is_rejected_with_both_states(fake_cluster, make_producer):
    p = make_producer(fake_cluster, transactional_id="tx-1")
    with pytest.raises(e.IllegalStateError, match="cannot send: transactional id 'tx-1' is in state UNINITIALIZED"):
        p.send("orders", value=b"v")
    p.init_transactions()
    with pytest.raises(e.IllegalStateError, match="cannot init_transactions: transactional id 'tx-1' is in state "
                                                  "READY"):
        p.init_transactions()
    with pytest.raises(e.IllegalStateError, match="cannot commit_transaction: transactional id 'tx-1' is in state "
                                                  "READY, expected IN_TRANSACTION"):
        p.commit_transaction()
    with pytest.raises(e.IllegalStateError, match="is in state READY, expected IN_TRANSACTION"):
        p.send("orders", value=b"v")
    p.begin_transaction()
    with pytest.raises(e.IllegalStateError, match="IN_TRANSACTION"):
        p.begin_transaction()
    assert fake_cluster.calls_of("Produce") == []


def test_transactional_calls_on_an_idempotent_producer_are_illegal(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    with pytest.raises(e.IllegalStateError, match="no transactional_id"):
        p.begin_transaction()


def test_unknown_topic_raises_from_send(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    with pytest.raises(e.UnknownTopicOrPartitionError):
        p.send("no-such-topic", value=b"v")
    with pytest.raises(e.UnknownTopicOrPartitionError):
        p.send("orders", value=b"v", partition=3)
    assert p.partitions_for("orders") == {0, 1, 2}


def test_record_larger_than_max_request_size_raises_from_send(fake_cluster, make_producer):
    p = make_producer(fake_cluster, max_request_size=1000)
    with pytest.raises(e.RecordTooLargeError, match="max_request_size"):
        p.send("orders", value=b"x" * 2000)


def test_values_must_be_bytes_unless_a_serializer_is_set(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    with pytest.raises(TypeError):
        p.send("orders", value="text")
    q = make_producer(fake_cluster, value_serializer=str.encode, key_serializer=str.encode)
    assert q.send("orders", value="text", key="order-1").get(timeout=5).partition == 1


def test_future_get_times_out(fake_cluster, make_producer):
    p = make_producer(fake_cluster, **LONG_LINGER)
    with pytest.raises(e.KafkaTimeoutError):
        p.send("orders", value=b"v").get(timeout=0.01)


def test_headers_and_timestamps_reach_the_batch(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    meta = p.send("orders", value=b"v", key=b"k", partition=0, headers=[("h", b"1")], timestamp_ms=1234).get(5)
    assert meta.timestamp == 1234
    (produce,) = fake_cluster.calls_of("Produce")
    (batch,) = iter_batches(produce.partitions[0].records)
    (record,) = batch.records()
    assert (record.key, record.value, record.headers, record.timestamp) == (b"k", b"v", (("h", b"1"),), 1234)


# ---------------------------------------------------------------- ordering, in-flight limits, epoch bumps


def test_one_batch_in_flight_per_partition_but_other_partitions_proceed(fake_cluster, make_producer):
    p = make_producer(fake_cluster, linger_ms=0)
    release = fake_cluster.hold_next("Produce")
    first = p.send("orders", value=b"a", partition=0)
    fake_cluster.wait_for(lambda: len(fake_cluster.held) == 1)
    second = p.send("orders", value=b"b", partition=0)   # must wait behind `first`
    other = p.send("orders", value=b"c", partition=1)    # another partition: not blocked
    assert other.get(timeout=5).offset == 0
    produced = [part.partition for request in fake_cluster.calls_of("Produce") for part in request.partitions]
    assert 0 not in produced and not second.is_done
    release.set()
    assert (first.get(timeout=5).offset, second.get(timeout=5).offset) == (0, 1)
    sequences = [entry.base_sequence for entry in fake_cluster.data("orders", 0)]
    assert sequences == [0, 1]


def test_no_produce_before_the_partition_is_registered(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster, explicit_add=True)
    fake_cluster.script("AddPartitionsToTxn", 51, 15)  # still completing, then coordinator gone
    p.begin_transaction()
    assert p.send("orders", value=b"v", partition=0).get(timeout=5).offset == 0
    methods = [m for m in fake_cluster.methods() if m in ("AddPartitionsToTxn", "Produce")]
    assert methods == ["AddPartitionsToTxn"] * 3 + ["Produce"]
    p.commit_transaction()


def test_a_leaders_add_that_cannot_complete_is_retried_with_the_same_batch(fake_cluster, make_producer):
    """The implicit add: the leader answers NOT_ENOUGH_REPLICAS while the coordinator cannot add (still
    completing, then gone); the producer resends the batch, written once."""
    p = transactional(make_producer, fake_cluster)
    fake_cluster.script("AddPartitionsToTxn", 51, 15)
    p.begin_transaction()
    assert p.send("orders", value=b"v", partition=0).get(timeout=5).offset == 0
    methods = [m for m in fake_cluster.methods() if m in ("AddPartitionsToTxn", "Produce")]
    assert methods == ["Produce", "AddPartitionsToTxn"] * 3
    p.commit_transaction()
    assert [e.count for e in fake_cluster.data("orders", 0)] == [1]


def test_idempotent_out_of_order_fails_the_batch_and_starts_a_new_epoch(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    p.send("orders", value=b"a", partition=0).get(timeout=5)
    fake_cluster.script("Produce", 45)
    with pytest.raises(e.OutOfOrderSequenceError):
        p.send("orders", value=b"b", partition=0).get(timeout=5)
    p.send("orders", value=b"c", partition=0).get(timeout=5)
    assert len(fake_cluster.calls_of("InitProducerId")) == 2
    first, last = fake_cluster.data("orders", 0)
    assert last.producer_id != first.producer_id and last.base_sequence == 0


def test_abort_bumps_the_epoch_itself_when_end_txn_returns_none(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    pid, epoch = p.producer_id_and_epoch
    p.begin_transaction()
    fake_cluster.script("Produce", 45)  # the batch held sequences the node may or may not have
    with pytest.raises(e.OutOfOrderSequenceError):
        p.send("orders", value=b"v", partition=0).get(timeout=5)

    def tv1_end_txn(request, node_id):
        fake_cluster._EndTxn(node_id, request)
        return pb.EndTxnResponse()  # no new pid/epoch, as a Transactions V1 coordinator answers

    fake_cluster.script("EndTxn", tv1_end_txn)
    p.abort_transaction()
    (_, bump) = fake_cluster.calls_of("InitProducerId")
    assert (bump.producer_id, bump.producer_epoch) == (pid, epoch)  # KIP-360: current pid/epoch
    assert p.transaction_state is S.READY and p.producer_id_and_epoch[1] > epoch


def test_close_aborts_an_open_transaction(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0).get(timeout=5)
    p.close()
    (end,) = fake_cluster.calls_of("EndTxn")
    assert not end.committed
    assert fake_cluster.txns["tx-1"].state == "CompleteAbort"


def test_close_with_zero_timeout_leaves_the_transaction_open(fake_cluster, make_producer):
    p = transactional(make_producer, fake_cluster)
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0).get(timeout=5)
    p.close(timeout=0)
    assert fake_cluster.calls_of("EndTxn") == []


def test_close_from_a_callback_does_not_deadlock(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    p.send("orders", value=b"v", partition=0).add_callback(lambda _meta: p.close()).get(timeout=5)
    with pytest.raises(e.IllegalStateError, match="closed"):
        p.send("orders", value=b"v")
