"""Idempotent retries, consumer groups, and the hanging-transaction tools."""
from __future__ import annotations

from client.cluster import ClusterClient
from client.transport import call
from proto import records
from proto import txnsim_pb2 as pb
from tests.helpers import wait_until
from txnsim import Consumer, Producer, TopicPartition


def test_a_retried_batch_is_acknowledged_once_with_its_original_offsets(cluster, topic):
    client = ClusterClient(cluster.bootstrap_servers)
    try:
        tp = TopicPartition(topic, 0)
        stubs = client.stubs(client.leader_address(tp))
        init = call(stubs.transactions.InitProducerId, pb.InitProducerIdRequest(), 5.0)
        batch = records.encode_batch([(1, None, b"once", ()), (1, None, b"twice?", ())],
                                     producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                     base_sequence=0)
        request = pb.ProduceRequest(acks=-1, partitions=[pb.PartitionRecords(topic=topic, partition=0,
                                                                              records=batch)])
        first = call(stubs.partitions.Produce, request, 5.0).partitions[0]
        retry = call(stubs.partitions.Produce, request, 5.0).partitions[0]
        assert first.error_code == 0 and retry.error_code == 0
        assert retry.base_offset == first.base_offset
        skipped = records.encode_batch([(1, None, b"gap", ())], producer_id=init.producer_id,
                                       producer_epoch=init.producer_epoch, base_sequence=5)
        gap = call(stubs.partitions.Produce, pb.ProduceRequest(acks=-1, partitions=[
            pb.PartitionRecords(topic=topic, partition=0, records=skipped)]), 5.0).partitions[0]
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        offsets = call(stubs.partitions.ListOffsets, pb.ListOffsetsRequest(partitions=[
            pb.TopicPartitionRef(topic=topic, partition=0)]), 5.0).partitions[0]
        assert offsets.high_watermark == 2
    finally:
        client.close()


def test_an_idempotent_producer_writes_every_record_once_in_order(cluster, topic):
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=2) as p:
        futures = [p.send(topic, key=b"same-key", value=str(i).encode()) for i in range(500)]
        p.flush()
    offsets = [f.get(timeout=10).offset for f in futures]
    assert offsets == sorted(offsets) and len(set(offsets)) == 500
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                  enable_auto_commit=False) as c:
        partition = futures[0].get(timeout=1).partition
        c.assign([TopicPartition(topic, partition)])
        values = []
        wait_until(lambda: values.extend(r.value for rs in c.poll(timeout_ms=200).values() for r in rs)
                   or len(values) >= 500, what="500 records")
    assert values == [str(i).encode() for i in range(500)]


def test_two_subscribed_consumers_split_the_partitions(cluster, topic):
    bs = cluster.bootstrap_servers
    group = f"group-{topic}"
    settings = dict(bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                    session_timeout_ms=3000, heartbeat_interval_ms=200)
    with Producer(bootstrap_servers=bs) as p:
        for i in range(3):
            p.send(topic, value=f"p{i}".encode(), partition=i)
        p.flush()
    with Consumer(**settings) as a, Consumer(**settings) as b:
        a.subscribe([topic])
        b.subscribe([topic])
        seen: dict[str, set] = {"a": set(), "b": set()}

        def balanced() -> bool:
            for name, c in (("a", a), ("b", b)):
                for records_ in c.poll(timeout_ms=100).values():
                    seen[name].update(r.value for r in records_)
            assigned_a, assigned_b = a.assignment(), b.assignment()
            return (assigned_a and assigned_b and not (assigned_a & assigned_b)
                    and len(assigned_a | assigned_b) == 3 and len(seen["a"] | seen["b"]) == 3)

        wait_until(balanced, timeout_s=20, what="both consumers assigned, all records read")
        assert seen["a"] and seen["b"]
