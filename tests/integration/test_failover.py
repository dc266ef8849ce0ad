"""Crashes with real SIGKILL: another node takes over within a second, and nothing acknowledged is lost."""
from __future__ import annotations

import logging
import threading

import grpc
import pytest

from proto import txnsim_pb2 as pb
from proto.structs import TRANSACTION_STATE_TOPIC
from proto.txnsim_pb2_grpc import PartitionsStub
from tests.helpers import leader_of, read_all, wait_until
from tests.integration.conftest import FAST_SETTINGS
from txnsim import Admin, Consumer, LocalCluster, Producer, TopicPartition, errors


@pytest.fixture
def fresh_cluster(tmp_path):
    """A cluster of its own: these tests kill nodes."""
    with LocalCluster(nodes=3, data_dir=tmp_path / "cluster", **FAST_SETTINGS) as c:
        with Admin(c.bootstrap_servers) as admin:
            admin.create_topic("t", partitions=3)
        yield c


def read_committed(bs, topic="t", partitions=3, with_partitions=False, open_allowed=False):
    records = read_all(bs, topic, partitions=partitions, open_allowed=open_allowed)
    return [(r.partition, r.value) if with_partitions else r.value for r in records]


def test_a_commit_survives_the_coordinator_killed_before_end_txn(fresh_cluster):
    bs = fresh_cluster.bootstrap_servers
    with Producer(bootstrap_servers=bs, transactional_id="tx") as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(20):
            p.send("t", value=f"r{i}".encode())
        p.flush()
        dead = fresh_cluster.coordinator_for("tx")
        fresh_cluster.kill(dead)
        p.commit_transaction()  # retried against the node that took the shard over
        assert fresh_cluster.coordinator_for("tx") != dead
    assert sorted(read_committed(bs)) == sorted(f"r{i}".encode() for i in range(20))


def test_a_prepared_commit_is_finished_by_the_next_owner(fresh_cluster):
    """Kill the coordinator right after EndTxn answered: the markers may not be written yet."""
    bs = fresh_cluster.bootstrap_servers
    with Producer(bootstrap_servers=bs, transactional_id="tx2") as p:
        p.init_transactions()
        for round_ in range(3):
            p.begin_transaction()
            for partition in range(3):
                p.send("t", value=f"{round_}-{partition}".encode(), partition=partition)
            p.commit_transaction()
            fresh_cluster.kill(fresh_cluster.coordinator_for("tx2"))
            with Admin(bs) as admin:
                wait_until(lambda: admin.describe_transaction("tx2").state == "CompleteCommit", timeout_s=10,
                           what="the new owner to complete the commit")
            for node in fresh_cluster.node_ids:
                fresh_cluster.restart(node)
    assert len(read_committed(bs)) == 9


def test_a_zombie_is_fenced_across_a_failover(fresh_cluster):
    bs = fresh_cluster.bootstrap_servers
    zombie = Producer(bootstrap_servers=bs, transactional_id="z")
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("t", value=b"zombie", partition=0).get(timeout=10)
    fresh_cluster.kill(fresh_cluster.coordinator_for("z"))
    with Producer(bootstrap_servers=bs, transactional_id="z") as successor:
        successor.init_transactions()  # on the new owner: fences and aborts the zombie's transaction
        with pytest.raises(errors.KafkaError) as failure:
            zombie.commit_transaction()
        assert failure.value.fatal or failure.value.abortable
        zombie.close(timeout=1)
        successor.begin_transaction()
        successor.send("t", value=b"successor", partition=1)
        successor.commit_transaction()
    assert read_committed(bs) == [b"successor"]


def test_a_read_committed_consumer_waiting_on_a_killed_partition_owner_continues(fresh_cluster):
    bs = fresh_cluster.bootstrap_servers
    tp = TopicPartition("t", 0)
    with Consumer(bootstrap_servers=bs, isolation_level="read_committed", auto_offset_reset="earliest",
                  enable_auto_commit=False) as c, Producer(bootstrap_servers=bs, transactional_id="w") as p:
        c.assign([tp])
        assert c.poll(timeout_ms=200) == {}
        p.init_transactions()
        p.begin_transaction()
        p.send("t", value=b"before", partition=0)
        p.commit_transaction()
        got: list[bytes] = []
        wait_until(lambda: got.extend(r.value for rs in c.poll(timeout_ms=100).values() for r in rs) or got,
                   what="the first record")
        fresh_cluster.kill(leader_of(bs, "t", 0))
        p.begin_transaction()
        p.send("t", value=b"after", partition=0)
        p.commit_transaction()
        wait_until(lambda: got.extend(r.value for rs in c.poll(timeout_ms=100).values() for r in rs)
                   or len(got) >= 2, timeout_s=15, what="the record written after the failover")
        assert got == [b"before", b"after"]


def test_every_acknowledged_commit_survives_all_nodes_killed_at_once(tmp_path):
    data_dir = tmp_path / "cluster"
    acknowledged: list[bytes] = []
    with LocalCluster(nodes=3, data_dir=data_dir, **FAST_SETTINGS) as cluster:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic("t", partitions=3)
        stop = threading.Event()

        def write() -> None:
            with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="w",
                          max_block_ms=3000, delivery_timeout_ms=3000, request_timeout_ms=1000) as p:
                p.init_transactions()
                i = 0
                while not stop.is_set():
                    values = [f"{i}-{k}".encode() for k in range(5)]
                    try:
                        p.begin_transaction()
                        for v in values:
                            p.send("t", value=v)
                        p.commit_transaction()
                    except errors.KafkaError:
                        return
                    acknowledged.extend(values)
                    i += 1

        writer = threading.Thread(target=write)
        writer.start()
        wait_until(lambda: len(acknowledged) >= 50, what="some commits")
        for node in cluster.node_ids:
            cluster.kill(node)
        stop.set()
        writer.join(timeout=30)
        assert not writer.is_alive()
    with LocalCluster(nodes=3, data_dir=data_dir, **FAST_SETTINGS) as cluster:
        # the transaction the kill interrupted stays open until its timeout: read up to it (every acknowledged
        # commit came before it)
        seen_in_partitions = read_committed(cluster.bootstrap_servers, with_partitions=True, open_allowed=True)
    seen = [value for _partition, value in seen_in_partitions]
    assert set(acknowledged) <= set(seen)
    assert len(seen) == len(set(seen))
    for partition in range(3):  # within a partition, offsets follow the order of the transactions
        order = [tuple(map(int, v.split(b"-"))) for p, v in seen_in_partitions if p == partition]
        assert order == sorted(order)


def long_poll(address, topic, partition, fetch_offset, max_wait_ms=28_000):
    """A read_committed Fetch waiting for data at `address`, as a consumer's fetcher sends it: (future, channel)."""
    channel = grpc.insecure_channel(address)
    fetched = PartitionsStub(channel).Fetch.future(pb.FetchRequest(
        isolation_level=1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
        partitions=[pb.FetchPartition(topic=topic, partition=partition, fetch_offset=fetch_offset,
                                      max_bytes=1 << 20)]), timeout=max_wait_ms / 1000 + 10)
    return fetched, channel


@pytest.mark.slow
def test_a_fetch_long_polling_a_partition_that_moves_home_answers_not_leader_at_once(fresh_cluster):
    """The stand-in releases the partition when its home node is back; a fetch waiting there answers
    NOT_LEADER_OR_FOLLOWER then (Kafka completes delayed fetches on a leader change), not when its
    28-second long poll ends with nothing."""
    bs = fresh_cluster.bootstrap_servers
    home = leader_of(bs, "t", 0)
    fresh_cluster.kill(home)
    wait_until(lambda: leader_of(bs, "t", 0) != home, timeout_s=15, what="a stand-in for the partition")
    stand_in = fresh_cluster.spec.nodes[leader_of(bs, "t", 0)]

    def stand_in_serves() -> bool:
        probe, probe_channel = long_poll(stand_in, "t", 0, fetch_offset=0, max_wait_ms=0)
        with probe_channel:
            return probe.result().partitions[0].error_code == 0

    wait_until(stand_in_serves, timeout_s=15, what="the stand-in serving the partition")
    fetched, channel = long_poll(stand_in, "t", 0, fetch_offset=0)
    try:
        assert not fetched.done(), fetched.result()
        fresh_cluster.restart(home)
        wait_until(lambda: leader_of(bs, "t", 0) == home, timeout_s=15, what="the partition back at its home")
        (answer,) = fetched.result(timeout=10).partitions
    finally:
        channel.close()
    assert answer.error_code == errors.NotLeaderOrFollowerError.errno, answer


@pytest.mark.slow
def test_a_node_stops_at_once_while_a_consumer_long_polls_it(fresh_cluster, caplog):
    """A stopping node answers its waiting fetches instead of sitting out their long polls: it exits by
    itself, having released its logs cleanly, rather than being killed after 10 s."""
    bs = fresh_cluster.bootstrap_servers
    polls = [long_poll(fresh_cluster.spec.nodes[leader_of(bs, "t", p)], "t", p, fetch_offset=0) for p in range(3)]
    try:
        with caplog.at_level(logging.WARNING, logger="txnsim"):
            fresh_cluster.stop()
        assert not [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
    finally:
        for _fetched, channel in polls:
            channel.close()


def test_a_restarted_node_takes_its_shards_back(fresh_cluster):
    bs = fresh_cluster.bootstrap_servers
    home = fresh_cluster.coordinator_for("back")
    fresh_cluster.kill(home)
    with Producer(bootstrap_servers=bs, transactional_id="back") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("t", value=b"while-away")
        p.commit_transaction()
        fresh_cluster.restart(home)
        assert fresh_cluster.coordinator_for("back") == home
        p.begin_transaction()
        p.send("t", value=b"back-home")
        p.commit_transaction()
    assert sorted(read_committed(bs)) == [b"back-home", b"while-away"]
    changes = (fresh_cluster.data_dir / "metadata" / "ownership.log").read_text()
    assert f'"node_id": {home}, "action": "acquired", "topic": "{TRANSACTION_STATE_TOPIC}"' in changes


def test_a_torn_tail_is_truncated_and_reported_on_restart(tmp_path):
    data_dir = tmp_path / "cluster"
    with LocalCluster(nodes=1, data_dir=data_dir, **FAST_SETTINGS) as cluster:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic("t", partitions=1)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="torn") as p:
            p.init_transactions()
            p.begin_transaction()
            p.send("t", value=b"kept")
            p.commit_transaction()
        tp = TopicPartition("t", 0)
        with Admin(cluster.bootstrap_servers) as admin:  # the COMMIT marker is written after EndTxn answers
            wait_until(lambda: admin.last_stable_offsets([tp])[tp] == 2, what="the commit marker")
        cluster.kill(0)
        segment = sorted((data_dir / "logs" / "t-0").glob("*.log"))[-1]
        intact = segment.read_bytes()
        with open(segment, "ab") as f:  # half a batch: what a crash mid-write leaves
            f.write(intact[:40])
        cluster.restart(0)
        assert read_committed(cluster.bootstrap_servers, partitions=1) == [b"kept"]
        assert segment.read_bytes() == intact
        wait_until(lambda: "truncat" in cluster.node_log(0).read_text().lower(), what="the node to report the cut")


def test_a_flipped_bit_in_acknowledged_data_is_detected_and_cut_only_once_the_loss_is_given_up(tmp_path):
    data_dir = tmp_path / "cluster"
    tp = TopicPartition("t", 0)
    with LocalCluster(nodes=1, data_dir=data_dir, **FAST_SETTINGS) as cluster:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic("t", partitions=1)
        with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
            first = p.send("t", value=b"first", partition=0).get(timeout=10)
            p.flush()
            second = p.send("t", value=b"second-" + b"x" * 200, partition=0).get(timeout=10)
        cluster.kill(0)
        segment = sorted((data_dir / "logs" / "t-0").glob("*.log"))[-1]
        data = bytearray(segment.read_bytes())
        data[-20] ^= 0x01  # one bit of the second batch's payload: its CRC-32C no longer matches
        segment.write_bytes(bytes(data))
        cluster.restart(0)
        with Admin(cluster.bootstrap_servers) as admin:
            with pytest.raises(errors.KafkaStorageError, match="CRC mismatch"):
                admin.end_offsets([tp])  # acknowledged, so never cut (and its offset never reused) unasked
        wait_until(lambda: "crc" in cluster.node_log(0).read_text().lower(), what="the node to report the damage")
        cluster.kill(0)
        (data_dir / "logs" / "t-0" / "accept-loss-from").write_text(f"{second.offset}\n")
        cluster.restart(0)
        with Admin(cluster.bootstrap_servers) as admin:
            assert admin.end_offsets([tp])[tp] == second.offset == first.offset + 1


def test_a_node_restarted_while_it_stood_in_for_another_does_not_hold_the_log_hostage(fresh_cluster):
    """Node W dies; Z leads W's partition meanwhile; Z is restarted (its new process does not have
    the log open); W comes back. The partition must move to W: Z's new life lets go of what its
    earlier one led, so W does not wait for a release nobody would give."""
    bs = fresh_cluster.bootstrap_servers
    tp = TopicPartition("t", 0)

    with Producer(bootstrap_servers=bs, request_timeout_ms=2000, delivery_timeout_ms=20_000) as producer:
        home = leader_of(bs, "t", 0)
        fresh_cluster.kill(home)
        wait_until(lambda: leader_of(bs, "t", 0) != home, what="another node to lead t-0")
        stand_in = leader_of(bs, "t", 0)
        producer.send("t", value=b"while-away", partition=0).get(timeout=20)  # the stand-in claims t-0
        fresh_cluster.kill(stand_in)
        fresh_cluster.restart(stand_in)
        fresh_cluster.restart(home)
        wait_until(lambda: leader_of(bs, "t", 0) == home, what="t-0 placed back on its home node")
        producer.send("t", value=b"back-home", partition=0).get(timeout=20)
    assert sorted(read_committed(bs)) == [b"back-home", b"while-away"]
    with Admin(bs) as admin:
        assert admin.end_offsets([tp])[tp] == 2
