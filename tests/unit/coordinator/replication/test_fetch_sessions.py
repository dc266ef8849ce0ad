"""Fetch sessions (KIP-227) between the shipping ReplicaManagers of three nodes on the simulator's clock: once
a session stands, a follower's request lists only the partitions whose fetch state changed and the leader
answers only those with news, so a write to one of many partitions costs one partition's work per round
trip; a leader that lost the session (restarted) makes the follower start over in full, and nothing stalls."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import Any

import pytest

from coordinator.controller.znodes import PartitionState, partition_state_path
from coordinator.replication.follower import FetchSettings
from coordinator.replication.isr_writes import IsrWriter
from coordinator.replication.manager import ReplicaManager, ReplicationSettings
from coordinator.replication.served_sessions import ServedSessions
from coordinator.runtime.io import Failures, Outcome
from partitions import LogConfig, ReplicaLog
from partitions.memory_storage import MemoryStorage
from proto import records
from proto import txnsim_pb2 as pb
from proto.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError, KafkaError
from proto.structs import TopicPartition
from tests.replication_world import LATENCY_MS, Net, WorldIO
from txnsim.simulate.coordination import SimStore, ZnodeTree
from txnsim.simulate.world import World

PARTITIONS = [TopicPartition("orders", p) for p in range(12)]
SETTINGS = ReplicationSettings(min_insync_replicas=2, max_lag_ms=1_000,
                               fetch=FetchSettings(max_wait_ms=500, backoff_ms=100, request_timeout_ms=1_000))
LEADER = 1


class Cluster:
    """Node 1 leads twelve partitions that nodes 2 and 3 follow; every fetch node 1 serves is recorded."""

    def __init__(self) -> None:
        self.world = World(seed=1)
        self.net = Net(self.world)
        self.tree = ZnodeTree()
        self.disk = MemoryStorage()
        self.ids = [1, 2, 3]
        self.managers: dict[int, ReplicaManager] = {}
        self.logs: dict[tuple[int, TopicPartition], ReplicaLog] = {}
        self.served: list[tuple[pb.ReplicaFetchRequest, pb.ReplicaFetchResponse]] = []
        for node in self.ids:
            store = SimStore(self.tree, timeout_ms=10_000, now_ms=lambda: self.world.now_ms,
                             deliver=lambda work: self.world.after(LATENCY_MS, work))
            self.managers[node] = ReplicaManager(WorldIO(self.world, self.net, node), IsrWriter(store), SETTINGS)
            for tp in PARTITIONS:
                self.logs[node, tp] = ReplicaLog.open(PurePath(f"/node{node}/{tp.topic}-{tp.partition}"), tp.topic,
                                                      tp.partition, leader_epoch=0,
                                                      config=LogConfig(segment_bytes=4096), storage=self.disk)
        self.net.handlers[2] = self.managers[2].handle_fetch
        self.net.handlers[3] = self.managers[3].handle_fetch
        self.net.handlers[LEADER] = self._recorded(self.managers[LEADER])
        for tp in PARTITIONS:
            self.tree.ensure_path(partition_state_path(tp.topic, tp.partition).rsplit("/", 1)[0])
            state = PartitionState(LEADER, 0, (1, 2, 3), controller_epoch=1)
            self.tree.create(0, partition_state_path(tp.topic, tp.partition), state.encode(), ephemeral=False)
            for node in self.ids:
                self.managers[node].apply(tp, self.logs[node, tp], state, 0, tuple(self.ids))

    def _recorded(self, manager: ReplicaManager) -> Callable[[Any, Callable[[Outcome], None]], None]:
        def handle(request: pb.ReplicaFetchRequest, reply: Callable[[Outcome], None]) -> None:
            def answered(response: Outcome) -> None:
                if isinstance(response, pb.ReplicaFetchResponse):
                    self.served.append((request, response))
                reply(response)
            manager.handle_fetch(request, answered)
        return handle

    def produce(self, tp: TopicPartition, value: bytes) -> list[KafkaError | None]:
        outcome: list[KafkaError | None] = []
        leader = self.managers[LEADER].leader(tp)
        assert leader is not None
        result = self.logs[LEADER, tp].append(records.encode_batch([(0, None, value, ())]), wait_durable=False)
        end = result.last_offset + 1

        def durable(_failures: Failures) -> None:
            self.managers[LEADER].appended(tp)
            leader.wait_for_isr(end, 5_000, outcome.append)
        WorldIO(self.world, self.net, LEADER).durable({self.logs[LEADER, tp]: end}, durable)
        return outcome

    def run_until(self, condition: Callable[[], bool], within_ms: int = 10_000) -> None:
        self.world.run(until_ms=self.world.now_ms + within_ms, stop=condition)
        assert condition(), f"not so by {self.world.now_ms} ms"

    def run_for(self, ms: int) -> None:
        self.world.run(until_ms=self.world.now_ms + ms)


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def test_once_a_session_stands_a_write_to_one_partition_is_fetched_and_answered_alone(cluster: Cluster) -> None:
    for tp in PARTITIONS:  # every partition written once, so each has a fetch state of its own
        acked = cluster.produce(tp, b"first")
        cluster.run_until(lambda: bool(acked))
    cluster.run_for(2_000)
    first = cluster.served[0][0]
    assert first.session_id == 0 and len(first.partitions) == len(PARTITIONS)  # a full fetch starts the session
    cluster.served.clear()
    acked = cluster.produce(PARTITIONS[5], b"second")
    cluster.run_until(lambda: acked == [None])
    cluster.run_for(1_000)
    assert cluster.served, "the followers stopped fetching"
    assert all(request.session_id != 0 for request, _ in cluster.served)
    assert max(len(request.partitions) for request, _ in cluster.served) == 1
    assert max(len(response.partitions) for _, response in cluster.served) == 1
    assert {(p.topic, p.partition) for request, _ in cluster.served for p in request.partitions} == {("orders", 5)}
    for node in (2, 3):
        assert cluster.logs[node, PARTITIONS[5]].log_end_offset == 2
        cluster.run_until(lambda n=node: cluster.logs[n, PARTITIONS[5]].high_watermark == 2)  # type: ignore[misc]


def test_an_idle_partition_keeps_its_followers_in_sync_though_no_fetch_lists_it(cluster: Cluster) -> None:
    acked = cluster.produce(PARTITIONS[0], b"once")
    cluster.run_until(lambda: acked == [None])
    cluster.run_for(10 * SETTINGS.max_lag_ms)  # many lag windows with no fetch naming it
    late = cluster.produce(PARTITIONS[0], b"later")
    cluster.run_until(lambda: late == [None])
    leader = cluster.managers[LEADER].leader(PARTITIONS[0])
    assert leader is not None and leader.isr == frozenset({1, 2, 3})


def test_a_leader_that_lost_the_sessions_makes_the_followers_fetch_in_full_and_nothing_stalls(
        cluster: Cluster) -> None:
    acked = cluster.produce(PARTITIONS[1], b"before")
    cluster.run_until(lambda: acked == [None])
    cluster.managers[LEADER]._served = ServedSessions()  # as after a restart: no session is known
    cluster.served.clear()
    after = cluster.produce(PARTITIONS[1], b"after")
    cluster.run_until(lambda: after == [None])
    cluster.run_for(1_000)
    assert any(response.error_code == FetchSessionIdNotFoundError.errno for _, response in cluster.served)
    assert any(request.session_id == 0 and len(request.partitions) == len(PARTITIONS) for request, _ in cluster.served)


def test_a_request_out_of_turn_is_refused_and_forgets_the_session() -> None:
    sessions = ServedSessions()
    asked = pb.ReplicaFetchPartition(topic="orders", partition=0, fetch_offset=3, current_leader_epoch=1)
    session = sessions.take(pb.ReplicaFetchRequest(replica_id=2, partitions=[asked]))
    assert session.full and set(session.partitions) == {TopicPartition("orders", 0)}
    nxt = sessions.take(pb.ReplicaFetchRequest(replica_id=2, session_id=session.session_id, session_epoch=1))
    assert nxt is session and not session.full and session.listed == frozenset()
    with pytest.raises(InvalidFetchSessionEpochError):  # epoch 1 again: an answer was lost or a request replayed
        sessions.take(pb.ReplicaFetchRequest(replica_id=2, session_id=session.session_id, session_epoch=1))
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.take(pb.ReplicaFetchRequest(replica_id=2, session_id=session.session_id, session_epoch=2))
    sessionless = sessions.take(pb.ReplicaFetchRequest(replica_id=3, session_epoch=-1, partitions=[asked]))
    assert sessionless.session_id == 0 and sessionless.full
    forgotten = sessions.take(pb.ReplicaFetchRequest(replica_id=2, partitions=[asked]))
    sessions.take(pb.ReplicaFetchRequest(replica_id=2, session_id=forgotten.session_id, session_epoch=1,
                                         forgotten=[pb.TopicPartitionRef(topic="orders", partition=0)]))
    assert forgotten.partitions == {}

