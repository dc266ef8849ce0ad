"""The simulated cluster's invariant recorder: what the nodes and clients report they did, checked as they
report it and after every step (TigerBeetle keeps its state checker apart from its cluster the same way).

Invariants after every step are cheap: per partition, LSO <= HW and neither moving backwards, and at most
one writer per log and leader epoch. Groups are checked as they assign (one owner per generation, the join
barrier) and commit (offsets never go back); RocketMQ check-backs as they are sent (check_max, the check
interval). The final checks (model.py, final_read.py) read what the nodes left on the disk.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from coordinator.rocketmq.log_format import HalfRecord
from partitions import PartitionLog
from proto import consumer_protocol
from proto.structs import TRANSACTION_STATE_TOPIC, ConsumerRecord, TopicPartition
from txnsim.simulate.cluster.shape import CHECK_INTERVAL_MS, CHECK_MAX
from txnsim.simulate.model import Violation
from txnsim.simulate.network import Envelope


class InvariantRecorder:
    """Checks what the actors report; `check()` hands over what broke since it was last asked."""

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
    def __init__(self, record: Callable[[str, str, str], None]) -> None:
        #: writes a line to the run's trace: (kind, actor, text)
        self._record = record
        self._lso: dict[TopicPartition, int] = {}
        self._hw: dict[TopicPartition, int] = {}
        self._epoch: dict[TopicPartition, int] = {}
        self._writers: dict[tuple[str, int, int], str] = {}
        self._dirty: dict[tuple[str, int], PartitionLog] = {}
        self._violations: list[Violation] = []
        #: (group, partition) -> the highest offset the group has committed so far
        self._committed: dict[tuple[str, TopicPartition], int] = {}
        #: (group, generation) -> partition -> the member it was assigned to
        self._assignments: dict[tuple[str, int], dict[TopicPartition, str]] = {}
        #: group -> its latest generation
        self.generations: dict[str, int] = {}
        #: (group, partition) -> the members consuming it now -> their session (= rebalance) timeout
        self._holders: dict[tuple[str, TopicPartition], dict[str, int]] = {}
        #: (group, member) -> (coordinator node, its clock) when it last accepted the member's heartbeat or sync
        self._heard: dict[tuple[str, str], tuple[str, int]] = {}
        #: the half messages the RocketMQ producers sent, by message id
        self.rmq_sent: list[str] = []
        #: transaction id -> check count -> the check time its record carries
        self._rmq_checks: dict[str, dict[int, int]] = {}
        self.rmq_checks_sent = 0
        self.rmq_checks_via_peer = 0
        self.rmq_discards = 0
        #: transaction id -> how many checks of it were sent
        self._rmq_sent_checks: dict[str, int] = {}
        #: (partition, offset) -> the value the read_uncommitted reader was handed there
        self.uncommitted: dict[tuple[TopicPartition, int], bytes | None] = {}

    def check(self) -> list[Violation]:
        """What went wrong since the last step (the Model's check after every step)."""
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

    def assigned(self, group: str, generation: int, assignment: bytes, waiter: Envelope, node: str,
                 now_ms: int) -> None:
        """Coordinator `node` answered a SyncGroup of `generation` with this assignment, to `waiter.src`, at
        `now_ms` on its own clock."""
        self.generations[group] = max(generation, self.generations.get(group, 0))
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
            before = self.uncommitted.setdefault(key, record.value)
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

    def rmq_message_sent(self, message_id: str) -> None:
        self.rmq_sent.append(message_id)

    def rmq_discarded(self, tid: str) -> None:
        self.rmq_discards += 1
        self.note("world", f"{tid} discarded after {CHECK_MAX} checks")

    def rmq_check_sent(self, node: str, tid: str, record: HalfRecord, *, via_peer: bool = False) -> None:
        """A node sends a check-back of `tid`, counted in `record` (its count and check time, on the node's clock),
        to a stream of its own or through a peer holding one (`via_peer`)."""
        self.rmq_checks_sent += 1
        self.rmq_checks_via_peer += via_peer
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
        self._record("assigned", member, f"{group} generation {generation}: {sorted(p.partition for p in partitions)}")
        for tp in partitions:
            self._holders.setdefault((group, tp), {})[member] = timeout_ms

    def released(self, group: str, member: str) -> None:
        self._record("revoked", member, group)
        for (held_group, _tp), holders in self._holders.items():
            if held_group == group:
                holders.pop(member, None)

    def appended(self, node: str, log: PartitionLog, first: int, last: int) -> None:
        self._dirty[(log.topic, log.partition)] = log
        key = (log.topic, log.partition, log.leader_epoch)
        writer = self._writers.setdefault(key, node)
        if writer != node:
            self._violations.append(Violation(
                "one-writer-per-epoch", f"{log.topic}-{log.partition} epoch {log.leader_epoch} written by {writer} "
                                        f"and {node}"))

    def ownership_changed(self, node: str, topic: str, partition: int, epoch: int) -> None:
        self._record("owner", node, f"{topic}-{partition} epoch {epoch}")

    def note(self, node: str, text: str) -> None:
        self._record("note", node, text)
