"""The replication drivers of three nodes on the simulator's clock: the shipping ReplicaManager, leader and
fetch sessions over a NodeIO whose calls are messages with a latency and whose links can be cut, the ISR
written to the simulator's ZooKeeper, the logs ReplicaLogs on its disk. The test plays the controller
(writing each partition's state znode and telling the nodes) and the produce path (append, fsync, wait for
the ISR): acks=all waits for every ISR member's fsync; a follower cut off leaves the ISR after the lag and
rejoins once caught up; min.insync.replicas refuses writes; an old leader cut off cannot change the ISR
the controller moved on from, acknowledges nothing more, and comes back to cut exactly its unreplicated
tail."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath

import pytest

from coordinator.controller.store import CoordinationStore
from coordinator.controller.znodes import PartitionState, partition_state_path
from coordinator.replication.follower import FetchSettings
from coordinator.replication.isr_writes import IsrWriter
from coordinator.replication.manager import ReplicaManager, ReplicationSettings
from coordinator.runtime.io import Failures
from partitions import LogConfig, ReplicaLog
from partitions.follower_fetch import FetchState
from partitions.memory_storage import MemoryStorage
from proto import records
from proto.errors import (
    KafkaError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from proto.structs import IsolationLevel, TopicPartition
from tests.replication_world import LATENCY_MS, Net, WorldIO
from txnsim.simulate.coordination import SimStore, ZnodeTree
from txnsim.simulate.world import World

TP = TopicPartition("orders", 0)
MAX_LAG_MS = 1_000
SETTINGS = ReplicationSettings(min_insync_replicas=2, max_lag_ms=MAX_LAG_MS,
                               fetch=FetchSettings(max_wait_ms=500, backoff_ms=100, request_timeout_ms=1_000))


class Cluster:
    def __init__(self, nodes: int = 3) -> None:
        self.world = World(seed=1)
        self.net = Net(self.world)
        self.tree = ZnodeTree()
        self.disk = MemoryStorage()
        self.ids = list(range(1, nodes + 1))
        self.stores: dict[int, CoordinationStore] = {}
        self.managers: dict[int, ReplicaManager] = {}
        self.logs: dict[int, ReplicaLog] = {}
        for node in self.ids:
            io = WorldIO(self.world, self.net, node)
            self.stores[node] = SimStore(self.tree, timeout_ms=10_000, now_ms=lambda: self.world.now_ms,
                                         deliver=lambda work: self.world.after(LATENCY_MS, work))
            self.managers[node] = ReplicaManager(io, IsrWriter(self.stores[node]), SETTINGS)
            self.net.handlers[node] = self.managers[node].handle_fetch
            self.logs[node] = ReplicaLog.open(PurePath(f"/node{node}/orders-0"), TP.topic, TP.partition,
                                              leader_epoch=0, config=LogConfig(segment_bytes=4096),
                                              storage=self.disk)
        self.tree.ensure_path(partition_state_path(TP.topic, TP.partition).rsplit("/", 1)[0])

    def elect(self, leader: int, epoch: int, isr: tuple[int, ...], *, tell: list[int] | None = None) -> None:
        """The controller's move: write the state znode, then tell the nodes (all, or `tell`)."""
        path = partition_state_path(TP.topic, TP.partition)
        state = PartitionState(leader, epoch, isr, controller_epoch=1)
        try:
            version = self.tree.set(path, state.encode(), -1)
        except Exception:
            self.tree.create(0, path, state.encode(), ephemeral=False)
            version = 0
        for node in tell if tell is not None else self.ids:
            self.managers[node].apply(TP, self.logs[node], state, version, tuple(self.ids))

    def isr_in_store(self) -> tuple[int, ...]:
        return PartitionState.decode(self.tree.get(partition_state_path(TP.topic, TP.partition), None).data).isr

    def produce(self, node: int, value: bytes, timeout_ms: int = 5_000) -> list[KafkaError | None]:
        """The produce path with acks=all on `node`: the answer lands in the returned list."""
        outcome: list[KafkaError | None] = []
        leader = self.managers[node].leader(TP)
        if leader is None:
            outcome.append(NotLeaderOrFollowerError(f"node {node} does not lead"))
            return outcome
        try:
            leader.check_enough_replicas()
        except KafkaError as error:
            outcome.append(error)
            return outcome
        result = self.logs[node].append(records.encode_batch([(0, None, value, ())]), wait_durable=False)
        end = result.last_offset + 1

        def durable(failures: Failures) -> None:
            self.managers[node].appended(TP)
            leader.wait_for_isr(end, timeout_ms, outcome.append)
        WorldIO(self.world, self.net, node).durable({self.logs[node]: end}, durable)
        return outcome

    def run_until(self, condition: Callable[[], bool], within_ms: int = 30_000) -> None:
        deadline = self.world.now_ms + within_ms
        self.world.run(until_ms=deadline, stop=condition)
        assert condition(), f"not so by {self.world.now_ms} ms"

    def run_for(self, ms: int) -> None:
        self.world.run(until_ms=self.world.now_ms + ms)

    def values(self, node: int) -> list[bytes | None]:
        fetched = self.logs[node].read(0, 1 << 30, IsolationLevel.READ_UNCOMMITTED)
        return [r.value for b in records.iter_batches(fetched.records) for r in b.records()]

    def all_values(self, node: int) -> list[bytes | None]:
        fetched = self.logs[node].read_for_follower(self.logs[node].log_start_offset, 1 << 30)
        return [r.value for b in records.iter_batches(fetched.records) for r in b.records()]


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def test_acks_all_is_answered_once_every_isr_member_has_fsynced_the_write(cluster: Cluster) -> None:
    cluster.elect(1, 0, (1, 2, 3))
    answers = cluster.produce(1, b"paid")
    # at the moment the write is acknowledged, both followers hold it
    cluster.run_until(lambda: bool(answers) and all(cluster.logs[n].log_end_offset == 1 for n in (2, 3)))
    assert answers == [None]
    assert cluster.logs[1].high_watermark == 1 and cluster.values(1) == [b"paid"]
    cluster.run_until(lambda: all(cluster.logs[n].high_watermark == 1 for n in (2, 3)))  # followers learn the mark


def test_an_idle_follower_fetch_waits_at_the_leader_instead_of_spinning(cluster: Cluster) -> None:
    cluster.elect(1, 0, (1, 2, 3))
    cluster.run_for(100)
    before = cluster.net.calls
    cluster.run_for(10_000)
    calls = cluster.net.calls - before
    assert 30 <= calls <= 45, calls  # two followers, one fetch per 500 ms each
    answers = cluster.produce(1, b"x")
    cluster.run_until(lambda: bool(answers), within_ms=50)  # a parked fetch is woken by the append
    assert answers == [None]


def test_a_follower_cut_off_leaves_the_isr_and_rejoins_once_it_has_caught_up(cluster: Cluster) -> None:
    cluster.elect(1, 0, (1, 2, 3))
    cluster.run_for(100)
    cluster.net.isolate(3, [1, 2])
    answers = cluster.produce(1, b"while 3 is away")
    cluster.run_for(MAX_LAG_MS // 2)
    assert answers == []  # the ISR still names node 3, which does not have it
    cluster.run_until(lambda: bool(answers), within_ms=3 * MAX_LAG_MS)
    assert answers == [None] and cluster.isr_in_store() == (1, 2)
    cluster.net.cut.clear()
    cluster.run_until(lambda: cluster.isr_in_store() == (1, 2, 3), within_ms=5_000)
    assert cluster.all_values(3) == [b"while 3 is away"]


def test_with_the_isr_below_min_insync_writes_are_refused(cluster: Cluster) -> None:
    cluster.elect(1, 0, (1, 2, 3))
    cluster.run_for(100)
    cluster.net.isolate(1, [2, 3])
    waiting = cluster.produce(1, b"a")
    cluster.run_until(lambda: bool(waiting), within_ms=3 * MAX_LAG_MS)
    assert cluster.isr_in_store() == (1,)  # written, then the waiting write was told
    assert len(waiting) == 1 and type(waiting[0]).__name__ == "NotEnoughReplicasAfterAppendError"
    refused = cluster.produce(1, b"b")
    assert len(refused) == 1 and isinstance(refused[0], NotEnoughReplicasError)


def test_an_old_leader_acknowledges_nothing_more_and_cuts_only_its_unreplicated_tail(cluster: Cluster) -> None:
    cluster.elect(1, 0, (1, 2, 3))
    acked = [cluster.produce(1, b"a-%d" % i) for i in range(5)]
    cluster.run_until(lambda: all(acked))
    assert all(answer == [None] for answer in acked)
    # node 1 is cut off from its followers; the controller (ZooKeeper still hears node 1) moves leadership
    cluster.net.isolate(1, [2, 3])
    stranded = [cluster.produce(1, b"lost-%d" % i) for i in range(3)]
    cluster.elect(2, 1, (2, 3), tell=[2, 3])
    cluster.run_for(3 * MAX_LAG_MS)  # node 1 tries to shrink its ISR: the store refuses a stale version
    assert cluster.isr_in_store() == (2, 3)
    fresh = [cluster.produce(2, b"b-%d" % i) for i in range(2)]
    cluster.run_until(lambda: all(fresh))
    assert all(answer == [None] for answer in fresh)
    # healed and told, node 1 follows at epoch 1: it cuts its three lost writes and copies node 2
    cluster.net.cut.clear()
    cluster.managers[1].apply(TP, cluster.logs[1], PartitionState(2, 1, (2, 3), 1), 1, (1, 2, 3))
    expected = [b"a-%d" % i for i in range(5)] + [b"b-0", b"b-1"]
    cluster.run_until(lambda: cluster.all_values(1) == expected)
    cluster.run_until(lambda: cluster.isr_in_store() == (1, 2, 3))
    for answer in stranded:  # never acknowledged: told they timed out, or that node 1 stopped leading
        assert len(answer) == 1 and isinstance(answer[0], (RequestTimedOutError, NotLeaderOrFollowerError))
    assert cluster.all_values(2) == cluster.all_values(3) == expected


def test_a_follower_told_first_retries_and_one_with_an_old_epoch_waits_for_its_new_state(cluster: Cluster) -> None:
    cluster.elect(1, 0, (1, 2, 3))
    first = cluster.produce(1, b"0")
    cluster.run_until(lambda: first == [None])
    # node 3 hears of epoch 1 before its new leader, node 2, does: NOT_LEADER_OR_FOLLOWER, then it tries again
    cluster.elect(2, 1, (2, 3), tell=[3])
    cluster.run_for(300)
    session = cluster.managers[3].session(2)
    assert session is not None and session.state_of(TP) is FetchState.FETCHING
    # node 1 still follows epoch 0 when it asks the new leader: fenced, it waits for its own word
    cluster.managers[1].apply(TP, cluster.logs[1], PartitionState(2, 0, (2, 3), 1), 0, (1, 2, 3))
    cluster.elect(2, 1, (2, 3), tell=[2])
    answers = cluster.produce(2, b"1")
    cluster.run_until(lambda: bool(answers))
    assert answers == [None] and cluster.all_values(3) == [b"0", b"1"]
    fenced = cluster.managers[1].session(2)
    cluster.run_until(lambda: fenced is not None and fenced.state_of(TP) is FetchState.WAITING)
    cluster.elect(2, 1, (2, 3), tell=[1])
    cluster.run_until(lambda: cluster.all_values(1) == [b"0", b"1"])


def test_a_new_epoch_that_keeps_the_leader_keeps_its_waiting_writes(cluster: Cluster) -> None:
    cluster.elect(1, 0, (1, 2, 3))
    cluster.run_for(100)
    cluster.net.isolate(3, [1, 2])
    waiting = cluster.produce(1, b"while 3 is away")
    cluster.run_for(100)
    assert waiting == []  # node 3 is in the ISR and does not have it
    cluster.elect(1, 1, (1, 2))  # the controller drops node 3 (its session ended) and bumps the epoch
    cluster.run_until(lambda: bool(waiting))
    assert waiting == [None]  # taken up in place: answered once the new ISR has it, as Kafka does
    assert cluster.logs[1].epoch_cache().latest_epoch == 1


def test_a_follower_below_the_leaders_log_start_starts_over_there_and_rejoins(cluster: Cluster) -> None:
    cluster.elect(1, 0, (1, 2, 3))
    cluster.run_for(100)
    cluster.net.isolate(3, [1, 2])
    acked = [cluster.produce(1, b"v%d" % i) for i in range(4)]
    cluster.run_until(lambda: all(acked), within_ms=3 * MAX_LAG_MS)
    assert cluster.isr_in_store() == (1, 2)
    assert cluster.logs[1].delete_records_before(-1) == 4  # DeleteRecords while node 3 is away
    cluster.net.cut.clear()
    cluster.run_until(lambda: cluster.isr_in_store() == (1, 2, 3))
    assert cluster.logs[3].log_start_offset == cluster.logs[3].log_end_offset == 4  # started over, empty
    # the deletion reaches the follower in the ISR too, once its own mark has passed it
    cluster.run_until(lambda: cluster.logs[2].log_start_offset == 4)
    more = cluster.produce(1, b"v4")
    cluster.run_until(lambda: bool(more))
    assert more == [None] and cluster.all_values(3) == [b"v4"]
