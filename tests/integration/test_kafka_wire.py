"""Kafka's own wire protocol on real nodes, driven by confluent-kafka (librdkafka) unchanged: idempotent produce,
read_committed and read_uncommitted consumers beside txnsim's own transactions, watermarks, and garbage on the port.
"""
from __future__ import annotations

import contextlib
import random
import socket
import struct
import time

import crc32c
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from proto import records
from proto.compression import Codec
from tests.helpers import leader_of, read_all, wait_until
from txnsim import Producer as TxnsimProducer

pytestmark = pytest.mark.timeout(120)


def kafka_producer(cluster) -> Producer:
    return Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "enable.idempotence": True,
                     "linger.ms": 5, "message.timeout.ms": 20_000})


def kafka_consumer(cluster, isolation_level: str) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": f"wire-{isolation_level}",
                     "isolation.level": isolation_level, "enable.auto.commit": False,
                     "fetch.wait.max.ms": 100, "enable.partition.eof": False})


def produce_all(producer: Producer, records: list[dict]) -> list:
    """Produce `records` (keyword arguments of Producer.produce) and wait for every delivery report."""
    reports: list = []
    for record in records:
        producer.produce(**record, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(20) == 0, "deliveries still pending after 20 s"
    errors = [err for err, _ in reports if err is not None]
    assert not errors, errors
    return [msg for _, msg in reports]


def consume_until(consumer: Consumer, done, timeout_s: float = 20.0) -> list:
    """Poll until `done(messages so far)` holds; fail at the deadline with what arrived."""
    seen: list = []
    deadline = time.monotonic() + timeout_s
    while not done(seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout_s} s the consumer had {[(m.partition(), m.offset()) for m in seen]}")
        message = consumer.poll(0.1)
        if message is None:
            continue
        assert message.error() is None, message.error()
        seen.append(message)
    return seen


def assigned_from_start(consumer: Consumer, topic: str, partitions: int) -> Consumer:
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    return consumer


# ------------------------------------------------------------ produce and consume


def test_idempotent_producer_and_read_committed_consumer_keep_keys_values_and_headers(cluster, topic):
    producer = kafka_producer(cluster)
    sent = [{"topic": topic, "key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 3,
             "headers": [("trace", f"t{i}".encode()), ("n", str(i).encode())]} for i in range(30)]
    delivered = produce_all(producer, sent)
    assert sorted(m.offset() for m in delivered if m.partition() == 0) == list(range(10))

    consumer = assigned_from_start(kafka_consumer(cluster, "read_committed"), topic, 3)
    try:
        got = consume_until(consumer, lambda seen: len(seen) >= 30)
    finally:
        consumer.close()
    assert sorted((m.key(), m.value(), tuple(m.headers())) for m in got) == sorted(
        (r["key"], r["value"], tuple(r["headers"])) for r in sent)
    for partition in range(3):
        assert [m.offset() for m in got if m.partition() == partition] == list(range(10))


def test_confluent_consumers_see_txnsim_transactions_as_kafka_consumers_would(cluster, topic, txn_id):
    committed = assigned_from_start(kafka_consumer(cluster, "read_committed"), topic, 1)
    uncommitted = assigned_from_start(kafka_consumer(cluster, "read_uncommitted"), topic, 1)
    try:
        with TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as txn:
            txn.init_transactions()
            txn.begin_transaction()
            txn.send(topic, value=b"aborted", partition=0).get(timeout=10)
            txn.abort_transaction()
            txn.begin_transaction()
            txn.send(topic, value=b"open-1", partition=0)
            txn.send(topic, value=b"open-2", partition=0)
            txn.flush()
            # read_uncommitted sees the open transaction's records (and the aborted one)
            values = [m.value() for m in consume_until(uncommitted, lambda seen: len(seen) >= 3)]
            assert values == [b"aborted", b"open-1", b"open-2"]
            # read_committed is held at the LSO: it reaches it and gets nothing while the transaction is open
            tp = TopicPartition(topic, 0)
            lso = committed.get_watermark_offsets(tp, timeout=10)[1]
            wait_until(lambda: committed.poll(0.1) is None and committed.position([tp])[0].offset >= lso,
                       timeout_s=10, what="the read_committed consumer to reach the LSO")
            assert committed.position([tp])[0].offset == lso
            window_end = time.monotonic() + 1.0  # a negative observation: ten fetch rounds that return nothing
            while time.monotonic() < window_end:
                held = committed.poll(0.1)
                assert held is None or held.error() is not None, held.value()
            txn.commit_transaction()
        values = [m.value() for m in consume_until(committed, lambda seen: len(seen) >= 2)]
        assert values == [b"open-1", b"open-2"]
        assert committed.poll(0.3) is None  # nothing else: the aborted record and the markers stay hidden
    finally:
        committed.close()
        uncommitted.close()


def test_watermarks_are_the_hw_and_for_read_committed_the_lso(cluster, topic, txn_id):
    produce_all(kafka_producer(cluster), [{"topic": topic, "value": b"plain", "partition": 0}] * 3)
    tp = TopicPartition(topic, 0)
    committed, uncommitted = kafka_consumer(cluster, "read_committed"), kafka_consumer(cluster, "read_uncommitted")
    try:
        with TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as txn:
            txn.init_transactions()
            txn.begin_transaction()
            txn.send(topic, value=b"open", partition=0).get(timeout=10)
            assert uncommitted.get_watermark_offsets(tp, timeout=10) == (0, 4)
            assert committed.get_watermark_offsets(tp, timeout=10) == (0, 3)
            txn.commit_transaction()
        # the commit marker takes offset 4; the LSO reaches the HW once it is written
        wait_until(lambda: committed.get_watermark_offsets(tp, timeout=10) == (0, 5), timeout_s=10,
                   what="the LSO to pass the committed transaction")
        assert uncommitted.get_watermark_offsets(tp, timeout=10) == (0, 5)
    finally:
        committed.close()
        uncommitted.close()


def test_a_missing_topic_is_unknown_and_never_auto_created(cluster, admin):
    producer = kafka_producer(cluster)
    metadata = producer.list_topics("no-such-topic", timeout=10)
    assert metadata.topics["no-such-topic"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "no-such-topic" not in admin.list_topics()


# ------------------------------------------------------------ raw sockets


def kafka_address(cluster, node_id: int = 0) -> tuple[str, int]:
    host, port = cluster.spec.kafka_nodes[node_id].rsplit(":", 1)
    return host, int(port)


def send_request(sock: socket.socket, request, correlation_id: int) -> None:
    request.with_header(correlation_id=correlation_id, client_id="raw")
    sock.sendall(bytes(request.encode(header=True, framed=True)))


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the node closed the connection"
            data += chunk
        return data
    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def closed_by_node(sock: socket.socket) -> bool:
    """True once the node closed the connection (recv returns b"" or the connection was reset)."""
    sock.settimeout(10)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return True


def api_versions_round_trip(sock: socket.socket, correlation_id: int) -> ApiVersionsResponse:
    send_request(sock, ApiVersionsRequest(version=3, client_software_name="raw", client_software_version="1"),
                 correlation_id)
    response = ApiVersionsResponse.decode(read_frame(sock), version=3, header=True)
    assert response.header.correlation_id == correlation_id and response.error_code == 0
    return response


def test_pipelined_requests_are_answered_in_order_echoing_correlation_ids(cluster):
    with socket.create_connection(kafka_address(cluster), timeout=10) as sock:
        send_request(sock, ApiVersionsRequest(version=3, client_software_name="raw", client_software_version="1"), 1)
        send_request(sock, MetadataRequest(version=9, topics=None), 2)
        send_request(sock, ApiVersionsRequest(version=0), 3)
        first = ApiVersionsResponse.decode(read_frame(sock), version=3, header=True)
        second = MetadataResponse.decode(read_frame(sock), version=9, header=True)
        third = ApiVersionsResponse.decode(read_frame(sock), version=0, header=True)
    assert [r.header.correlation_id for r in (first, second, third)] == [1, 2, 3]
    assert sorted(b.node_id for b in second.brokers) == cluster.node_ids


def test_an_api_versions_request_from_the_future_is_answered_unsupported_version(cluster):
    with socket.create_connection(kafka_address(cluster), timeout=10) as sock:
        frame = struct.pack(">hhih", 18, 99, 5, 3) + b"raw" + b"\x00" + b"\x01\x01\x00"
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        response = ApiVersionsResponse.decode(read_frame(sock), version=0, header=True)
        assert (response.header.correlation_id, response.error_code) == (5, 35)
        api_versions_round_trip(sock, 6)  # the client retries with a version it found: same connection


def test_garbage_on_the_kafka_port_closes_only_its_connection_and_the_node_keeps_serving(cluster, topic):
    address = kafka_address(cluster)
    bystander = socket.create_connection(address, timeout=10)
    api_versions_round_trip(bystander, 1)
    rng = random.Random(11)
    garbage = {  # what to send -> why the node's log says it closed the connection
        rng.randbytes(64): "",                                                  # random bytes
        struct.pack(">ihhih", 13, 999, 0, 1, 3) + b"raw": "unknown API key 999",
        struct.pack(">i", 2**31 - 1) + b"\x00" * 64: "exceeds the node's limit",
        struct.pack(">i", -5): "cannot hold a request header",
        struct.pack(">ihhih", 17, 3, 1, 2, 3) + b"raw" + struct.pack(">i", 2**31 - 1): "malformed MetadataRequest v1",
        struct.pack(">ihhih", 13, 0, 1, 3, 3) + b"raw": "PRODUCE v1 is not served",  # advertised, as Kafka 4 does
        struct.pack(">i", 1000) + b"\x00\x03\x00\x01": "closed after 4 of 1000 bytes",  # a frame cut short
    }
    for data in garbage:
        with socket.create_connection(address, timeout=10) as sock:
            sock.sendall(data)
            with contextlib.suppress(OSError):  # the node may have closed it already, before this end's FIN
                sock.shutdown(socket.SHUT_WR)
            assert closed_by_node(sock)
    node_log = cluster.node_log(0).read_text(errors="replace")
    for reason in filter(None, garbage.values()):
        assert reason in node_log, reason
    with socket.create_connection(address, timeout=10) as sock:  # a frame cut short, the connection held open
        sock.sendall(struct.pack(">i", 1000) + b"\x00\x03\x00\x01")
        api_versions_round_trip(bystander, 2)
    api_versions_round_trip(bystander, 3)
    bystander.close()
    assert all(cluster.is_alive(n) for n in cluster.node_ids)
    # a real client works afterwards, through every node
    produce_all(kafka_producer(cluster), [{"topic": topic, "value": b"after", "partition": p} for p in range(3)])
    consumer = assigned_from_start(kafka_consumer(cluster, "read_committed"), topic, 3)
    try:
        assert len(consume_until(consumer, lambda seen: len(seen) >= 3)) == 3
    finally:
        consumer.close()


# ------------------------------------------------------------ compressed batches


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_from_librdkafka_are_read_back_by_both_kinds_of_consumer(cluster, topic, codec):
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "enable.idempotence": True,
                         "compression.codec": codec, "linger.ms": 20})
    sent = [{"topic": topic, "partition": 0, "key": b"k%d" % i, "value": b"value %d " % i * 20} for i in range(50)]
    produce_all(producer, sent)
    consumer = assigned_from_start(kafka_consumer(cluster, "read_committed"), topic, 1)
    try:
        got = consume_until(consumer, lambda seen: len(seen) >= 50)
    finally:
        consumer.close()
    assert [(m.key(), m.value()) for m in got] == [(r["key"], r["value"]) for r in sent]
    assert [(r.key, r.value) for r in read_all(cluster.bootstrap_servers, topic, partitions=1)] == [
        (r["key"], r["value"]) for r in sent]


def produce_v(sock: socket.socket, topic: str, batch: bytes, version: int, correlation_id: int):
    request = ProduceRequest(version=version, transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    send_request(sock, request, correlation_id)
    response = ProduceResponse.decode(read_frame(sock), version=version, header=True)
    return response.responses[0].partition_responses[0]


def test_bad_compressed_batches_get_kafkas_errors_and_move_nothing(cluster, topic):
    good = records.encode_batch([(1, None, b"fine", ())], codec=Codec.GZIP)
    zstd = records.encode_batch([(1, None, b"zstd", ())], codec=Codec.ZSTD)
    lying = bytearray(good)  # a valid CRC over a records block that is not gzip
    lying[records.HEADER_SIZE:] = b"garbage!" * ((len(good) - records.HEADER_SIZE) // 8 + 1)
    lying = bytes(lying[:len(good)])
    lying = lying[:17] + struct.pack(">I", crc32c.crc32c(lying[21:])) + lying[21:]
    with socket.create_connection(kafka_address(cluster, leader_of_partition(cluster, topic)), timeout=10) as sock:
        assert produce_v(sock, topic, good, 9, 1).error_code == 0
        assert produce_v(sock, topic, lying, 9, 2).error_code == 2          # CORRUPT_MESSAGE
        assert produce_v(sock, topic, zstd, 6, 3).error_code == 76          # UNSUPPORTED_COMPRESSION_TYPE below v7
        assert produce_v(sock, topic, zstd, 7, 4).error_code == 0
    consumer = assigned_from_start(kafka_consumer(cluster, "read_committed"), topic, 1)
    try:
        assert [m.value() for m in consume_until(consumer, lambda seen: len(seen) >= 2)] == [b"fine", b"zstd"]
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 2)
    finally:
        consumer.close()


def leader_of_partition(cluster, topic: str, partition: int = 0) -> int:
    return leader_of(cluster.bootstrap_servers, topic, partition)


# ------------------------------------------------------------ the size of a fetch's answer


def test_a_fetch_naming_a_partition_many_times_is_answered_once_and_within_fetch_max_bytes(cluster, admin):
    """The 901-byte fetch that once drew a 432 MB answer: a partition named 30 times is read once, and the whole
    answer stays within the budget, only the first partition with data exceeding it by one batch (KIP-74)."""
    admin.create_topic("big-fetch", partitions=3)
    leader = leader_of_partition(cluster, "big-fetch", 0)
    value = b"x" * 900_000
    with socket.create_connection(kafka_address(cluster, leader), timeout=30) as sock:
        for i in range(4):
            batch = records.encode_batch([(1, None, value, ())])
            assert produce_v(sock, "big-fetch", batch, 9, 10 + i).error_code == 0
        P = FetchRequest.FetchTopic.FetchPartition
        same = [P(partition=0, fetch_offset=0, partition_max_bytes=2**31 - 1, log_start_offset=-1,
                  current_leader_epoch=-1) for _ in range(30)]
        request = FetchRequest(version=11, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=2**31 - 1,
                               isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                               topics=[FetchRequest.FetchTopic(topic="big-fetch", partitions=same)])
        send_request(sock, request, 50)
        response = FetchResponse.decode(read_frame(sock), version=11, header=True)
        (topic,) = response.responses
        (part,) = topic.partitions
        assert len(records.iter_batches(part.records).__next__().raw) > 900_000
        assert len(part.records) < 4 * 1_000_000  # the partition's 3.6 MB, once
        # a budget of 1 MB over partition 0 then 0 again: the first batch, whole, and nothing more
        request.max_bytes = 1_000_000
        send_request(sock, request, 51)
        response = FetchResponse.decode(read_frame(sock), version=11, header=True)
        assert len(response.responses[0].partitions[0].records) < 2 * 900_000


# ------------------------------------------------------------ txnsim cluster start


def test_cluster_start_refuses_a_taken_kafka_port_in_one_line(tmp_path):
    from tests.integration.test_cli import txnsim

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = txnsim("cluster", "start", "--nodes", "1", "--data-dir", str(tmp_path / "data"),
                        "--kafka-port", str(port), timeout_s=30)
    assert result.returncode == 1, result
    assert len(result.error_lines) == 1 and f"Kafka port {port}" in result.error_lines[0], result


def test_cluster_start_prints_kafka_bootstrap_servers_that_confluent_kafka_uses(tmp_path):
    import signal
    import subprocess

    from tests.integration.test_cli import ENV, TXNSIM
    from txnsim.cluster import free_port

    port, output = free_port(), tmp_path / "start.out"
    with open(output, "wb") as out:
        process = subprocess.Popen([*TXNSIM, "cluster", "start", "--nodes", "1", "--data-dir", str(tmp_path / "data"),
                                    "--kafka-port", str(port)], stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, env=ENV)
    try:
        line = wait_until(lambda: next((l for l in output.read_text().splitlines()
                                        if l.startswith("Kafka bootstrap servers:")), None),
                          timeout_s=60, what="`txnsim cluster start` to print the Kafka bootstrap servers")
        assert line.split()[3] == f"127.0.0.1:{port}", line
        metadata = Producer({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
        assert sorted(metadata.brokers) == [0]
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0, output.read_text()


def test_a_committed_offset_keeps_the_leader_epoch_it_was_committed_with(cluster, topic):
    """librdkafka commits the leader epoch of the record it consumed and compares it when it reads the commit
    back (its consume-transform-produce test failed on 'committed offsets don't match' while it was dropped)."""
    produce_all(kafka_producer(cluster), [{"topic": topic, "value": b"epoch", "partition": 0}])
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": f"epochs-{topic}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        (message,) = consume_until(consumer, lambda seen: len(seen) >= 1)
        epoch = message.leader_epoch()
        assert epoch is not None and epoch >= 0  # the log stamps its leader epoch on every batch
        consumer.commit(message=message, asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert (committed.offset, committed.leader_epoch) == (message.offset() + 1, epoch)
    finally:
        consumer.close()


def test_metadata_answers_the_leader_epoch_the_batches_carry(cluster, topic):
    produce_all(kafka_producer(cluster), [{"topic": topic, "value": b"stamped", "partition": 1}])
    with socket.create_connection(kafka_address(cluster), timeout=10) as sock:
        send_request(sock, MetadataRequest(version=9, topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                           allow_auto_topic_creation=False, include_topic_authorized_operations=False),
                     7)
        metadata = MetadataResponse.decode(read_frame(sock), version=9, header=True)
    partition = next(p for p in metadata.topics[0].partitions if p.partition_index == 1)
    consumer = assigned_from_start(kafka_consumer(cluster, "read_uncommitted"), topic, 3)
    try:
        (message,) = consume_until(consumer, lambda seen: len(seen) >= 1)
    finally:
        consumer.close()
    assert partition.leader_epoch >= 0 and message.leader_epoch() == partition.leader_epoch


def test_a_null_array_where_the_version_allows_none_is_the_clients_error_not_a_node_bug(cluster):
    """A request whose non-nullable array is null (-1) closes its connection as malformed, logged in one line
    as the client's mistake, never as a handler's traceback."""
    request = ProduceRequest(version=7, transactional_id=None, acks=1, timeout_ms=1000, topic_data=[])
    request.with_header(correlation_id=9, client_id="raw")
    frame = bytearray(request.encode(header=True, framed=True))
    assert frame[-4:] == b"\x00\x00\x00\x00"  # topic_data, the last field: an empty array
    frame[-4:] = b"\xff\xff\xff\xff"            # null, which Produce v7 does not allow
    with socket.create_connection(kafka_address(cluster), timeout=10) as sock:
        sock.sendall(bytes(frame))
        assert closed_by_node(sock)
    logged = wait_until(lambda: "TopicData is null" in (text := cluster.node_log(0).read_text(errors="replace"))
                        and text, what="the malformed request logged")
    line = next(line for line in logged.splitlines() if "TopicData is null" in line)
    assert "malformed request: ProduceRequest v7" in line
    assert "failed on the node" not in logged and "Traceback" not in logged
