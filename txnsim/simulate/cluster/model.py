"""The cluster under `txnsim simulate`: three nodes running the shipping node drivers, transactional
producers, readers, consumer groups, copiers, a Spark-style batch and RocketMQ producers, on one simulated
disk, network and clock.

This module wires the run and injects its faults; the control plane (control_plane.py) says who is live
and owns what, the invariant recorder (invariants.py) checks what the actors report, and shape.py holds
the configuration. The final checks read every partition read_committed from the disk and hand the
history to `txnsim chaos`'s checker (lost-write, unseen, G1a aborted read, duplicate, precommitted read,
...); every partition must be stable (no transaction left hanging), and every half message delivered
exactly once if committed, never if rolled back.
"""
from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

from partitions.faulty_storage import FaultyStorage
from partitions.producer_snapshot import SUFFIX as SNAPSHOT_SUFFIX
from partitions.segment import INDEX_SUFFIX
from proto.planted_bugs import DESCRIPTIONS, REPLICATION_BUGS, PlantedBug
from proto.structs import IsolationLevel, TopicPartition
from txnsim.chaos.checker import check
from txnsim.chaos.history import History
from txnsim.simulate.cluster import final_read
from txnsim.simulate.cluster.batch_client import SparkQuery
from txnsim.simulate.cluster.clients import GroupMember, TxnProducer
from txnsim.simulate.cluster.control_plane import MEMBERSHIP_TICK_MS, ControlPlane
from txnsim.simulate.cluster.copier import COPY_GROUP, Copier
from txnsim.simulate.cluster.invariants import InvariantRecorder
from txnsim.simulate.cluster.node import DATA_ROOT, SimNode
from txnsim.simulate.cluster.readers import Reader
from txnsim.simulate.cluster.rmq_client import RmqProducer
from txnsim.simulate.cluster.shape import BATCH_TOPIC, NODES, OUT_TOPIC, TOPIC
from txnsim.simulate.model import Model, Report, Violation
from txnsim.simulate.network import Envelope, Network
from txnsim.simulate.world import World

PRODUCERS = 3
GROUP_MEMBERS = 3
COPIERS = 2
RMQ_PRODUCERS = 2
GROUP = "sim-group"
#: the files a `bitflip` fault damages: derived from the segments, checksummed, rebuilt when refused (saved
#: indexes, producer-state snapshots, and the coordinators' shard snapshots: `<offset>.txn-snapshot`, ...)
FLIPPABLE_SUFFIXES = (INDEX_SUFFIX, SNAPSHOT_SUFFIX, "-snapshot")
#: planted bugs of how a log is opened, which the final read (one more node opening every log) has too
_OPENING_BUGS = frozenset({PlantedBug.TRUST_SAVED_INDEX})


class ClusterModel(Model):
    name = "cluster"
    description = ("3 nodes on the real transaction coordinator core and partition logs, 3 transactional producers, "
                   "a read_committed consumer, consumer groups, copiers, RocketMQ half messages with check-back")
    BUGS: ClassVar[dict[str, str]] = {bug.value: description for bug, description in DESCRIPTIONS.items()
                                      if bug not in REPLICATION_BUGS}
    WORKLOADS: ClassVar[dict[str, str]] = {
        "transactions": "transactional producers committing and aborting across 4 partitions; a read_committed "
                        "consumer; a consumer group of 3 members that leave and come back; 2 exactly-once "
                        "copiers (read-process-write with transactional offsets) in a group of their own; 2 "
                        "RocketMQ producers sending half messages, ended or left to the check-back",
    }
    INVARIANTS: ClassVar[dict[str, str]] = InvariantRecorder.INVARIANTS
    session_timeout_ms = 1_000

    def __init__(self, *, bug: str | None = None, workload: str | None = None) -> None:
        super().__init__(bug=bug, workload=workload)
        #: the planted bug the nodes' code is built with (None: the system as shipped)
        self.planted = PlantedBug(bug) if bug is not None else None
        self.control = ControlPlane(self.planted, self.session_timeout_ms)
        self.recorder = InvariantRecorder(
            lambda kind, actor, text: self.network._trace.record(self.world.now_ms, kind, actor, "*", text))
        self.fsync_ms = 1
        #: the RocketMQ producers' local database (message id -> its transaction's state): it outlives them
        self.rmq_local: dict[str, str] = {}
        #: nodes crashed and not yet restarted: their old LogManagers hold nothing a power loss must spare
        self._powered_off: set[str] = set()
        #: what the bitflip faults did
        self._flips: Counter[str] = Counter()
        #: of the records the read_uncommitted reader was handed, how many the final read_committed read does
        #: not return (aborted, or never decided)
        self._uncommitted_never_committed = 0

    # ------------------------------------------------------------ the Model interface

    def nodes(self) -> Sequence[str]:
        return self.control.nodes()

    def clients(self) -> Sequence[str]:
        return ([f"p{i}" for i in range(PRODUCERS)] + ["reader", "reader-ru"] + [f"m{i}" for i in range(GROUP_MEMBERS)]
                + [f"c{i}" for i in range(COPIERS)] + ["spark"]
                + [f"r{i}" for i in range(RMQ_PRODUCERS)])

    def setup(self, world: World, network: Network) -> None:
        self.world = world
        self.network = network
        self.history = History(clock=lambda: world.now_ms / 1000)
        self.disk = FaultyStorage(world.rng("disk"), torn_writes=True)
        self._wake_rng = world.rng("wake")
        #: nodes woken from a pause that have not yet noticed what changed meanwhile
        self._waking: set[str] = set()
        self.disk.mkdir(DATA_ROOT)
        self.sim_nodes: dict[str, SimNode] = {}
        for name in self.nodes():
            network.register(name, functools.partial(self._deliver, name))
        for i, name in enumerate(self.nodes()):
            self.sim_nodes[name] = SimNode(name, i, self)
        # p0 and p2 let the leaders add their partitions (txnsim's own producer, transactions V2), p1 adds them
        # itself (Kafka clients): both paths meet the same faults
        self.producers = [TxnProducer(f"p{i}", f"tx-{i}", self, world.rng(f"producer-{i}"), implicit_add=i % 2 == 0)
                          for i in range(PRODUCERS)]
        for producer in self.producers:
            network.register(producer.name, lambda env: None)
            producer.start()
        self.reader = Reader("reader", self, IsolationLevel.READ_COMMITTED, poll_interval_ms=25)
        self.uncommitted_reader = Reader("reader-ru", self, IsolationLevel.READ_UNCOMMITTED, poll_interval_ms=50)
        for reader in (self.reader, self.uncommitted_reader):
            network.register(reader.name, lambda env: None)
            reader.start()
        self.members = [GroupMember(f"m{i}", GROUP, self, world.rng(f"member-{i}")) for i in range(GROUP_MEMBERS)]
        self.copiers = [Copier(f"c{i}", self, world.rng(f"copier-{i}"), implicit_add=i % 2 == 0)
                        for i in range(COPIERS)]
        for member in [*self.members, *self.copiers]:
            network.register(member.name, lambda env: None)
            member.start()
        self.query = SparkQuery("spark", self, world.rng("spark"))
        network.register(self.query.name, lambda env: None)
        self.query.start()
        self.rmq_producers = [RmqProducer(f"r{i}", self, world.rng(f"rmq-{i}")) for i in range(RMQ_PRODUCERS)]
        for rmq in self.rmq_producers:
            network.register(rmq.name, rmq.receive)
            rmq.start()
        world.after(MEMBERSHIP_TICK_MS, self._membership_tick)

    def _deliver(self, node: str, env: Envelope) -> None:
        self.sim_nodes[node].receive(env)

    def check(self, world: World) -> list[Violation]:
        return self.recorder.check()

    def finish(self, world: World) -> Report:
        # one more node opens every log and reads what the nodes left; of the log's planted bugs it has only
        # the one about opening
        reader = final_read.open_reader(self.disk, NODES + 1, self.planted if self.planted in _OPENING_BUGS else None,
                                        now_ms=lambda: world.now_ms)
        final, extra = final_read.read_topics(reader, [*self.control.data_partitions, *self.control.out_partitions,
                                                       *self.control.batch_partitions], world.now_ms)
        extra += final_read.batch_violations(final.records.get(BATCH_TOPIC, []))
        extra += final_read.half_message_violations(reader, self.recorder.rmq_sent, self.rmq_local)
        extra += final_read.uncommitted_read_violations(reader, self.control.data_partitions,
                                                            self.recorder.uncommitted)
        committed = {(TopicPartition(r.topic, r.partition), r.offset) for r in final.records.get(TOPIC, [])}
        self._uncommitted_never_committed = sum(key not in committed for key in self.recorder.uncommitted)
        result = check(self.history.events(), final, input_topic=TOPIC, output_topic=OUT_TOPIC)
        return Report.of_check(result, extra)

    def counters(self) -> dict[str, int]:
        tally = self.history.snapshot()
        return {"transactions committed": tally.get("committed", 0),
                "transactions aborted": tally.get("aborted", 0) + tally.get("aborted on purpose", 0),
                "transactions unknown": tally.get("unknown", 0),
                "records acknowledged": tally.get(f"acked {TOPIC}", 0),
                "records polled": tally.get("records polled", 0),
                "records copied": tally.get(f"acked {OUT_TOPIC}", 0),
                "group generations": self.recorder.generations.get(GROUP, 0),
                "copier generations": self.recorder.generations.get(COPY_GROUP, 0),
                "batch records": tally.get(f"acked {BATCH_TOPIC}", 0),
                "half messages sent": len(self.recorder.rmq_sent),
                "check-backs sent": self.recorder.rmq_checks_sent,
                "check-backs via another node": self.recorder.rmq_checks_via_peer,
                "half messages discarded": self.recorder.rmq_discards,
                "records read uncommitted": len(self.recorder.uncommitted),
                "read uncommitted, never committed": self._uncommitted_never_committed,
                "bit flips applied": self._flips["bit flips applied"]}

    # ------------------------------------------------------------ faults

    def crash(self, node: str) -> None:
        """The node loses power: its memory is gone, and so is whatever it wrote to its own logs without an
        fsync to the logs only it has open (as if on a disk of its own; a torn tail may survive, drawn from the
        seed).
        A plain kill -9 keeps unsynced pages in the operating system's cache: this is the harder case."""
        self._powered_off.add(node)
        self._waking.discard(node)
        elsewhere = {log.directory for name, other in self.sim_nodes.items() if name not in self._powered_off
                     for log in other.logs.open_logs()}  # a crashed node's logs died with it
        # a log another node has open too (a new owner, or a stale one still holding it) is left alone: in the
        # shared data directory its pages are that node's as much as this one's
        directories = sorted(log.directory for log in self.sim_nodes[node].logs.open_logs()
                             if log.directory not in elsewhere)
        for line in self.disk.crash(under=directories):
            self.recorder.note(node, f"power loss: {line}")
        self.control.went_down(int(node[1:]), self.world.now_ms)

    def restart(self, node: str) -> None:
        self._powered_off.discard(node)
        self.control.came_back(int(node[1:]))
        self.sim_nodes[node].start()

    def pause(self, node: str) -> None:
        self.control.went_down(int(node[1:]), self.world.now_ms)

    def resume(self, node: str) -> None:
        self.control.came_back(int(node[1:]))
        # A real node serves what reaches it the moment it wakes and notices a takeover only at its own next
        # probe (and lets go of its logs one by one), while its peers may already send clients back to it:
        # that window, drawn per wake-up.
        delay = self._wake_rng.randint(0, 2 * MEMBERSHIP_TICK_MS)
        self._waking.add(node)
        self.network.set_timer(node, delay, self._woken, node, label="reconcile")

    def _woken(self, node: str) -> None:
        self._waking.discard(node)
        self.sim_nodes[node].reconcile()

    def flip_bit(self, node: str, rng: random.Random) -> None:
        """One bit of a file the node keeps beside its logs flips: a sealed segment's saved index, a producer-
        state snapshot or a coordinator shard's snapshot. Each is derived from the segments and carries a
        CRC-32C, so the flip must be caught when the file is next read (the segment is scanned, the snapshot set
        aside for an older one and more of the log) and change nothing else; every invariant stays in force. Segments and claim files are not flipped: txnsim keeps one copy of them, so
        a flip there is data lost by design (docs/simulator.md)."""
        candidates = []
        for log in sorted(self.sim_nodes[node].logs.open_logs(), key=lambda log: (log.topic, log.partition)):
            for name in self.disk.list_dir(log.directory):
                path = log.directory / name
                if name.endswith(FLIPPABLE_SUFFIXES) and self.disk.size(path):
                    candidates.append(path)
        if not candidates:
            self._flips["bit flips with nothing to flip"] += 1
            self.recorder.note(node, "bitflip: no saved index or snapshot to flip yet")
            return
        path = rng.choice(candidates)
        position, bit = rng.randrange(self.disk.size(path)), rng.randrange(8)
        self.disk.flip_bit(path, position, bit)
        self._flips["bit flips applied"] += 1
        self.recorder.note(node, f"bitflip: bit {bit} of byte {position} of {path.parent.name}/{path.name}")

    def slow_fsync(self, node: str, extra_ms: int) -> None:
        self.sim_nodes[node].io.extra_fsync_ms = extra_ms

    def quiesce(self) -> None:
        for producer in self.producers:
            producer.stopped = True
        for member in [*self.members, *self.copiers]:
            member.stopped = True
        self.query.stopped = True
        for rmq in self.rmq_producers:
            rmq.stopped = True

    # ------------------------------------------------------------ liveness

    def _membership_tick(self) -> None:
        now = self.world.now_ms
        view = self.control.next_view(now, self.network.actors.state)
        if view is not None:
            self.network._trace.record(now, "membership", "world", "*", f"live {sorted(view)}")
            for i, name in enumerate(self.nodes()):
                if i in view and name not in self._waking:  # a node just woken reconciles on its own time
                    self.network.set_timer(name, 0, self.sim_nodes[name].reconcile, label="reconcile")
        self.world.after(MEMBERSHIP_TICK_MS, self._membership_tick)
