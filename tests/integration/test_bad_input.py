"""Bad input gets Kafka's error name, the node keeps serving, and no stored byte changes."""
from __future__ import annotations

import pytest

from client.cluster import ClusterClient
from client.transport import call
from proto import records
from proto import txnsim_pb2 as pb
from txnsim import Consumer, Producer, TopicPartition, errors


@pytest.fixture(scope="module")
def client(cluster):
    c = ClusterClient(cluster.bootstrap_servers)
    yield c
    c.close()


def leader_stubs(client, topic, partition=0):
    return client.stubs(client.leader_address(TopicPartition(topic, partition)))


def log_bytes(cluster, topic, partition=0) -> bytes:
    directory = cluster.data_dir / "logs" / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def produce_raw(client, topic, data: bytes, transactional_id=None, partition=0):
    request = pb.ProduceRequest(acks=-1, timeout_ms=5000, partitions=[
        pb.PartitionRecords(topic=topic, partition=partition, records=data)])
    if transactional_id is not None:
        request.transactional_id = transactional_id
    response = call(leader_stubs(client, topic, partition).partitions.Produce, request, 10.0)
    return response.partitions[0]


def one_batch(value=b"v", **kwargs) -> bytes:
    return records.encode_batch([(1, None, value, ())], **kwargs)


def test_garbage_bytes_are_rejected_as_corrupt_and_change_nothing(cluster, client, topic):
    assert produce_raw(client, topic, one_batch(b"before")).error_code == 0
    before = log_bytes(cluster, topic)
    result = produce_raw(client, topic, b"\x00garbage where a record batch should be" * 3)
    assert errors.for_code(result.error_code).name == "CORRUPT_MESSAGE"
    flipped = bytearray(one_batch(b"flip me"))
    flipped[-1] ^= 0xFF
    assert errors.for_code(produce_raw(client, topic, bytes(flipped)).error_code).name == "CORRUPT_MESSAGE"
    assert log_bytes(cluster, topic) == before
    assert produce_raw(client, topic, one_batch(b"after")).error_code == 0  # still serving


def test_unknown_topic_and_partition_are_named(cluster, client, topic):
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            p.send("no-such-topic", value=b"x")
    request = pb.ProduceRequest(acks=-1, partitions=[pb.PartitionRecords(topic=topic, partition=99,
                                                                          records=one_batch())])
    response = call(leader_stubs(client, topic).partitions.Produce, request, 5.0)
    assert errors.for_code(response.partitions[0].error_code).name == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize("name", ["", "a" * 250, "bad/name", "..", "__reserved"])
def test_invalid_topic_names_are_refused(admin, name):
    with pytest.raises(errors.KafkaError) as failure:
        admin.create_topic(name, partitions=1)
    assert failure.value.name in ("INVALID_TOPIC_EXCEPTION",)


def test_invalid_partition_count_and_duplicate_topic(admin, topic):
    with pytest.raises(errors.InvalidPartitionsError):
        admin.create_topic(topic + "-zero", partitions=0)
    with pytest.raises(errors.TopicAlreadyExistsError):
        admin.create_topic(topic, partitions=3)


def test_oversize_record_is_refused_before_and_at_the_node(cluster, client, topic):
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        with pytest.raises(errors.RecordTooLargeError):
            p.send(topic, value=b"x" * (2 * 1024 * 1024))
    before = log_bytes(cluster, topic)
    result = produce_raw(client, topic, one_batch(b"y" * (1024 * 1024 + 100)))
    assert errors.for_code(result.error_code).name == "MESSAGE_TOO_LARGE"
    assert log_bytes(cluster, topic) == before


def test_transaction_timeout_is_checked_by_client_and_node(cluster, client):
    with pytest.raises(errors.InvalidTransactionTimeoutError):
        Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="bad-timeout",
                 transaction_timeout_ms=0)
    too_long = 900_001  # above the node's transaction_max_timeout_ms
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="long-timeout",
                 transaction_timeout_ms=too_long)
    try:
        with pytest.raises(errors.InvalidTransactionTimeoutError):
            p.init_transactions()
    finally:
        p.close()


def test_calls_out_of_order_raise_illegal_state_naming_both_states(cluster, topic, txn_id):
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as p:
        with pytest.raises(errors.IllegalStateError):
            p.begin_transaction()  # before init_transactions
        p.init_transactions()
        with pytest.raises(errors.IllegalStateError) as failure:
            p.commit_transaction()
        assert "READY" in str(failure.value) and "IN_TRANSACTION" in str(failure.value)
        with pytest.raises(errors.IllegalStateError):
            p.send(topic, value=b"outside a transaction")


def test_stale_epochs_and_unknown_producer_ids_are_rejected(cluster, client, topic, txn_id):
    coordinator = client.stubs(client.coordinator_address(1, txn_id))
    init = call(coordinator.transactions.InitProducerId,
                pb.InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=10_000,
                                         producer_id=-1, producer_epoch=-1), 10.0)
    tp = pb.TopicPartitionRef(topic=topic, partition=0)
    unknown = call(coordinator.transactions.AddPartitionsToTxn, pb.AddPartitionsToTxnRequest(
        transactional_id=txn_id, producer_id=init.producer_id + 10_000, producer_epoch=init.producer_epoch,
        partitions=[tp]), 10.0, check=False)
    assert errors.name_of(unknown.error_code) == "INVALID_PRODUCER_ID_MAPPING"
    stale = call(coordinator.transactions.AddPartitionsToTxn, pb.AddPartitionsToTxnRequest(
        transactional_id=txn_id, producer_id=init.producer_id, producer_epoch=init.producer_epoch - 1,
        partitions=[tp]), 10.0, check=False)
    assert errors.name_of(stale.error_code) == "PRODUCER_FENCED"
    # a transactional batch for a partition never added to the transaction (KIP-890)
    batch = one_batch(b"sneaky", producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                      base_sequence=0, transactional=True)
    before = log_bytes(cluster, topic)
    result = produce_raw(client, topic, batch, transactional_id=txn_id)
    assert errors.name_of(result.error_code) == "TRANSACTION_ABORTABLE"
    assert log_bytes(cluster, topic) == before


def test_each_partition_of_a_request_is_verified_on_its_own_merits(cluster, admin, client, txn_id):
    """Two partitions of one leader in one request, both opening the transaction there: the request is
    verified with the coordinator in one ask, yet the partition added to the transaction is written and
    the one never added is refused TRANSACTION_ABORTABLE with its log unchanged."""
    name = f"verify-{txn_id}"
    admin.create_topic(name, partitions=12)
    by_leader: dict[str, list[int]] = {}
    for partition in range(12):
        by_leader.setdefault(client.leader_address(TopicPartition(name, partition)), []).append(partition)
    leader, (added, never_added, *_rest) = next((a, ps) for a, ps in sorted(by_leader.items()) if len(ps) >= 2)
    coordinator = client.stubs(client.coordinator_address(1, txn_id))
    init = call(coordinator.transactions.InitProducerId,
                pb.InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=10_000,
                                         producer_id=-1, producer_epoch=-1), 10.0)
    call(coordinator.transactions.AddPartitionsToTxn, pb.AddPartitionsToTxnRequest(
        transactional_id=txn_id, producer_id=init.producer_id, producer_epoch=init.producer_epoch,
        partitions=[pb.TopicPartitionRef(topic=name, partition=added)]), 10.0)
    batch = one_batch(b"in the transaction?", producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                      base_sequence=0, transactional=True)
    before = log_bytes(cluster, name, never_added)
    response = call(client.stubs(leader).partitions.Produce, pb.ProduceRequest(
        acks=-1, timeout_ms=5000, transactional_id=txn_id,
        partitions=[pb.PartitionRecords(topic=name, partition=p, records=batch) for p in (added, never_added)]),
        10.0)
    outcome = {r.partition: errors.name_of(r.error_code) for r in response.partitions}
    assert outcome == {added: "NONE", never_added: "TRANSACTION_ABORTABLE"}
    assert log_bytes(cluster, name, never_added) == before


def test_empty_transactional_id_and_bad_isolation_level(cluster, client):
    response = call(client.stubs(client.known_addresses()[0]).transactions.InitProducerId,
                    pb.InitProducerIdRequest(transactional_id="", transaction_timeout_ms=1000), 5.0, check=False)
    assert errors.name_of(response.error_code) in ("INVALID_REQUEST", "NOT_COORDINATOR")
    with pytest.raises((ValueError, errors.KafkaConfigurationError)):
        Consumer(bootstrap_servers=cluster.bootstrap_servers, isolation_level="read_maybe")
