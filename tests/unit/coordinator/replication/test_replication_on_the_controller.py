"""Three brokers on the simulator's clock and ZooKeeper model, each running what a replicated node will run:
its registration, the controller's driver, the partition-state watch and the ReplicaManager. Nothing in
the test decides who leads: a topic's assignment is written, the elected controller creates its state,
every broker reads it and leads or follows. A leader killed (its session left to expire) is replaced from
the ISR at a new epoch, no acks=all write is lost, and the broker restarted from its disk comes back as a
follower and rejoins the ISR."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath

from coordinator.controller.controller import Controller
from coordinator.controller.registration import BrokerRegistration
from coordinator.controller.znodes import (
    TOPICS,
    BrokerInfo,
    PartitionState,
    encode_assignment,
    partition_state_path,
    topic_path,
)
from coordinator.replication.follower import FetchSettings
from coordinator.replication.isr_writes import IsrWriter
from coordinator.replication.manager import ReplicaManager, ReplicationSettings
from coordinator.replication.state_watch import PartitionStateWatch
from coordinator.runtime.io import Failures
from partitions import LogConfig, ReplicaLog
from partitions.memory_storage import MemoryStorage
from proto import records
from proto.errors import KafkaError
from proto.structs import TopicPartition
from tests.replication_world import LATENCY_MS, Net, WorldIO
from txnsim.simulate.coordination import SimStore, ZnodeTree
from txnsim.simulate.world import World

TP = TopicPartition("orders", 0)
SESSION_MS = 3_000
SETTINGS = ReplicationSettings(min_insync_replicas=2, max_lag_ms=2_000,
                               fetch=FetchSettings(max_wait_ms=200, backoff_ms=100, request_timeout_ms=1_000))


class Broker:
    def __init__(self, node_id: int, world: World, net: Net, tree: ZnodeTree, disk: MemoryStorage) -> None:
        self.node_id, self.world = node_id, world
        self.io = WorldIO(world, net, node_id)
        serial = self._serial
        self.store = SimStore(tree, timeout_ms=SESSION_MS, now_ms=lambda: world.now_ms,
                              deliver=lambda work: world.after(LATENCY_MS, self._unless_down, work),
                              reachable=lambda: not self.io.down)
        self.manager = ReplicaManager(self.io, IsrWriter(self.store), SETTINGS)
        net.handlers[node_id] = self.manager.handle_fetch
        self.logs: dict[TopicPartition, ReplicaLog] = {}
        self.disk = disk
        self.controller = Controller(node_id, self.store, serial, now_ms=lambda: world.now_ms)
        BrokerRegistration(BrokerInfo(node_id, f"10.0.0.{node_id}:9092"), self.store, serial).start()
        PartitionStateWatch(node_id, self.store, serial, on_state=self._on_state,
                            on_session_expired=self.manager.resign_all).start()
        self.controller.start()
        self._heartbeat()

    def _serial(self, work: Callable[[], None]) -> None:
        self._unless_down(work)

    def _unless_down(self, work: Callable[[], None]) -> None:
        if not self.io.down:
            work()

    def _heartbeat(self) -> None:
        self.store.heartbeat()
        self.io.after(SESSION_MS // 3, self._heartbeat, "heartbeat")

    def log(self, tp: TopicPartition) -> ReplicaLog:
        if tp not in self.logs:
            self.logs[tp] = ReplicaLog.open(PurePath(f"/broker{self.node_id}/{tp}"), tp.topic, tp.partition,
                                            leader_epoch=0, config=LogConfig(segment_bytes=4096),
                                            storage=self.disk)
        return self.logs[tp]

    def _on_state(self, tp: TopicPartition, replicas: tuple[int, ...], state: PartitionState, version: int) -> None:
        self.manager.apply(tp, self.log(tp), state, version, replicas)

    def kill(self) -> None:
        """kill -9: nothing more runs; the session is left to expire; the files stay as written."""
        self.io.down = True

    def produce(self, value: bytes, answers: list[KafkaError | None]) -> bool:
        leader = self.manager.leader(TP)
        if leader is None:
            return False
        try:
            leader.check_enough_replicas()
        except KafkaError as error:
            answers.append(error)
            return True
        end = self.logs[TP].append(records.encode_batch([(0, None, value, ())]), wait_durable=False).last_offset + 1

        def durable(failures: Failures) -> None:
            self.manager.appended(TP)
            leader.wait_for_isr(end, 5_000, answers.append)
        self.io.durable({self.logs[TP]: end}, durable)
        return True


class Cluster:
    def __init__(self) -> None:
        self.world, self.tree, self.disk = World(seed=3), ZnodeTree(), MemoryStorage()
        self.net = Net(self.world)
        self.brokers = {i: Broker(i, self.world, self.net, self.tree, self.disk) for i in (1, 2, 3)}
        self._expire()

    def _expire(self) -> None:
        self.tree.expire_idle(self.world.now_ms)
        self.world.after(250, self._expire)

    def run_until(self, condition: Callable[[], bool], within_ms: int = 30_000) -> None:
        self.world.run(until_ms=self.world.now_ms + within_ms, stop=condition)
        assert condition(), f"not so by {self.world.now_ms} ms"

    def state(self) -> PartitionState:
        return PartitionState.decode(self.tree.get(partition_state_path(TP.topic, TP.partition), None).data)

    def leader(self) -> Broker | None:
        return next((b for b in self.brokers.values() if not b.io.down and b.manager.leader(TP) is not None), None)

    def produce(self, value: bytes) -> list[KafkaError | None]:
        """An idempotent producer's retries, reduced: try the broker that leads until one takes the write."""
        answers: list[KafkaError | None] = []
        self.run_until(lambda: self.leader() is not None)
        leader = self.leader()
        assert leader is not None and leader.produce(value, answers)
        self.run_until(lambda: bool(answers))
        return answers

    def values(self, broker: int) -> list[bytes | None]:
        data = self.brokers[broker].logs[TP].read_for_follower(0, 1 << 30).records
        return [r.value for b in records.iter_batches(data) for r in b.records()]


def test_the_controller_elects_leaders_the_brokers_follow_and_a_killed_leaders_writes_survive() -> None:
    cluster = Cluster()
    cluster.tree.ensure_path(TOPICS)
    cluster.tree.create(0, topic_path(TP.topic), encode_assignment({0: (1, 2, 3)}), ephemeral=False)
    cluster.run_until(lambda: cluster.leader() is not None)
    assert cluster.state() == PartitionState(1, 0, (1, 2, 3), 1)
    acked = [b"before-%d" % i for i in range(5)]
    assert all(cluster.produce(value) == [None] for value in acked)

    cluster.brokers[1].kill()  # the leader and the controller
    cluster.run_until(lambda: cluster.state().leader in (2, 3), within_ms=3 * SESSION_MS)
    state = cluster.state()
    assert state.leader_epoch == 1 and set(state.isr) == {2, 3}
    more = [b"after-%d" % i for i in range(3)]
    assert all(cluster.produce(value) == [None] for value in more)
    for broker in (2, 3):
        cluster.run_until(lambda broker=broker: cluster.values(broker) == acked + more)

    # broker 1 restarts from its disk (its old objects are gone with the process)
    old = cluster.brokers[1]
    for plog in old.logs.values():
        plog.close()
    cluster.brokers[1] = Broker(1, cluster.world, cluster.net, cluster.tree, cluster.disk)
    cluster.run_until(lambda: set(cluster.state().isr) == {1, 2, 3}, within_ms=10_000)
    assert cluster.values(1) == acked + more
