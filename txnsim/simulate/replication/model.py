"""The replication model: three brokers replicating one topic of two partitions (three replicas each,
min.insync.replicas 2) through the shipping controller, ReplicaManager, ReplicaLogs and partition leader's
service, over the simulator's network, disk and ZooKeeper, while idempotent producers write with acks=all.

Checked after every step: a leader's high watermark never passes the log end of a live ISR member, and no
two brokers lead a partition at the same leader epoch. At the end, with every fault healed and time to
settle: every acknowledged record is in its partition's leader's log exactly once, and the replicas agree on
every offset below their high watermarks. The planted bugs switch replication's protections off one at a
time (proto/planted_bugs.py: unclean-election, hw-from-leader-alone, no-follower-truncation,
acks-before-isr).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import ClassVar

from coordinator.controller.znodes import TOPICS, PartitionState, encode_assignment, topic_path
from coordinator.replication.follower import FetchSettings
from coordinator.replication.manager import ReplicationSettings
from partitions import ReplicaLog
from partitions.memory_storage import MemoryStorage
from proto import records
from proto.planted_bugs import DESCRIPTIONS, REPLICATION_BUGS, PlantedBug
from proto.structs import TopicPartition
from txnsim.simulate.coordination import ZnodeTree
from txnsim.simulate.model import Model, Report, Violation
from txnsim.simulate.network import Envelope, Network
from txnsim.simulate.replication.node import ZK, ReplicaNode
from txnsim.simulate.replication.producer import Producer
from txnsim.simulate.world import World

BROKERS = (1, 2, 3)
TOPIC = "orders"
PARTITIONS = 2
PRODUCERS = 2
SESSION_MS = 1_000
EXPIRY_CHECK_MS = 100


class ReplicationModel(Model):
    name = "replication"
    description = ("three brokers replicating a topic (3 replicas, min.insync.replicas 2) through the shipping "
                   "controller and replication drivers on a simulated ZooKeeper; idempotent acks=all producers")
    BUGS: ClassVar[Mapping[str, str]] = {bug.value: DESCRIPTIONS[bug] for bug in PlantedBug if bug in REPLICATION_BUGS}
    WORKLOADS: ClassVar[Mapping[str, str]] = {"default": f"{PRODUCERS} idempotent producers, acks=all, "
                                                         f"{PARTITIONS} partitions"}
    INVARIANTS: ClassVar[Mapping[str, str]] = {
        "hw-within-isr": "a leader's high watermark is never past the log end of a live member of its ISR",
        "one-leader-per-epoch": "no two brokers lead a partition at the same leader epoch",
        "acked-kept": "every record acknowledged to acks=all is in its partition's leader's log, once",
        "replicas-agree": "replicas hold the same records at every offset below their high watermarks",
    }
    session_timeout_ms: ClassVar[int] = SESSION_MS

    def __init__(self, *, bug: str | None = None, workload: str | None = None) -> None:
        super().__init__(bug=bug, workload=workload)
        self.planted = PlantedBug(bug) if bug is not None else None
        self.topic, self.partitions, self.session_ms = TOPIC, PARTITIONS, SESSION_MS
        self.replication_settings = ReplicationSettings(
            min_insync_replicas=2, max_lag_ms=2 * SESSION_MS, planted_bug=self.planted,
            fetch=FetchSettings(max_wait_ms=200, backoff_ms=100, request_timeout_ms=1_000, planted_bug=self.planted))
        #: ground truth: every acknowledged record, by partition (value -> offset it was answered with)
        self.acked: dict[TopicPartition, dict[bytes, int]] = {}
        self.refusals: list[str] = []
        #: who led each (partition, leader epoch), as seen by a broker applying the state
        self._leaders: dict[tuple[TopicPartition, int], int] = {}
        self._violations: list[Violation] = []

    def nodes(self) -> Sequence[str]:
        return [f"n{b}" for b in BROKERS]

    def clients(self) -> Sequence[str]:
        return [ZK, *(f"c{i}" for i in range(1, PRODUCERS + 1))]

    def setup(self, world: World, network: Network) -> None:
        self.world, self.network = world, network
        self.tree, self.disk = ZnodeTree(), MemoryStorage()
        self.brokers: dict[str, ReplicaNode] = {}
        network.register(ZK, lambda _env: None)  # the store is reached through its link; it is never down
        for broker in BROKERS:
            name = f"n{broker}"
            network.register(name, functools.partial(self._deliver, name))
            self.brokers[name] = ReplicaNode(self, broker)
        self.tree.ensure_path(TOPICS)
        self.tree.create(0, topic_path(TOPIC), encode_assignment(
            {p: tuple(BROKERS[(p + i) % len(BROKERS)] for i in range(len(BROKERS))) for p in range(PARTITIONS)}),
            ephemeral=False)
        self._expire()
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        self.acked = {tp: {} for tp in tps}
        self.producers = [Producer(f"c{i}", 1000 + i, network, world.rng(f"workload.c{i}"), self.nodes(), tps,
                                   on_acked=self._acknowledged, on_refused=self.refusals.append)
                          for i in range(1, PRODUCERS + 1)]
        for producer in self.producers:
            network.register(producer.name, lambda _env: None)
            producer.start()

    def _deliver(self, name: str, env: Envelope) -> None:
        self.brokers[name].handle(env)

    def _expire(self) -> None:
        """The store's side of sessions: one that has not been heard from within its timeout ends."""
        self.tree.expire_idle(self.world.now_ms)
        self.world.after(EXPIRY_CHECK_MS, self._expire)

    def _acknowledged(self, tp: TopicPartition, value: bytes, offset: int) -> None:
        self.acked[tp][value] = offset

    def saw_state(self, node: ReplicaNode, tp: TopicPartition, state: PartitionState) -> None:
        """A broker is about to act on a state: it leads, or follows, at its epoch."""
        if state.leader < 0:
            return
        known = self._leaders.setdefault((tp, state.leader_epoch), state.leader)
        if known != state.leader:
            self._violations.append(Violation("one-leader-per-epoch", f"{tp} at leader epoch {state.leader_epoch} "
                                              f"is led by n{known} and by n{state.leader}"))

    # ------------------------------------------------------------ invariants

    def check(self, world: World) -> list[Violation]:
        if self._violations:
            return self._violations
        for node in self.brokers.values():
            if not self.network.actors.is_up(node.name):
                continue
            for leader in node.manager.leaders():
                mark = leader.log.high_watermark
                for member in leader.isr:
                    other = self.brokers[f"n{member}"]
                    if member == node.node_id or not self.network.actors.is_up(other.name):
                        continue
                    follower = other.logs.get(leader.tp)
                    if follower is not None and follower.log_end_offset < mark:
                        return [Violation("hw-within-isr", f"{leader.tp}: leader {node.name}'s high watermark is "
                                          f"{mark}, past the log end {follower.log_end_offset} of ISR member "
                                          f"{other.name}")]
        return []

    def finish(self, world: World) -> Report:
        violations: list[Violation] = []
        for tp, acked in self.acked.items():
            leader = next((n for n in self.brokers.values() if n.manager.leader(tp) is not None), None)
            if leader is None:
                violations.append(Violation("acked-kept", f"{tp} has no leader after the run settled"))
                continue
            values = _values(leader.logs[tp])
            lost = sorted(v for v in acked if values.count(v) == 0)
            doubled = sorted(v for v in acked if values.count(v) > 1)
            if lost:
                violations.append(Violation("acked-kept", f"{tp}: {len(lost)} acknowledged records are not in leader "
                                            f"{leader.name}'s log, e.g. {lost[0].decode()}"))
            elif doubled:
                violations.append(Violation("acked-kept", f"{tp}: {len(doubled)} acknowledged records are in leader "
                                            f"{leader.name}'s log twice, e.g. {doubled[0].decode()}"))
            violations.extend(self._replicas_agree(tp))
        totals = {"acknowledged": sum(len(a) for a in self.acked.values()),
                  "sent": sum(p.sent for p in self.producers)}
        return Report(violations, totals)

    def _replicas_agree(self, tp: TopicPartition) -> list[Violation]:
        logs = {name: node.logs[tp] for name, node in self.brokers.items() if tp in node.logs}
        if len(logs) < 2:
            return []
        below = min(log.high_watermark for log in logs.values())
        start = max(log.log_start_offset for log in logs.values())
        seen: dict[int, tuple[str, bytes | None]] = {}
        for name, log in logs.items():
            for offset, value in _records(log, start, below):
                first = seen.setdefault(offset, (name, value))
                if first[1] != value:
                    return [Violation("replicas-agree", f"{tp} offset {offset}: {first[0]} holds "
                                      f"{_show(first[1])}, {name} holds {_show(value)}")]
        return []

    def counters(self) -> dict[str, int]:
        return {"acknowledged": sum(len(a) for a in self.acked.values()),
                "produce attempts": sum(p.sent for p in self.producers)}

    # ------------------------------------------------------------ faults

    def crash(self, node: str) -> None:
        self.brokers[node].crash()

    def restart(self, node: str) -> None:
        self.brokers[node].restart()

    def slow_fsync(self, node: str, extra_ms: int) -> None:
        self.brokers[node].io.extra_fsync_ms = extra_ms

    def quiesce(self) -> None:
        for producer in self.producers:
            producer.stop()


def _records(log: ReplicaLog, start: int, end: int) -> list[tuple[int, bytes | None]]:
    if end <= start:
        return []
    data = log.read_for_follower(start, 1 << 30).records
    return [(r.offset, r.value) for b in records.iter_batches(data) for r in b.records() if r.offset < end]


def _values(log: ReplicaLog) -> list[bytes | None]:
    return [value for _offset, value in _records(log, log.log_start_offset, log.log_end_offset)]


def _show(value: bytes | None) -> str:
    return "nothing" if value is None else value.decode(errors="replace")
