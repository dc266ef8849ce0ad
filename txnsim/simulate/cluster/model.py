"""The cluster under `txnsim simulate`: three nodes on the real cores, transactional producers and a
read_committed consumer, on one simulated disk, network and clock.

Ownership is the real placement (coordinator/placement.py) over a liveness view: a crashed node is
declared dead after a detection delay, a paused one once its pause outlasts the session timeout, as the
nodes' heartbeats would say. Each live node then reconciles (takes its shards, lets go of the others),
and the disk's leader-epoch claims fence whoever was cut off, exactly as on the real data directory.
A paused node keeps its stale view until it resumes: that is the paused-owner case.

Invariants after every step are cheap: per partition, LSO <= HW and neither moving backwards, and at most
one writer per log and leader epoch. The final checks read every partition read_committed from the disk
and hand the history to `txnsim chaos`'s checker (lost-write, unseen, G1a aborted read, duplicate,
precommitted read, ...), and every partition must be stable (no transaction left hanging). RocketMQ half
messages (rmq_client.py, and the nodes' own half-message coordinators) are checked for their check counts and intervals as they are sent,
and at the end for delivery: committed exactly once (or discarded), rolled back never, nothing undecided.
"""
from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

from coordinator.placement import NO_OWNER, Placement
from coordinator.rocketmq.log_format import HalfRecord, Storage
from partitions import PartitionLog
from partitions.faulty_storage import FaultyStorage
from partitions.producer_snapshot import SUFFIX as SNAPSHOT_SUFFIX
from partitions.segment import INDEX_SUFFIX
from proto import consumer_protocol
from proto.hashing import partition_for
from proto.planted_bugs import DESCRIPTIONS, PlantedBug
from proto.structs import (
    CONSUMER_OFFSETS_TOPIC,
    HALF_TOPIC,
    INTERNAL_TOPICS,
    TRANSACTION_STATE_TOPIC,
    ConsumerRecord,
    IsolationLevel,
    TopicPartition,
)
from txnsim.chaos.checker import check
from txnsim.chaos.history import History
from txnsim.simulate.actors import ActorState
from txnsim.simulate.cluster import final_read
from txnsim.simulate.cluster.batch_client import BATCH_TOPIC, SparkQuery
from txnsim.simulate.cluster.clients import TOPIC, GroupMember, TxnProducer
from txnsim.simulate.cluster.copier import COPY_GROUP, OUT_TOPIC, Copier
from txnsim.simulate.cluster.node import DATA_ROOT, SimNode
from txnsim.simulate.cluster.readers import Reader
from txnsim.simulate.cluster.rmq_client import RMQ_IN_PLACE_TOPIC, RMQ_PARTITIONS, RMQ_TOPICS, RmqProducer
from txnsim.simulate.cluster.shape import CHECK_INTERVAL_MS, CHECK_MAX, OFFSETS_SHARDS
from txnsim.simulate.model import Model, Report, Violation
from txnsim.simulate.network import Envelope, Network
from txnsim.simulate.world import World

PARTITIONS = 4
TXN_SHARDS = 4
NODES = 3
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
#: how long the cluster takes to declare a crashed node dead (heartbeats stop)
DETECTION_MS = 300
MEMBERSHIP_TICK_MS = 50


class ClusterModel(Model):
    name = "cluster"
    description = ("3 nodes on the real transaction coordinator core and partition logs, 3 transactional producers, "
                   "a read_committed consumer, consumer groups, copiers, RocketMQ half messages with check-back")
    BUGS: ClassVar[dict[str, str]] = {bug.value: description for bug, description in DESCRIPTIONS.items()}
    WORKLOADS: ClassVar[dict[str, str]] = {
        "transactions": "transactional producers committing and aborting across 4 partitions; a read_committed "
                        "consumer; a consumer group of 3 members that leave and come back; 2 exactly-once "
                        "copiers (read-process-write with transactional offsets) in a group of their own; 2 "
                        "RocketMQ producers sending half messages, ended or left to the check-back",
    }
    INVARIANTS: ClassVar[dict[str, str]] = {
        "lso-within-hw": "a partition's last stable offset never passes its high watermark",
        "lso-monotonic": "a partition's last stable offset never moves backwards",
        "hw-monotonic": "a partition's high watermark never moves backwards (nothing acknowledged is lost)",
        "one-writer-per-epoch": "at most one node writes a log at a given leader epoch",
        "no-hanging-transaction": "after the run settles, every partition is stable (LSO = HW)",
        "lost-write": "acknowledged committed record missing although later offsets passed it",
        "unseen": "acknowledged committed record the final read_committed read never returned",
        "G1a": "read_committed returned a record of an aborted transaction",
        "precommitted-read": "read_committed returned a record before its transaction's commit was asked for",
        "duplicate": "the same value at more than one offset",
        "group-one-owner-per-generation": "a group never assigns one partition to two members of a generation",
        "group-rebalance-barrier": "a partition goes to a new member only once every member that held it gave it "
                                   "up, or was silent for its session or rebalance timeout (the join barrier)",
        "committed-offsets-monotonic": "a group's committed offset of a partition never moves backwards, "
                                       "failovers included",
        "no-corrupt-read": "a fetch never returns bytes that do not decode",
        "uncommitted-read-durable": "a record a read_uncommitted consumer was handed is in the log at the same "
                                    "offset, with the same value, after the run settles: nothing is exposed "
                                    "before it is durable",
        "no-stale-read": "a read_committed consumer is never told a partition ends before where it was told it "
                         "ended earlier (an LSO gone back, or its position called out of range): no answer from a "
                         "leader that was taken over",
        "batch-exactly-once": "each task of a Spark-style batch is visible once: one attempt's output, never two",
        "batch-atomic": "a batch is visible whole (every task) or not at all",
        "rmq-check-max": "a half message is checked back at most check_max times, crashes and failovers included",
        "rmq-check-interval": "a half message is checked at most once per check interval (the times its counts "
                              "record)",
        "rmq-committed-delivered-once": "a message whose local transaction committed is on its real topic exactly "
                                        "once after the run settles, unless discarded after check_max checks (then "
                                        "it is in the discard log)",
        "rmq-rollback-never-delivered": "a message whose local transaction rolled back (or never ran) never reaches "
                                        "its real topic",
        "rmq-undecided-resolved": "after the run settles, every half message is decided or discarded and every "
                                  "committed one copied",
    }
    session_timeout_ms = 1_000

    def __init__(self, *, bug: str | None = None, workload: str | None = None) -> None:
        super().__init__(bug=bug, workload=workload)
        #: the planted bug the nodes' code is built with (None: the system as shipped)
        self.planted = PlantedBug(bug) if bug is not None else None
        self.txn_shards = TXN_SHARDS
        self.placement = Placement(tuple(range(NODES)))
        self.data_partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        self.fsync_ms = 1
        self._values = 0
        self._pid_blocks = 0
        self.live_view: frozenset[int] = frozenset(range(NODES))
        self._down_since: dict[int, int] = {}
        self._lso: dict[TopicPartition, int] = {}
        self._hw: dict[TopicPartition, int] = {}
        self._epoch: dict[TopicPartition, int] = {}
        self._writers: dict[tuple[str, int, int], str] = {}
        self._dirty: dict[tuple[str, int], PartitionLog] = {}
        self._violations: list[Violation] = []
        self.notes: list[str] = []
        #: (group, partition) -> the highest offset the group has committed so far
        self._committed: dict[tuple[str, TopicPartition], int] = {}
        self.out_partitions = [TopicPartition(OUT_TOPIC, p) for p in range(PARTITIONS)]
        self.batch_partitions = [TopicPartition(BATCH_TOPIC, p) for p in range(PARTITIONS)]
        self._member_ids = 0
        #: (group, generation) -> partition -> the member it was assigned to
        self._assignments: dict[tuple[str, int], dict[TopicPartition, str]] = {}
        self._generations: dict[str, int] = {}
        #: (group, partition) -> the members consuming it now -> their session (= rebalance) timeout
        self._holders: dict[tuple[str, TopicPartition], dict[str, int]] = {}
        #: (group, member) -> (coordinator node, its clock) when it last accepted the member's heartbeat or sync
        self._heard: dict[tuple[str, str], tuple[str, int]] = {}
        #: the RocketMQ producers' local database (message id -> its transaction's state): it outlives them
        self.rmq_local: dict[str, str] = {}
        self._rmq_sent: list[str] = []
        #: transaction id -> check count -> the check time its record carries
        self._rmq_checks: dict[str, dict[int, int]] = {}
        self._rmq_checks_sent = 0
        self._rmq_checks_via_peer = 0
        self._rmq_discards = 0
        #: transaction id -> how many checks of it were sent
        self._rmq_sent_checks: dict[str, int] = {}
        self._half_producer_ids = 0
        #: nodes crashed and not yet restarted: their old LogManagers hold nothing a power loss must spare
        self._powered_off: set[str] = set()
        #: what the bitflip faults did
        self._flips: Counter[str] = Counter()
        #: (partition, offset) -> the value the read_uncommitted reader was handed there
        self._uncommitted: dict[tuple[TopicPartition, int], bytes | None] = {}
        #: of those, how many the final read_committed read does not return (aborted, or never decided)
        self._uncommitted_never_committed = 0

    # ------------------------------------------------------------ the Model interface

    def nodes(self) -> Sequence[str]:
        return [f"n{i}" for i in range(NODES)]

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
        if self._violations:
            noted, self._violations = self._violations, []
            return noted
        if not self._dirty:
            return []
        found: list[Violation] = []
        for (topic, partition), log in self._dirty.items():
            if topic == TRANSACTION_STATE_TOPIC:
                continue
            tp = TopicPartition(topic, partition)
            if log.leader_epoch < self._epoch.get(tp, -1):
                continue  # a stale owner's log (it answers a duplicate from memory): the newer one is the log
            self._epoch[tp] = log.leader_epoch
            hw, lso = log.high_watermark, log.last_stable_offset
            if lso > hw:
                found.append(Violation("lso-within-hw", f"{tp}: LSO {lso} > HW {hw}"))
            if lso < self._lso.get(tp, 0):
                found.append(Violation("lso-monotonic", f"{tp}: LSO went back from {self._lso[tp]} to {lso}"))
            if hw < self._hw.get(tp, 0):
                found.append(Violation("hw-monotonic", f"{tp}: HW went back from {self._hw[tp]} to {hw}"))
            self._lso[tp] = max(lso, self._lso.get(tp, 0))
            self._hw[tp] = max(hw, self._hw.get(tp, 0))
        self._dirty.clear()
        return found

    def finish(self, world: World) -> Report:
        # one more node opens every log and reads what the nodes left; of the log's planted bugs it has only
        # the one about opening
        reader = final_read.open_reader(self.disk, NODES + 1, self.planted if self.planted in _OPENING_BUGS else None,
                                        now_ms=lambda: world.now_ms)
        final, extra = final_read.read_topics(reader, [*self.data_partitions, *self.out_partitions,
                                                       *self.batch_partitions], world.now_ms)
        extra += final_read.batch_violations(final.records.get(BATCH_TOPIC, []))
        extra += final_read.half_message_violations(reader, self._rmq_sent, self.rmq_local)
        extra += final_read.uncommitted_read_violations(reader, self.data_partitions, self._uncommitted)
        committed = {(TopicPartition(r.topic, r.partition), r.offset) for r in final.records.get(TOPIC, [])}
        self._uncommitted_never_committed = sum(key not in committed for key in self._uncommitted)
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
                "group generations": self._generations.get(GROUP, 0),
                "copier generations": self._generations.get(COPY_GROUP, 0),
                "batch records": tally.get(f"acked {BATCH_TOPIC}", 0),
                "half messages sent": len(self._rmq_sent),
                "check-backs sent": self._rmq_checks_sent,
                "check-backs via another node": self._rmq_checks_via_peer,
                "half messages discarded": self._rmq_discards,
                "records read uncommitted": len(self._uncommitted),
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
            self.note(node, f"power loss: {line}")
        self._down_since[int(node[1:])] = self.world.now_ms

    def restart(self, node: str) -> None:
        self._powered_off.discard(node)
        self._down_since.pop(int(node[1:]), None)
        self.sim_nodes[node].start()

    def pause(self, node: str) -> None:
        self._down_since[int(node[1:])] = self.world.now_ms

    def resume(self, node: str) -> None:
        self._down_since.pop(int(node[1:]), None)
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
            self.note(node, "bitflip: no saved index or snapshot to flip yet")
            return
        path = rng.choice(candidates)
        position, bit = rng.randrange(self.disk.size(path)), rng.randrange(8)
        self.disk.flip_bit(path, position, bit)
        self._flips["bit flips applied"] += 1
        self.note(node, f"bitflip: bit {bit} of byte {position} of {path.parent.name}/{path.name}")

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

    # ------------------------------------------------------------ what nodes and clients ask of the cluster

    def partitions_for(self, topic: str) -> int | None:
        if topic in (TOPIC, OUT_TOPIC, BATCH_TOPIC):
            return PARTITIONS
        if topic in RMQ_TOPICS:
            return RMQ_PARTITIONS
        return OFFSETS_SHARDS if topic == CONSUMER_OFFSETS_TOPIC else None

    def shard_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, TXN_SHARDS)

    def owner_now(self, topic: str, partition: int) -> int:
        """Who a client's fresh metadata names as the owner (any live node if none)."""
        owner = self.placement.owner(topic, partition, self.live_view)
        return owner if owner != NO_OWNER else 0

    def may_cut_off(self, node_id: int) -> bool:
        return node_id not in self.live_view or self.planted is PlantedBug.NO_FENCING

    def next_value(self) -> int:
        self._values += 1
        return self._values

    def reserve_producer_ids(self) -> tuple[int, int]:
        """A block of producer ids for one node (the cluster's durable block counter)."""
        self._pid_blocks += 1
        return self._pid_blocks * 1000, (self._pid_blocks + 1) * 1000

    def new_member_id(self, client_id: str, instance_id: str | None) -> str:
        """Member ids from a counter, not a uuid: the same seed gives the same ids."""
        self._member_ids += 1
        return f"{instance_id or client_id}-{self._member_ids}"

    def assigned(self, group: str, generation: int, assignment: bytes, waiter: Envelope, node: str,
                 now_ms: int) -> None:
        """Coordinator `node` answered a SyncGroup of `generation` with this assignment, to `waiter.src`, at
        `now_ms` on its own clock."""
        self._generations[group] = max(generation, self._generations.get(group, 0))
        owners = self._assignments.setdefault((group, generation), {})
        member = waiter.src
        for tp in consumer_protocol.decode_assignment(assignment) if assignment else ():
            holder = owners.setdefault(tp, member)
            if holder != member:
                self._violations.append(Violation(
                    "group-one-owner-per-generation",
                    f"group {group} generation {generation} gave {tp} to {holder} and to {member}"))
            self._check_barrier(group, generation, tp, member, node, now_ms)
        self._heard[(group, member)] = (node, now_ms)

    def _check_barrier(self, group: str, generation: int, tp: TopicPartition, member: str, node: str,
                       now_ms: int) -> None:
        """Kafka's join barrier: a partition goes to a new owner only once every member that held it gave it up
        (eager: before it rejoins), or fell silent for its session or rebalance timeout and was removed. What a
        member last said is timed on the coordinator's clock; after a coordinator failover it is not compared."""
        for other, timeout_ms in self._holders.get((group, tp), {}).items():
            heard = self._heard.get((group, other))
            if other == member or heard is None or heard[0] != node:
                continue
            if now_ms - heard[1] < timeout_ms:
                self._violations.append(Violation(
                    "group-rebalance-barrier",
                    f"group {group} generation {generation} gave {tp} to {member} while {other}, heard from "
                    f"{now_ms - heard[1]} ms before (its timeout is {timeout_ms} ms), still held it"))

    def member_heard(self, group: str, member: str, node: str, now_ms: int) -> None:
        """Coordinator `node` accepted a heartbeat of `member` at `now_ms` on its own clock."""
        self._heard[(group, member)] = (node, now_ms)

    def corrupt_read(self, reader: str, tp: TopicPartition, offset: int, error: Exception) -> None:
        """A consumer's fetch from `offset` returned bytes that do not decode: what two writers do to one log."""
        self._violations.append(Violation("no-corrupt-read", f"{reader} fetching {tp} at {offset}: {error}"))

    def uncommitted_polled(self, reader: str, records: Sequence[ConsumerRecord]) -> None:
        """The read_uncommitted reader was handed `records`; an offset handed out twice must hold one value."""
        for record in records:
            key = (TopicPartition(record.topic, record.partition), record.offset)
            before = self._uncommitted.setdefault(key, record.value)
            if before != record.value:
                self._violations.append(Violation(
                    "uncommitted-read-durable", f"{reader} was handed {key[0]}@{record.offset} twice with different "
                                                f"values ({before!r}, then {record.value!r}): the first was lost"))

    def stale_read(self, reader: str, tp: TopicPartition, node: str, told: int, answer: str) -> None:
        """A fetch answered that `tp` ends before `told`, where an earlier answer said it ended."""
        self._violations.append(Violation("no-stale-read", f"{reader}: {node} answered {answer} for {tp}, which an "
                                                           f"earlier fetch said ends at {told} or later"))

    def offset_committed(self, group: str, tp: TopicPartition, offset: int) -> None:
        """A group coordinator made `offset` the group's committed offset of `tp` (a commit, or a load)."""
        before = self._committed.get((group, tp), -1)
        if offset < before:
            self._violations.append(Violation(
                "committed-offsets-monotonic", f"group {group}'s committed offset of {tp} went back from {before} "
                                               f"to {offset}"))
        self._committed[(group, tp)] = max(before, offset)

    def half_producer_id(self) -> int:
        """A producer id for a half shard's copies, or for one message stored in place (the cluster's durable
        allocation)."""
        self._half_producer_ids += 1
        return 5_000_000 + self._half_producer_ids

    @staticmethod
    def half_storage(topic: str) -> Storage:
        """How a topic stores its half messages (its `half.message.storage` setting)."""
        return Storage.KAFKA if topic == RMQ_IN_PLACE_TOPIC else Storage.ROCKETMQ

    def rmq_message_sent(self, message_id: str) -> None:
        self._rmq_sent.append(message_id)

    def rmq_discarded(self, tid: str) -> None:
        self._rmq_discards += 1
        self.note("world", f"{tid} discarded after {CHECK_MAX} checks")

    def rmq_check_sent(self, node: str, tid: str, record: HalfRecord, *, via_peer: bool = False) -> None:
        """A node sends a check-back of `tid`, counted in `record` (its count and check time, on the node's clock),
        to a stream of its own or through a peer holding one (`via_peer`)."""
        self._rmq_checks_sent += 1
        self._rmq_checks_via_peer += via_peer
        checks = self._rmq_checks.setdefault(tid, {})
        sent = self._rmq_sent_checks[tid] = self._rmq_sent_checks.get(tid, 0) + 1
        if sent > CHECK_MAX:
            self._violations.append(Violation(
                "rmq-check-max", f"{tid} checked {sent} times (at most {CHECK_MAX}): {node} sent it as check "
                                 f"{record.check_times}"))
        before = checks.get(record.check_times - 1)  # the previous count's check, if it was sent
        if before is not None and 0 <= record.last_check_ms - before < CHECK_INTERVAL_MS:  # < 0: a clock went back
            self._violations.append(Violation(
                "rmq-check-interval", f"{tid} checked at {record.last_check_ms} ms (check {record.check_times}, "
                                      f"{node}), {record.last_check_ms - before} ms after check "
                                      f"{record.check_times - 1}"))
        checks[record.check_times] = record.last_check_ms

    def holding(self, group: str, member: str, generation: int, partitions: list[TopicPartition],
                timeout_ms: int) -> None:
        """`member` now consumes `partitions` (its session and rebalance timeouts: `timeout_ms`)."""
        self.network._trace.record(self.world.now_ms, "assigned", member, "*",
                                   f"{group} generation {generation}: {sorted(p.partition for p in partitions)}")
        for tp in partitions:
            self._holders.setdefault((group, tp), {})[member] = timeout_ms

    def released(self, group: str, member: str) -> None:
        self.network._trace.record(self.world.now_ms, "revoked", member, "*", group)
        for (held_group, _tp), holders in self._holders.items():
            if held_group == group:
                holders.pop(member, None)

    def acknowledged_before_fsync(self, ends: dict[PartitionLog, int]) -> bool:
        """Whether a planted bug acknowledges these writes before their fsync (sim_io.py asks): with
        ack-before-fsync, every write to a data partition; with ack-group-before-fsync, every write of a group
        coordinator (its membership records and offsets); with half-ack-before-fsync, every write of a half
        message (stored, or counted for a check)."""
        if self.planted is PlantedBug.ACK_BEFORE_FSYNC:
            return any(plog.topic not in INTERNAL_TOPICS for plog in ends)
        if self.planted is PlantedBug.ACK_GROUP_BEFORE_FSYNC:
            return any(plog.topic == CONSUMER_OFFSETS_TOPIC for plog in ends)
        if self.planted is PlantedBug.HALF_ACK_BEFORE_FSYNC:
            return any(plog.topic == HALF_TOPIC for plog in ends)
        return False

    def appended(self, node: str, log: PartitionLog, first: int, last: int) -> None:
        self._dirty[(log.topic, log.partition)] = log
        key = (log.topic, log.partition, log.leader_epoch)
        writer = self._writers.setdefault(key, node)
        if writer != node:
            self._violations.append(Violation(
                "one-writer-per-epoch", f"{log.topic}-{log.partition} epoch {log.leader_epoch} written by {writer} "
                                        f"and {node}"))

    def ownership_changed(self, node: str, topic: str, partition: int, epoch: int) -> None:
        self.network._trace.record(self.world.now_ms, "owner", node, "*", f"{topic}-{partition} epoch {epoch}")

    def note(self, node: str, text: str) -> None:
        self.network._trace.record(self.world.now_ms, "note", node, "*", text)

    # ------------------------------------------------------------ liveness

    def _membership_tick(self) -> None:
        now = self.world.now_ms
        actors = self.network.actors
        live = set()
        for i, name in enumerate(self.nodes()):
            state = actors.state(name)
            since = self._down_since.get(i)
            if state is ActorState.UP or since is None:
                live.add(i)
            elif state is ActorState.PAUSED and now - since <= self.session_timeout_ms:
                live.add(i)
            elif state is ActorState.CRASHED and now - since <= DETECTION_MS:
                live.add(i)
        view = frozenset(live)
        if view != self.live_view:
            self.live_view = view
            self.network._trace.record(now, "membership", "world", "*", f"live {sorted(view)}")
            for i, name in enumerate(self.nodes()):
                if i in view and name not in self._waking:  # a node just woken reconciles on its own time
                    self.network.set_timer(name, 0, self.sim_nodes[name].reconcile, label="reconcile")
        self.world.after(MEMBERSHIP_TICK_MS, self._membership_tick)
