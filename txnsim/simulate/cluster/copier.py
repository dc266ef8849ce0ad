"""A simulated read-process-write copier: Kafka's exactly-once loop (KIP-447) as a small state machine.

It is a member of the consumer group `sim-copy` (the classic protocol of GroupMember), reads the
partitions it is assigned read_committed, and copies each batch it reads to the same partition of
`sim-out` in one transaction that also commits the group's offsets (AddOffsetsToTxn, TxnOffsetCommit
with its member id and generation, EndTxn; a copier with `implicit_add`, as txnsim's own producer under
transactions V2, sends neither AddPartitionsToTxn nor AddOffsetsToTxn: the produce and the
TxnOffsetCommit have the partition's leader and the group coordinator add them). On every new assignment and after every failed
transaction it starts again from the group's committed offsets, fetched with require_stable (a
commit awaiting its marker answers UNSTABLE_OFFSET_COMMIT: wait) and only once its own transaction in
flight has ended, as a real consumer rebalances inside poll(), between transactions. A zombie - a copier whose
generation is over - is fenced by its generation at TxnOffsetCommit.

What it copied goes into the chaos History, so the run's checker finds a copy made twice (duplicate)
or an input record below the committed offset without its copy (lost-write).
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from consumer.fetcher import PartitionRecords
from producer.error_policy import Action
from proto import records as codec
from proto import txnsim_pb2 as pb
from proto.errors import CorruptMessageError
from proto.structs import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, IsolationLevel, TopicPartition
from txnsim.chaos.history import TXN_HEADER, Outcome, parse_value
from txnsim.simulate.cluster.clients import (
    REQUEST_TIMEOUT_MS,
    RETRY,
    TRANSACTION_TIMEOUT_MS,
    GroupMember,
    coordinator_action,
    produce_action,
)
from txnsim.simulate.cluster.shape import OUT_TOPIC, shard_of_group
from txnsim.simulate.network import TIMED_OUT

if TYPE_CHECKING:
    from txnsim.simulate.cluster.roles import ClientCluster

COPY_GROUP = "sim-copy"
POLL_MS = 25
#: records copied in one transaction at most
MAX_COPY = 10


class Copier(GroupMember):
    """One copier: a group member and a transactional producer (transactional id per instance, KIP-447)."""

    def __init__(self, name: str, model: ClientCluster, rng: random.Random, *, implicit_add: bool = False) -> None:
        super().__init__(name, COPY_GROUP, model, rng)
        self.implicit_add = implicit_add
        self.tid = f"copy-{name}"
        self.producer_id = -1
        self.epoch = -1
        self.ready = False
        self.busy = False
        self.count = 0
        self.positions: dict[TopicPartition, int] = {}
        self._assignment = 0  # bumped on every assignment and revocation: older answers are ignored
        self._next = 0

    # ------------------------------------------------------------ plumbing

    def _txn_coordinator(self) -> int:
        return self.model.control.owner_now(TRANSACTION_STATE_TOPIC, self.model.control.shard_of(self.tid))

    def _group_coordinator(self) -> int:
        return self.model.control.owner_now(CONSUMER_OFFSETS_TOPIC, shard_of_group(self.group_id))

    def _send(self, node: int, request: Any, on_reply: Any) -> None:
        self.net.call(self.name, f"n{node}", request, REQUEST_TIMEOUT_MS, on_reply)

    def _after(self, delay_ms: int, work: Any, *args: Any) -> None:
        self.net.set_timer(self.name, delay_ms, work, *args, label=getattr(work, "__name__", "copier"))

    # ------------------------------------------------------------ life

    def start(self) -> None:
        super().start()
        self._after(self.rng.randint(1, 50), self.init)
        self._after(POLL_MS, self.tick)

    def init(self) -> None:
        self.ready = False
        if self.stopped:
            return
        request = pb.InitProducerIdRequest(transactional_id=self.tid, transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                                           producer_id=-1, producer_epoch=-1)

        def answered(response: Any) -> None:
            if response is TIMED_OUT or response.error_code:
                return self._after(50, self.init)
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
            self.ready = True

        self._send(self._txn_coordinator(), request, answered)

    def on_assigned(self) -> None:
        self._assignment += 1
        self.positions = {}
        self.fetch_offsets(self._assignment)

    def on_revoked(self) -> None:
        self._assignment += 1
        self.positions = {}

    def fetch_offsets(self, assignment: int) -> None:
        """Where the group left each assigned partition (require_stable: after any pending commit)."""
        if assignment != self._assignment or not self.owned:
            return
        if self.busy:  # a consumer rebalances inside poll(), between transactions: finish this one first
            return self._after(20, self.fetch_offsets, assignment)
        owned = list(self.owned)
        request = pb.OffsetFetchRequest(group_id=self.group_id, require_stable=True, partitions=[
            pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in owned])

        def answered(response: Any) -> None:
            if assignment != self._assignment:
                return
            if response is TIMED_OUT or response.error_code or any(r.error_code for r in response.results):
                return self._after(50, self.fetch_offsets, assignment)
            positions = {TopicPartition(r.topic, r.partition): max(0, r.offset) for r in response.results}
            for tp, offset in sorted(positions.items()):
                self.model.history.seeked(self.name, tp, offset, "committed offset")
            self.positions = positions

        self._send(self._group_coordinator(), request, answered)

    def tick(self) -> None:
        if not self.stopped or self.busy:
            self._after(POLL_MS, self.tick)
        if self.busy or self.stopped or not self.ready or not self.positions:
            return
        partitions = sorted(self.positions)
        tp = partitions[self._next % len(partitions)]
        self._next += 1
        self.busy = True
        self.fetch(tp, self._assignment)

    # ------------------------------------------------------------ read, then copy in one transaction

    def fetch(self, tp: TopicPartition, assignment: int) -> None:
        position = self.positions[tp]
        request = pb.FetchRequest(isolation_level=IsolationLevel.READ_COMMITTED, max_wait_ms=0, min_bytes=1,
                                  partitions=[pb.FetchPartition(topic=tp.topic, partition=tp.partition,
                                                                fetch_offset=position)])

        def answered(response: Any) -> None:
            if assignment != self._assignment or response is TIMED_OUT or response.partitions[0].error_code:
                self.busy = False
                return
            part = response.partitions[0]
            records = PartitionRecords(tp, position, part.records, isolation_level=IsolationLevel.READ_COMMITTED,
                                       aborted_transactions=[(a.producer_id, a.first_offset)
                                                             for a in part.aborted_transactions])
            try:
                taken = records.take(MAX_COPY)
            except CorruptMessageError as exc:
                self.model.recorder.corrupt_read(self.name, tp, position, exc)
                self.busy = False
                return
            if not taken:
                if records.next_fetch_offset > position:  # only markers or aborted records: step over them
                    self.positions[tp] = records.next_fetch_offset
                self.busy = False
                return
            self.model.history.polled(self.name, taken)
            self.copy(tp, [r.value for r in taken], taken[-1].offset + 1, assignment)

        self._send(self.model.control.owner_now(tp.topic, tp.partition), request, answered)

    def copy(self, tp: TopicPartition, values: list[bytes | None], next_offset: int, assignment: int) -> None:
        self.count += 1
        txn = f"{self.name}/{self.count}"
        out = TopicPartition(OUT_TOPIC, tp.partition)
        generation, member_id = self.generation, self.member_id
        self.model.history.begun(txn, self.name)

        def failed(fatal: bool) -> None:
            self.abort(txn, fatal, assignment)

        def add_partition() -> None:
            request = pb.AddPartitionsToTxnRequest(
                transactional_id=self.tid, producer_id=self.producer_id, producer_epoch=self.epoch,
                partitions=[pb.TopicPartitionRef(topic=out.topic, partition=out.partition)])

            def answered(response: Any) -> None:
                code = _code(response)
                if code == 0:
                    return add_offsets()
                failed(code != -1 and coordinator_action(code) is Action.FATAL)

            self._send(self._txn_coordinator(), request, answered)

        def add_offsets() -> None:
            request = pb.AddOffsetsToTxnRequest(transactional_id=self.tid, producer_id=self.producer_id,
                                                producer_epoch=self.epoch, group_id=self.group_id)

            def answered(response: Any) -> None:
                code = _code(response)
                if code == 0:
                    return produce()
                failed(code != -1 and coordinator_action(code) is Action.FATAL)

            self._send(self._txn_coordinator(), request, answered)

        def produce() -> None:
            now = self.net.now(self.name)
            header = ((TXN_HEADER, txn.encode()),)
            batch = codec.encode_batch([(now, None, value, header) for value in values], producer_id=self.producer_id,
                                       producer_epoch=self.epoch, base_sequence=0, transactional=True)
            part = pb.PartitionRecords(topic=out.topic, partition=out.partition, records=batch)
            request = pb.ProduceRequest(transactional_id=self.tid, acks=-1, timeout_ms=REQUEST_TIMEOUT_MS,
                                        add_partitions=self.implicit_add, partitions=[part])

            def answered(response: Any) -> None:
                if response is TIMED_OUT or response.partitions[0].error_code:
                    code = -1 if response is TIMED_OUT else response.partitions[0].error_code
                    return failed(code != -1 and produce_action(code) is Action.FATAL)
                base = response.partitions[0].base_offset
                for i, value in enumerate(values):
                    parsed = parse_value(value)
                    if parsed is not None:
                        self.model.history.sent(self.name, txn, out.topic, out.partition, parsed, base + i)
                commit_offsets()

            self._send(self.model.control.owner_now(out.topic, out.partition), request, answered)

        def commit_offsets() -> None:
            request = pb.TxnOffsetCommitRequest(
                transactional_id=self.tid, group_id=self.group_id, producer_id=self.producer_id,
                producer_epoch=self.epoch, generation_id=generation, member_id=member_id,
                offsets=[pb.OffsetEntry(topic=tp.topic, partition=tp.partition, offset=next_offset)],
                add_partitions=self.implicit_add)

            def answered(response: Any) -> None:
                code = _code(response)
                if code == 0:
                    return end()
                failed(code != -1 and coordinator_action(code) is Action.FATAL)

            self._send(self._group_coordinator(), request, answered)

        def end(retried: bool = False) -> None:
            if not retried:
                self.model.history.commit_started(txn)
            request = pb.EndTxnRequest(transactional_id=self.tid, producer_id=self.producer_id,
                                       producer_epoch=self.epoch, committed=True)

            def answered(response: Any) -> None:
                if response is TIMED_OUT:
                    return self._after(20, end, True)
                if response.error_code == 0:
                    self.model.history.ended(txn, Outcome.COMMITTED)
                    self.producer_id, self.epoch = response.producer_id, response.producer_epoch
                    if assignment == self._assignment:
                        self.positions[tp] = next_offset
                    self.busy = False
                    return
                action = coordinator_action(response.error_code)
                if action in RETRY:
                    return self._after(20, end, True)
                if action is Action.ABORTABLE:  # the commit was refused: abort, start again from the offsets
                    return self.abort(txn, False, assignment)
                # fatal: after a retry the first EndTxn may have decided it, and the answer cannot say which way
                self.model.history.ended(txn, Outcome.UNKNOWN if retried else Outcome.ABORTED)
                self.busy = False
                self.positions = {}
                self.fetch_offsets(assignment)
                return self.init()

            self._send(self._txn_coordinator(), request, answered)

        if self.implicit_add:
            produce()
        else:
            add_partition()

    def abort(self, txn: str, fatal: bool, assignment: int) -> None:
        """Give the transaction up; start again from the committed offsets."""
        def done() -> None:
            self.model.history.ended(txn, Outcome.ABORTED)
            self.busy = False
            self.positions = {}
            self.fetch_offsets(assignment)

        if fatal:  # fenced: a new instance (InitProducerId) aborts what this one left open
            done()
            return self.init()
        request = pb.EndTxnRequest(transactional_id=self.tid, producer_id=self.producer_id,
                                   producer_epoch=self.epoch, committed=False)

        def answered(response: Any) -> None:
            if response is TIMED_OUT:
                return self._after(20, self.abort, txn, fatal, assignment)
            if response.error_code == 0:
                self.producer_id, self.epoch = response.producer_id, response.producer_epoch
                return done()
            if coordinator_action(response.error_code) in RETRY:
                return self._after(20, self.abort, txn, fatal, assignment)
            done()  # fatal, or the abort refused: a new instance (InitProducerId) ends what is open
            self.init()

        self._send(self._txn_coordinator(), request, answered)


def _code(response: Any) -> int:
    """The error of a coordinator answer: -1 for no answer, else the first error code, 0 for none."""
    if response is TIMED_OUT:
        return -1
    code = int(response.error_code)
    for result in getattr(response, "results", ()):
        code = code or int(getattr(result, "error_code", 0))
    return code
