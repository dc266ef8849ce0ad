"""Kafka's exact answers where users found txnsim differing, on real node processes: the error has
Kafka's name, nothing stored changes, and the rest of the node carries on."""
from __future__ import annotations

import struct

import crc32c
import pytest

from client.cluster import ClusterClient
from client.transport import call
from proto import records
from proto import txnsim_pb2 as pb
from tests.helpers import read_all, wait_until
from txnsim import Admin, LocalCluster, Producer, TopicPartition, errors


def log_bytes(cluster, topic, partition=0) -> bytes:
    directory = cluster.data_dir / "logs" / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def committed_values(bs, topic):
    return sorted(r.value for r in read_all(bs, topic, partitions=3, isolation_level="read_committed"))


def test_a_fenced_zombies_send_is_invalid_producer_epoch_and_its_abort_producer_fenced(cluster, admin, topic, txn_id):
    bs = cluster.bootstrap_servers
    tp = TopicPartition(topic, 0)
    zombie = Producer(bootstrap_servers=bs, transactional_id=txn_id)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, value=b"zombie", partition=0).get(timeout=10)
        with Producer(bootstrap_servers=bs, transactional_id=txn_id) as fresh:
            fresh.init_transactions()  # fences the zombie and aborts its transaction (marker on partition 0)
            wait_until(lambda: admin.last_stable_offsets([tp])[tp] == admin.end_offsets([tp])[tp] == 2,
                       what="the abort marker of the zombie's transaction")
            before = log_bytes(cluster, topic)
            with pytest.raises(errors.InvalidProducerEpochError, match="INVALID_PRODUCER_EPOCH"):
                zombie.send(topic, value=b"zombie-2", partition=0).get(timeout=10)
            assert log_bytes(cluster, topic) == before
            with pytest.raises(errors.ProducerFencedError):
                zombie.abort_transaction()
            fresh.begin_transaction()
            fresh.send(topic, value=b"fresh", partition=0)
            fresh.commit_transaction()
    finally:
        zombie.close()
    assert committed_values(bs, topic) == [b"fresh"]


def test_a_stale_epoch_is_refused_before_the_coordinator_is_asked(cluster, admin, topic, txn_id):
    """A produce whose epoch is below the partition's stored one for that producer id is INVALID_PRODUCER_EPOCH
    even without a transactional id to verify against (Kafka checks the epoch first)."""
    bs = cluster.bootstrap_servers
    with Producer(bootstrap_servers=bs, transactional_id=txn_id) as p:
        p.init_transactions()
        for _ in range(3):  # each end bumps the epoch; the markers store it on partition 0
            p.begin_transaction()
            p.send(topic, value=b"v", partition=0).get(timeout=10)
            p.commit_transaction()
        pid, epoch = p.producer_id_and_epoch
    tp = TopicPartition(topic, 0)
    wait_until(lambda: admin.last_stable_offsets([tp])[tp] == admin.end_offsets([tp])[tp] == 6,
               what="the last commit marker")
    client = ClusterClient(bs)
    try:
        stale = records.encode_batch([(1, None, b"stale", ())], producer_id=pid, producer_epoch=0,
                                     base_sequence=0, transactional=True)
        request = pb.ProduceRequest(acks=-1, timeout_ms=5000, partitions=[
            pb.PartitionRecords(topic=topic, partition=0, records=stale)])  # no transactional_id at all
        before = log_bytes(cluster, topic)
        result = call(client.stubs(client.leader_address(TopicPartition(topic, 0))).partitions.Produce,
                      request, 10.0).partitions[0]
        assert epoch >= 2 and errors.name_of(result.error_code) == "INVALID_PRODUCER_EPOCH", result
        assert log_bytes(cluster, topic) == before
    finally:
        client.close()


def test_abort_succeeds_after_the_transactional_id_expired(tmp_path, txn_id):
    with LocalCluster(nodes=1, data_dir=tmp_path, txn_shards=2, offsets_shards=1,
                      transactional_id_expiration_ms=300,
                      transaction_remove_expired_transaction_cleanup_interval_ms=100) as cluster:
        bs = cluster.bootstrap_servers
        with Admin(bs) as admin:
            admin.create_topic("expiry", partitions=1)
            with Producer(bootstrap_servers=bs, transactional_id=txn_id) as p:
                p.init_transactions()
                wait_until(lambda: txn_id not in {t.transactional_id for t in admin.list_transactions()},
                           what="the transactional id to expire")
                p.begin_transaction()
                with pytest.raises(errors.InvalidProducerIdMappingError):
                    p.send("expiry", value=b"lost", partition=0).get(timeout=10)
                p.abort_transaction()  # no EndTxn: InitProducerId gives the id a new producer id
                p.begin_transaction()
                p.send("expiry", value=b"kept", partition=0)
                p.commit_transaction()
        assert [r.value for r in read_all(bs, "expiry", partitions=1, isolation_level="read_committed")] == [b"kept"]


def test_a_crc_valid_batch_whose_records_cannot_be_decoded_is_corrupt_message(cluster, topic):
    """Before, the node stored it and every consumer stopped at it for good."""
    bs = cluster.bootstrap_servers
    client = ClusterClient(bs)
    try:
        stubs = client.stubs(client.leader_address(TopicPartition(topic, 0)))

        def produce(data: bytes) -> pb.PartitionProduceResult:
            request = pb.ProduceRequest(acks=-1, timeout_ms=5000, partitions=[
                pb.PartitionRecords(topic=topic, partition=0, records=data)])
            return call(stubs.partitions.Produce, request, 10.0).partitions[0]

        assert produce(records.encode_batch([(1, None, b"before", ())])).error_code == 0
        before = log_bytes(cluster, topic)
        damaged = bytearray(records.encode_batch([(1, None, b"abc", ())]))
        damaged[records.HEADER_SIZE + 5] = 4  # the value's length says 2 bytes, the record holds 3
        struct.pack_into(">I", damaged, 17, crc32c.crc32c(bytes(damaged[21:])))
        result = produce(bytes(damaged))
        assert errors.name_of(result.error_code) == "CORRUPT_MESSAGE" and "record 0" in result.error_message
        assert log_bytes(cluster, topic) == before
        assert produce(records.encode_batch([(1, None, b"after", ())])).error_code == 0
    finally:
        client.close()
    values = [r.value for r in read_all(bs, topic, partitions=3, isolation_level="read_uncommitted")]
    assert values == [b"before", b"after"]


def test_a_batch_over_message_max_bytes_is_split_and_every_record_lands_in_order(tmp_path):
    """Before, the whole batch failed with MESSAGE_TOO_LARGE though each record fitted the node's limit."""
    with LocalCluster(nodes=1, data_dir=tmp_path, txn_shards=2, offsets_shards=1, message_max_bytes=2_000) as cluster:
        bs = cluster.bootstrap_servers
        with Admin(bs) as admin:
            admin.create_topic("small", partitions=1)
        values = [b"%03d" % i + b"x" * 97 for i in range(60)]  # each producer's 30 fill one 3.4 KB batch
        with Producer(bootstrap_servers=bs, linger_ms=60_000) as idempotent:
            futures = [idempotent.send("small", value=v, partition=0) for v in values[:30]]
            idempotent.flush(timeout=10)
            assert [f.get(timeout=10).offset for f in futures] == list(range(30))
        with Producer(bootstrap_servers=bs, transactional_id="split-tx", linger_ms=60_000) as transactional:
            transactional.init_transactions()
            transactional.begin_transaction()
            for v in values[30:]:
                transactional.send("small", value=v, partition=0)
            transactional.commit_transaction()
        read = [r.value for r in read_all(bs, "small", partitions=1, isolation_level="read_committed")]
        assert read == values
        stored = list(records.iter_batches(log_bytes(cluster, "small")))
        data = [batch for batch in stored if not batch.header.is_control]
        assert all(batch.header.size <= 2_000 for batch in data) and len(data) >= 4
