"""A flipped byte in stored data, found where it lies: acknowledged offsets are never handed out again, a
damaged batch is never served as if it were whole, and a reader is told CORRUPT_MESSAGE instead of looping."""
from __future__ import annotations

import shutil

import pytest

from client.cluster import ClusterClient
from client.transport import call
from proto import records
from proto import txnsim_pb2 as pb
from proto.records import HEADER_SIZE
from tests.helpers import leader_of, wait_until
from txnsim import Admin, Consumer, LocalCluster, Producer, TopicPartition, errors

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def cluster(tmp_path):
    with LocalCluster(nodes=2, data_dir=tmp_path / "cluster", txn_shards=4, offsets_shards=2,
                      log_segment_bytes=4096) as c:
        yield c


def fill(cluster: LocalCluster, topic: str, count: int = 300) -> None:
    """`count` records in batches of ten, each acknowledged before the next is sent."""
    Admin(cluster.bootstrap_servers).create_topic(topic, partitions=1)
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for start in range(0, count, 10):
            for i in range(start, start + 10):
                producer.send(topic, value=b"record %04d " % i * 4, partition=0)
            producer.flush()


def segments(cluster: LocalCluster, topic: str) -> list:
    return sorted((cluster.data_dir / "logs" / f"{topic}-0").glob("*.log"))


def flip(path, position: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[position] ^= 0x10
    path.write_bytes(bytes(raw))


def batch_positions(path) -> list[tuple[int, int]]:
    """(byte position, base offset) of every batch of a segment file."""
    raw, found, position = path.read_bytes(), [], 0
    for batch in records.iter_batches(raw):
        found.append((position, batch.header.base_offset))
        position += batch.header.size
    return found


def restart_all(cluster: LocalCluster) -> None:
    for node in cluster.node_ids:
        cluster.kill(node)
    for node in cluster.node_ids:
        cluster.restart(node)


def produce_raw(cluster: LocalCluster, topic: str):
    return produce_raw_to(cluster, topic, leader_of(cluster.bootstrap_servers, topic, 0))


def produce_raw_to(cluster: LocalCluster, topic: str, node: int):
    """One record to partition 0 of `topic` through node `node`, as its raw gRPC answer."""
    client = ClusterClient(cluster.bootstrap_servers)
    try:
        stubs = client.stubs(cluster.spec.nodes[node])
        request = pb.ProduceRequest(acks=-1, timeout_ms=5000, partitions=[pb.PartitionRecords(
            topic=topic, partition=0, records=records.encode_batch([(1, None, b"after", ())]))])
        return call(stubs.partitions.Produce, request, 10.0).partitions[0]
    finally:
        client.close()


def node_logs(cluster: LocalCluster) -> str:
    return "".join(cluster.node_log(n).read_text(errors="replace") for n in cluster.node_ids)


def test_damage_in_the_active_segment_keeps_acknowledged_offsets_from_being_given_out_again(cluster):
    fill(cluster, "active")
    active = segments(cluster, "active")[-1]
    (position, offset), *_ = batch_positions(active)[2:]
    cluster.kill(0), cluster.kill(1)
    flip(active, position + HEADER_SIZE + 5)
    restart_all(cluster)
    answer = produce_raw(cluster, "active")
    assert errors.for_code(answer.error_code).name == "KAFKA_STORAGE_ERROR"
    assert f"{active} is damaged at byte {position}, offset {offset}" in answer.error_message
    assert "below offset 300" in answer.error_message
    assert f"{active} is damaged" in wait_until(lambda: "ERROR" in node_logs(cluster) and node_logs(cluster),
                                                what="the damage logged at error level")
    fill(cluster, "bystander", count=20)  # the rest of the node keeps serving
    # the operator gives the damaged offsets up; only then are they written again
    (active.parent / "accept-loss-from").write_text(f"{offset}\n")
    restart_all(cluster)
    answer = produce_raw(cluster, "active")
    assert (answer.error_code, answer.base_offset) == (0, offset)


def test_a_flipped_byte_in_a_sealed_segment_reaches_the_reader_as_corrupt_message(cluster):
    fill(cluster, "sealed")
    sealed = segments(cluster, "sealed")[1]  # indexed on disk: a restart does not scan it again
    assert sealed.with_suffix(".index").exists()
    batches = batch_positions(sealed)
    (body_at, body_offset), (header_at, header_offset) = batches[1], batches[3]
    cluster.kill(0), cluster.kill(1)
    flip(sealed, body_at + HEADER_SIZE + 7)  # inside the records: the CRC tells
    flip(sealed, header_at + 3)              # inside the base offset, which no CRC covers: the index tells
    restart_all(cluster)
    tp = TopicPartition("sealed", 0)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        seen: list[int] = []

        def poll_until_corrupt() -> errors.CorruptMessageError:
            while True:
                try:
                    for batch in consumer.poll(timeout_ms=1000).values():
                        seen.extend(r.offset for r in batch)
                except errors.CorruptMessageError as error:
                    return error

        error = poll_until_corrupt()
        assert f"offset {body_offset}" in str(error) and seen == list(range(body_offset))
        assert f"offset {body_offset}" in str(poll_until_corrupt())  # again, until the application seeks past
        consumer.seek(tp, body_offset + 10)
        error = poll_until_corrupt()
        assert f"offset {header_offset}" in str(error) and seen[-1] == header_offset - 1
        consumer.seek(tp, header_offset + 10)
        while not seen or seen[-1] < 299:
            for batch in consumer.poll(timeout_ms=1000).values():
                seen.extend(r.offset for r in batch)
    assert len(seen) == len(set(seen)) == 280  # nothing handed out twice, nothing past the log's end
    logged = node_logs(cluster)
    assert f"{sealed} is damaged at byte {body_at}" in logged and f"{sealed} is damaged at byte {header_at}" in logged


def test_a_claims_directory_removed_under_a_running_cluster_loses_nothing(cluster):
    fill(cluster, "claims", count=50)
    tp = TopicPartition("claims", 0)
    leader = leader_of(cluster.bootstrap_servers, "claims", 0)
    epochs = cluster.data_dir / "logs" / "claims-0" / "epochs"
    cluster.pause(leader)
    shutil.rmtree(epochs)  # the claims that fence the paused leader are gone
    survivor = next(n for n in cluster.node_ids if n != leader)
    refused = wait_until(lambda: (answer := produce_raw_to(cluster, "claims", survivor)).error_code not in (
        0, errors.NotLeaderOrFollowerError.errno) and answer, 30, what="the node taking the log over to answer")
    assert errors.for_code(refused.error_code).name == "KAFKA_STORAGE_ERROR", refused
    assert "epochs is missing" in refused.error_message
    assert "epochs is missing" in cluster.node_log(survivor).read_text(errors="replace")
    cluster.resume(leader)
    answer = produce_raw(cluster, "claims")  # whoever answers: nothing is acknowledged without claims
    assert errors.for_code(answer.error_code).name in ("KAFKA_STORAGE_ERROR", "NOT_LEADER_OR_FOLLOWER")
    epochs.mkdir()  # what the error says to do once the old leader is stopped
    restart_all(cluster)
    assert produce_raw(cluster, "claims").error_code == 0
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        seen: list[int] = []
        while len(seen) < 51:
            for batch in consumer.poll(timeout_ms=1000).values():
                seen.extend(r.offset for r in batch)
    assert seen == list(range(51))


def test_a_missing_topics_file_is_refused_loudly_and_no_topic_is_cleared(cluster):
    fill(cluster, "kept", count=20)
    topics_file = cluster.data_dir / "metadata" / "topics.json"
    saved = topics_file.read_bytes()
    topics_file.unlink()
    answer = produce_raw_to(cluster, "kept", 0)
    assert errors.for_code(answer.error_code).name == "KAFKA_STORAGE_ERROR" and "topics.json is missing" in \
        answer.error_message
    with pytest.raises(errors.KafkaStorageError, match="topics.json is missing"):
        Admin(cluster.bootstrap_servers).create_topic("kept", partitions=1)  # would clear the surviving log
    assert "topics.json is missing" in wait_until(lambda: node_logs(cluster), what="node logs")
    assert segments(cluster, "kept")
    topics_file.write_bytes(saved)
    assert produce_raw(cluster, "kept").error_code == 0
    assert produce_raw(cluster, "kept").base_offset == 21
