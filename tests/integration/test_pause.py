"""A paused node (SIGSTOP: a long GC, a frozen VM) is counted out once its heartbeat stalls, its logs
are taken over under a new leader epoch, and when it wakes it is fenced: nothing it had in flight
or writes afterwards is acknowledged or becomes visible, no read it answers on waking comes from
before the takeover, and it rejoins through a clean handover."""
from __future__ import annotations

import json
import threading

import grpc
import pytest

from client.cluster import GROUP
from client.transport import call
from proto import txnsim_pb2 as pb
from proto.hashing import partition_for
from proto.structs import TRANSACTION_STATE_TOPIC
from proto.txnsim_pb2_grpc import GroupCoordinatorStub, PartitionsStub, TransactionCoordinatorStub
from tests.helpers import leader_of, read_all, wait_until
from tests.integration.conftest import FAST_SETTINGS
from txnsim import (
    Admin,
    Consumer,
    LocalCluster,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
    errors,
)

PAUSE_SETTINGS = dict(FAST_SETTINGS, broker_session_timeout_ms=1000)


@pytest.fixture
def cluster(tmp_path):
    with LocalCluster(nodes=3, data_dir=tmp_path / "cluster", **PAUSE_SETTINGS) as c:
        with Admin(c.bootstrap_servers) as admin:
            admin.create_topic("t", partitions=3)
        yield c


def read_committed(bs: str) -> list[bytes]:
    return [record.value for record in read_all(bs, "t", partitions=3)]


def ownership_changes(cluster: LocalCluster) -> list[dict]:
    path = cluster.data_dir / "metadata" / "ownership.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def group_coordinator(cluster: LocalCluster, group: str) -> int:
    find = pb.FindCoordinatorRequest(key_type=GROUP, key=group)
    return cluster.client.any_node(lambda s: call(s.cluster.FindCoordinator, find, 5.0)).node_id


def test_a_paused_coordinator_is_taken_over_then_fenced_and_it_rejoins(cluster):
    bs = cluster.bootstrap_servers
    paused = cluster.coordinator_for("p")
    shard = partition_for("p", PAUSE_SETTINGS["txn_shards"])
    acknowledged: list[bytes] = []

    def shard_history() -> list[tuple[int, str, int]]:
        return [(c["node_id"], c["action"], c["leader_epoch"]) for c in ownership_changes(cluster)
                if c["topic"] == TRANSACTION_STATE_TOPIC and c["partition"] == shard]

    with Producer(bootstrap_servers=bs, transactional_id="p", request_timeout_ms=1000,
                  delivery_timeout_ms=20_000, max_block_ms=20_000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", value=b"before", partition=0)
        producer.commit_transaction()
        acknowledged.append(b"before")

        cluster.pause(paused)
        # every node but the paused one sees its heartbeat stall and takes its shards and partitions
        wait_until(lambda: cluster.coordinator_for("p") != paused, timeout_s=15,
                   what="another node to coordinate 'p'")
        for i in range(3):
            producer.begin_transaction()
            for partition in range(3):
                producer.send("t", value=b"during-%d-%d" % (i, partition), partition=partition)
            producer.commit_transaction()
            acknowledged.extend(b"during-%d-%d" % (i, partition) for partition in range(3))

        cluster.resume(paused)
        wait_until(lambda: shard_history()[-1][:2] == (paused, "acquired"), timeout_s=15,
                   what="the woken node to take its shard back")
        producer.begin_transaction()
        producer.send("t", value=b"after", partition=1)
        producer.commit_transaction()
        acknowledged.append(b"after")
        with Admin(bs) as admin:  # markers are written after EndTxn answers
            wait_until(lambda: admin.describe_transaction("p").state == "CompleteCommit", what="the last markers")

    assert sorted(read_committed(bs)) == sorted(acknowledged)
    # taken over at a higher epoch; on waking the old owner found itself fenced; the temporary
    # owner then handed the shard back gracefully (released, not fenced), at a higher epoch again
    (first_owner, _, first_epoch), *later = shard_history()
    (taker, _, taken_epoch) = later[0]
    assert first_owner == paused and taker != paused and taken_epoch > first_epoch
    assert (paused, "fenced", first_epoch) in later
    # (under load the shard may change hands more than once while the node is paused: what matters is that the
    # last temporary owner let go gracefully and the woken node took it back at a higher epoch)
    (releaser, action, released_epoch), (last_owner, last_action, last_epoch) = later[-2:]
    assert releaser != paused and action == "released" and released_epoch >= taken_epoch
    assert (last_owner, last_action) == (paused, "acquired") and last_epoch > released_epoch
    assert later[-1][2] > taken_epoch


def test_writes_in_flight_on_a_paused_partition_leader_are_never_acknowledged_twice(cluster):
    """An idempotent producer keeps writing while a partition's leader is paused mid-stream; writes
    the paused leader had taken but not acknowledged are retried on the new leader, and the woken
    leader acknowledges none of them: each value is in the log exactly once, in order."""
    bs = cluster.bootstrap_servers
    leader = leader_of(bs, "t", 2)
    acknowledged: list[int] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        with Producer(bootstrap_servers=bs, enable_idempotence=True, linger_ms=0, request_timeout_ms=1000,
                      delivery_timeout_ms=30_000, max_in_flight_requests_per_connection=1) as producer:
            i = 0
            while not stop.is_set():
                try:
                    producer.send("t", value=b"%d" % i, partition=2).get(timeout=30)
                except errors.KafkaError as exc:
                    failures.append(exc)
                    return
                acknowledged.append(i)
                i += 1

    writer = threading.Thread(target=write)
    writer.start()
    wait_until(lambda: len(acknowledged) >= 20, what="some acknowledged writes")
    cluster.pause(leader)
    count_at_pause = len(acknowledged)
    wait_until(lambda: len(acknowledged) >= count_at_pause + 20, timeout_s=20,
               what="writes to continue on the new leader")
    cluster.resume(leader)
    wait_until(lambda: any(c["node_id"] == leader and c["action"] == "fenced" and c["topic"] == "t"
                           for c in ownership_changes(cluster)),
               timeout_s=15, what="the woken leader to find itself fenced")
    wait_until(lambda: len(acknowledged) >= count_at_pause + 40, timeout_s=20, what="writes after the wake-up")
    stop.set()
    writer.join(timeout=60)
    assert not failures
    values = [int(r.value) for r in read_all(bs, "t", partitions=3, isolation_level="read_uncommitted")
              if r.partition == 2]
    assert values == list(range(len(values)))  # no gap, no duplicate, in order
    assert set(acknowledged) <= set(values)


def test_a_commit_in_flight_when_its_coordinator_is_paused_completes_on_the_new_owner(cluster):
    """The client's EndTxn hangs on the stalled node until a keepalive ping goes unanswered (about
    2 s; gRPC alone would wait out the whole request timeout), then finds the new owner."""
    bs = cluster.bootstrap_servers
    with Producer(bootstrap_servers=bs, transactional_id="in-flight", max_block_ms=20_000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for partition in range(3):
            producer.send("t", value=b"in-flight-%d" % partition, partition=partition)
        producer.flush()
        paused = cluster.coordinator_for("in-flight")
        cluster.pause(paused)
        try:
            producer.commit_transaction()  # request_timeout_ms is 30 s: only the keepalive can cut this short
        finally:
            cluster.resume(paused)
    with Admin(bs) as admin:  # a partition the paused node led gets its marker once it is handed over
        wait_until(lambda: admin.describe_transaction("in-flight").state == "CompleteCommit", timeout_s=15,
                   what="the markers")
    assert sorted(read_committed(bs)) == [b"in-flight-0", b"in-flight-1", b"in-flight-2"]


def test_reads_queued_at_a_paused_leader_are_not_answered_from_before_its_takeover(cluster):
    """Reads sent to a paused partition leader are served the instant it wakes, before it has noticed
    that another node took the partition over and committed a transaction there: from what it held,
    it would report an LSO below that commit (a read_committed consumer stops short, the test above
    missed a record that way). It answers NOT_LEADER_OR_FOLLOWER or the truth, never the stale view."""
    bs = cluster.bootstrap_servers
    leader = leader_of(bs, "t", 0)
    tid = next(name for name in (f"woken-{i}" for i in range(100)) if cluster.coordinator_for(name) != leader)
    with Producer(bootstrap_servers=bs, transactional_id=tid, max_block_ms=20_000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", value=b"decided-while-paused", partition=0)
        producer.flush()
        cluster.pause(leader)
        try:
            producer.commit_transaction()  # its marker waits for another node to take t-0 over
            with Admin(bs) as admin:
                wait_until(lambda: admin.describe_transaction(tid).state == "CompleteCommit", timeout_s=15,
                           what="the marker on the new leader")
            channel = grpc.insecure_channel(cluster.spec.nodes[leader])
            stub = PartitionsStub(channel)
            ref = pb.TopicPartitionRef(topic="t", partition=0)
            offsets = stub.ListOffsets.future(pb.ListOffsetsRequest(partitions=[ref], isolation_level=1), timeout=30)
            fetched = stub.Fetch.future(pb.FetchRequest(
                isolation_level=1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                partitions=[pb.FetchPartition(topic="t", partition=0, fetch_offset=0, max_bytes=1 << 20)]), timeout=30)
        finally:
            cluster.resume(leader)
        listed, read = offsets.result().partitions[0], fetched.result().partitions[0]
        channel.close()
    not_leader = errors.NotLeaderOrFollowerError.errno
    assert listed.error_code == not_leader or (listed.last_stable_offset, listed.high_watermark) == (2, 2)
    assert read.error_code == not_leader or read.last_stable_offset == 2


def test_an_offset_fetch_queued_at_a_paused_group_coordinator_never_gets_the_offsets_from_before(cluster):
    """The same for a consumer group: offsets committed on the node that took the group's shard over
    must not be answered by the woken coordinator as they were before its pause (a copier restarting
    from those would copy a second time)."""
    bs = cluster.bootstrap_servers
    group = "woken-group"
    coordinator = group_coordinator(cluster, group)
    tp = TopicPartition("t", 0)
    with Consumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(1, "")})
        channel = grpc.insecure_channel(cluster.spec.nodes[coordinator])
        stub = GroupCoordinatorStub(channel)
        grpc.channel_ready_future(channel).result(timeout=10)
        cluster.pause(coordinator)
        try:
            consumer.commit({tp: OffsetAndMetadata(5, "")}, timeout_ms=20_000)  # on the node that took the shard
            fetched = stub.OffsetFetch.future(pb.OffsetFetchRequest(
                group_id=group, partitions=[pb.TopicPartitionRef(topic="t", partition=0)]), timeout=30)
        finally:
            cluster.resume(coordinator)
        answer = fetched.result()
        channel.close()
    if answer.error_code == 0:
        assert [(r.partition, r.error_code, r.offset) for r in answer.results] == [(0, 0, 5)]
    else:
        assert answer.error_code == errors.NotCoordinatorError.errno


def test_listings_queued_at_a_paused_coordinator_leave_out_the_shards_taken_over_meanwhile(cluster):
    """ListTransactions and ListGroups are answered by every node for the shards it serves. Queued at a
    paused coordinator, they must not list from before the takeover: a transaction committed on the new
    owner still Ongoing there, a group deleted on the new owner still present."""
    bs = cluster.bootstrap_servers
    tid = "listed-while-paused"
    coordinator = cluster.coordinator_for(tid)
    group = next(g for g in (f"listed-{i}" for i in range(200)) if group_coordinator(cluster, g) == coordinator)
    tp = TopicPartition("t", 0)
    with Producer(bootstrap_servers=bs, transactional_id=tid, max_block_ms=20_000) as producer, \
            Consumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(1, "")})
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", value=b"open-at-the-pause", partition=0)
        producer.flush()
        channel = grpc.insecure_channel(cluster.spec.nodes[coordinator])
        grpc.channel_ready_future(channel).result(timeout=10)
        txn_stub, group_stub = TransactionCoordinatorStub(channel), GroupCoordinatorStub(channel)
        cluster.pause(coordinator)
        try:
            producer.commit_transaction()  # on the node that takes the shard over
            with Admin(bs) as admin:
                admin.delete_consumer_groups([group])
            transactions = txn_stub.ListTransactions.future(pb.ListTransactionsRequest(), timeout=30)
            groups = group_stub.ListGroups.future(pb.ListGroupsRequest(), timeout=30)
        finally:
            cluster.resume(coordinator)
        listed_transactions, listed_groups = transactions.result(), groups.result()
        channel.close()
    assert {t.state for t in listed_transactions.transactions if t.transactional_id == tid} <= {"CompleteCommit"}
    assert group not in {g.group_id for g in listed_groups.groups}
