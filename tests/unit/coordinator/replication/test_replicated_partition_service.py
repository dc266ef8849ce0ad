"""The partition leader's service that ships (coordinator/partition_service.py) over replicated partitions: a
produce with acks=all is answered once the ISR has it, acks=1 once the leader has; with the ISR below
min.insync.replicas acks=all is refused with NOT_ENOUGH_REPLICAS and acks=1 still taken; a follower answers
NOT_LEADER_OR_FOLLOWER; a transaction's marker waits for the ISR; a consumer's fetch from the leader reads
up to the high watermark only. Three nodes on the simulator's clock (tests/replication_world.py)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath

from coordinator.controller.znodes import PartitionState, partition_state_path
from coordinator.partition_service import PartitionServer
from coordinator.replication.follower import FetchSettings
from coordinator.replication.isr_writes import IsrWriter
from coordinator.replication.leader_logs import IsrReplication, Leadership, ReplicatedLeaderLogs
from coordinator.replication.manager import ReplicaManager, ReplicationSettings
from partitions import LogConfig, ReplicaLog
from partitions.memory_storage import MemoryStorage
from proto import records
from proto import txnsim_pb2 as pb
from proto.errors import NONE, name_of
from proto.structs import TopicPartition
from tests.replication_world import LATENCY_MS, Net, WorldIO
from txnsim.simulate.coordination import SimStore, ZnodeTree
from txnsim.simulate.replication.node import Topics, no_transactions
from txnsim.simulate.world import World

TP = TopicPartition("orders", 0)
SETTINGS = ReplicationSettings(min_insync_replicas=2, max_lag_ms=1_000,
                               fetch=FetchSettings(max_wait_ms=200, backoff_ms=100, request_timeout_ms=1_000))


class Cluster:
    def __init__(self) -> None:
        self.world, self.tree, self.disk = World(seed=5), ZnodeTree(), MemoryStorage()
        self.net = Net(self.world)
        self.managers: dict[int, ReplicaManager] = {}
        self.servers: dict[int, PartitionServer] = {}
        self.logs: dict[int, ReplicaLog] = {}
        for node in (1, 2, 3):
            io = WorldIO(self.world, self.net, node)
            store = SimStore(self.tree, timeout_ms=10_000, now_ms=lambda: self.world.now_ms,
                             deliver=lambda work: self.world.after(LATENCY_MS, work))
            manager = self.managers[node] = ReplicaManager(io, IsrWriter(store), SETTINGS)
            self.net.handlers[node] = manager.handle_fetch
            self.logs[node] = ReplicaLog.open(PurePath(f"/node{node}/orders-0"), TP.topic, TP.partition,
                                              leader_epoch=0, storage=self.disk)
            self.servers[node] = PartitionServer(
                io=io, logs=ReplicatedLeaderLogs(manager, LogConfig()), membership=Leadership(manager),
                topics=Topics(TP.topic, 1), offsets_shards=1, txn_shards=1, verify=no_transactions,
                on_offsets_marker=lambda *_args: None, replication=IsrReplication(manager, timeout_ms=5_000))
        path = partition_state_path(TP.topic, TP.partition)
        self.tree.ensure_path(path.rsplit("/", 1)[0])
        state = PartitionState(1, 0, (1, 2, 3), 1)
        self.tree.create(0, path, state.encode(), ephemeral=False)
        for node, manager in self.managers.items():
            manager.apply(TP, self.logs[node], state, 0, (1, 2, 3))

    def run_until(self, condition: Callable[[], bool], within_ms: int = 10_000) -> None:
        self.world.run(until_ms=self.world.now_ms + within_ms, stop=condition)
        assert condition(), f"not so by {self.world.now_ms} ms"

    def produce(self, node: int, value: bytes, *, acks: int, txn: tuple[int, int] | None = None) -> list[object]:
        pid, epoch = txn if txn is not None else (-1, -1)
        batch = records.encode_batch([(0, None, value, ())], producer_id=pid, producer_epoch=epoch,
                                     base_sequence=0 if txn else -1, transactional=txn is not None)
        answers: list[object] = []
        request = pb.ProduceRequest(acks=acks, timeout_ms=5_000, partitions=[
            pb.PartitionRecords(topic=TP.topic, partition=TP.partition, records=batch)],
            transactional_id="t" if txn else None)
        self.servers[node].produce_async(request, answers.append)
        return answers


def error_of(answers: list[object]) -> str:
    (response,) = answers
    assert isinstance(response, pb.ProduceResponse)
    (result,) = response.partitions
    return "NONE" if result.error_code == NONE else name_of(result.error_code)


def test_acks_all_waits_for_the_isr_and_acks_1_for_the_leader_alone() -> None:
    cluster = Cluster()
    cluster.net.isolate(3, [1, 2])
    cluster.net.isolate(2, [1, 3])  # both followers away: the ISR cannot have anything
    one = cluster.produce(1, b"acks=1", acks=1)
    everyone = cluster.produce(1, b"acks=all", acks=-1)
    cluster.run_until(lambda: bool(one))
    assert error_of(one) == "NONE" and everyone == []
    cluster.run_until(lambda: bool(everyone), within_ms=5_000)  # the followers fall out of the ISR meanwhile
    assert error_of(everyone) == "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    assert error_of(cluster.produce(1, b"refused", acks=-1)) == "NOT_ENOUGH_REPLICAS"  # checked before the append
    cluster.net.cut.clear()
    cluster.run_until(lambda: PartitionState.decode(cluster.tree.get(
        partition_state_path(TP.topic, TP.partition), None).data).isr == (1, 2, 3))
    healed = cluster.produce(1, b"healed", acks=-1)
    cluster.run_until(lambda: bool(healed))
    assert error_of(healed) == "NONE"
    assert all(cluster.logs[n].log_end_offset == 3 for n in (2, 3))  # the refused write was never appended


def test_a_follower_refuses_writes_and_a_marker_waits_for_the_isr() -> None:
    cluster = Cluster()
    assert error_of(cluster.produce(2, b"x", acks=1)) == "NOT_LEADER_OR_FOLLOWER"
    written = cluster.produce(1, b"paid", acks=-1, txn=(7, 0))
    cluster.run_until(lambda: bool(written))
    assert error_of(written) == "NONE"
    cluster.net.isolate(3, [1, 2])
    marked: list[object] = []
    cluster.servers[1].write_txn_markers_async(pb.WriteTxnMarkersRequest(markers=[pb.TxnMarker(
        producer_id=7, producer_epoch=0, committed=True, coordinator_epoch=0,
        partitions=[pb.TopicPartitionRef(topic=TP.topic, partition=TP.partition)])]), marked.append)
    cluster.run_until(lambda: cluster.logs[2].log_end_offset == 2)
    assert marked == []  # node 2 has the marker, node 3 (still in the ISR) not yet
    fetched = cluster.servers[1]._fetch_once(pb.FetchRequest(isolation_level=1, partitions=[
        pb.FetchPartition(topic=TP.topic, partition=TP.partition, fetch_offset=0)]), 1)[0][0]
    assert fetched.high_watermark == 1 and fetched.last_stable_offset == 0  # undecided below the ISR's mark
    cluster.run_until(lambda: bool(marked), within_ms=5_000)  # node 3 leaves the ISR, then the marker is in
    assert not marked[0].markers[0].partitions[0].error_code  # type: ignore[attr-defined]


def test_a_node_that_keeps_no_replicas_refuses_a_replica_fetch_with_kafkas_error() -> None:
    from coordinator.partition_service import PartitionsServicer
    cluster = Cluster()
    servicer = PartitionsServicer(cluster.servers[1])  # as a shared-directory node serves it: no replica fetch
    response = servicer.ReplicaFetch(pb.ReplicaFetchRequest(replica_id=2, partitions=[
        pb.ReplicaFetchPartition(topic=TP.topic, partition=TP.partition, fetch_offset=0)]), None)
    assert [name_of(p.error_code) for p in response.partitions] == ["NOT_LEADER_OR_FOLLOWER"]
    serving = PartitionsServicer(cluster.servers[1], replica_fetch=cluster.managers[1].handle_fetch)
    answered = serving.ReplicaFetch(pb.ReplicaFetchRequest(replica_id=2, partitions=[
        pb.ReplicaFetchPartition(topic=TP.topic, partition=TP.partition, fetch_offset=0)]), None)
    assert answered.partitions[0].error_code == NONE and answered.partitions[0].high_watermark == 0
