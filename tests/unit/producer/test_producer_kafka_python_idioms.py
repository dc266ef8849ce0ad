"""kafka-python code runs against txnsim's Producer: its argument order, serializers and argument checks."""
from __future__ import annotations

import json

import kafka.serializer
import kafka.structs
import pytest

from producer.transaction_manager import TransactionState
from proto import errors as e
from proto.records import iter_batches
from proto.structs import OffsetAndMetadata, TopicPartition


def test_send_takes_kafka_pythons_positional_order(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    # kafka-python: send(topic, value, key, headers, partition, timestamp_ms)
    meta = p.send("orders", b"v", b"k", [("h", b"1")], 2, 1234).get(timeout=5)
    assert (meta.partition, meta.timestamp) == (2, 1234)
    (produce,) = fake_cluster.calls_of("Produce")
    (batch,) = iter_batches(produce.partitions[0].records)
    (record,) = batch.records()
    assert (record.key, record.value, record.headers) == (b"k", b"v", (("h", b"1"),))


def test_bytearray_and_memoryview_keys_values_and_headers_are_sent_as_their_bytes(fake_cluster, make_producer):
    # kafka-python takes any bytes-like object; the compiled record encoding takes bytes, so send() converts
    p = make_producer(fake_cluster)
    p.send("orders", memoryview(b"value"), bytearray(b"key"), [("h", bytearray(b"1"))], 0).get(timeout=5)
    (produce,) = fake_cluster.calls_of("Produce")
    (batch,) = iter_batches(produce.partitions[0].records)
    (record,) = batch.records()
    assert (record.key, record.value, record.headers) == (b"key", b"value", (("h", b"1"),))


def test_api_md_keywords_still_work(fake_cluster, make_producer):
    p = make_producer(fake_cluster)
    meta = p.send("orders", value=b"v", key=b"k", partition=1, headers=None).get(timeout=5)
    assert meta.partition == 1


def test_callables_and_kafka_python_serializer_objects_are_applied_in_send(fake_cluster, make_producer):
    class JsonSerializer(kafka.serializer.Serializer):
        def serialize(self, topic, headers, value):
            return json.dumps({"topic": topic, "value": value}).encode()

    p = make_producer(fake_cluster, value_serializer=JsonSerializer(), key_serializer=lambda k: k.encode())
    p.send("orders", {"n": 1}, "key-1", partition=0).get(timeout=5)
    (produce,) = fake_cluster.calls_of("Produce")
    (batch,) = iter_batches(produce.partitions[0].records)
    (record,) = batch.records()
    assert record.key == b"key-1"
    assert json.loads(record.value) == {"topic": "orders", "value": {"n": 1}}


@pytest.mark.parametrize("partition", ["0", 1.0, True, [0]])
def test_a_partition_of_the_wrong_type_is_a_type_error_at_send(fake_cluster, make_producer, partition):
    p = make_producer(fake_cluster)
    with pytest.raises(TypeError, match="partition must be an int"):
        p.send("orders", value=b"v", partition=partition)
    # nothing reached the I/O thread: the next record to the same node is not held up
    assert p.send("orders", value=b"ok", partition=0).get(timeout=5).offset == 0


@pytest.mark.parametrize("partition", [-1, 2**31])
def test_a_negative_or_huge_partition_is_a_value_error_at_send(fake_cluster, make_producer, partition):
    p = make_producer(fake_cluster)
    with pytest.raises(ValueError, match="partition must be between") as failure:
        p.send("orders", value=b"v", partition=partition)
    assert isinstance(failure.value, e.IllegalArgumentError) and isinstance(failure.value, e.KafkaError)
    assert p.send("orders", value=b"ok", partition=0).get(timeout=5).offset == 0


@pytest.mark.parametrize("timestamp", ["now", 1.5, 12.0])
def test_a_timestamp_of_the_wrong_type_is_a_type_error_at_send(fake_cluster, make_producer, timestamp):
    p = make_producer(fake_cluster)
    with pytest.raises(TypeError, match="timestamp_ms must be an int"):
        p.send("orders", value=b"v", partition=0, timestamp_ms=timestamp)
    assert p.send("orders", value=b"ok", partition=0).get(timeout=5).offset == 0


@pytest.mark.parametrize("timestamp", [-1, 2**63])
def test_a_timestamp_out_of_int64_range_is_a_value_error_at_send(fake_cluster, make_producer, timestamp):
    p = make_producer(fake_cluster)
    with pytest.raises(e.IllegalArgumentError, match="timestamp_ms must be between"):
        p.send("orders", value=b"v", partition=0, timestamp_ms=timestamp)
    assert p.send("orders", value=b"ok", partition=0, timestamp_ms=2**63 - 1).get(timeout=5).offset == 0


@pytest.mark.parametrize("offset", [-5, -1, OffsetAndMetadata(-5), kafka.structs.OffsetAndMetadata(-2, "", -1)])
def test_a_negative_offset_is_refused_before_anything_is_sent(fake_cluster, make_producer, offset):
    p = make_producer(fake_cluster, transactional_id="tx-1")
    p.init_transactions()
    p.begin_transaction()
    p.send("orders", value=b"v", partition=0)
    with pytest.raises(e.IllegalArgumentError, match="in-0"):
        p.send_offsets_to_transaction({TopicPartition("in", 0): offset}, "group-1")
    assert fake_cluster.calls_of("AddOffsetsToTxn") == [] and fake_cluster.calls_of("TxnOffsetCommit") == []
    assert p.transaction_state is TransactionState.IN_TRANSACTION
    p.abort_transaction()  # the transaction is intact and ends at once
    assert p.transaction_state is TransactionState.READY


def test_kafka_python_structs_are_accepted_by_send_offsets(fake_cluster, make_producer):
    p = make_producer(fake_cluster, transactional_id="tx-1")
    p.init_transactions()
    p.begin_transaction()
    p.send_offsets_to_transaction({kafka.structs.TopicPartition("in", 0): kafka.structs.OffsetAndMetadata(42, "m", -1)},
                                  "group-1")
    (commit,) = fake_cluster.calls_of("TxnOffsetCommit")
    assert [(o.topic, o.partition, o.offset, o.metadata) for o in commit.offsets] == [("in", 0, 42, "m")]
