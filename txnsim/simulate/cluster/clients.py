"""Simulated clients: transactional producers and consumer group members, as small state machines.

They speak the nodes' protocol (the same request messages as txnsim's producer and consumer) over the
simulated network and record what they did and saw in a chaos History, so the run ends with the
anomaly names `txnsim chaos` reports. Each value written is unique in the run, and each record names
its transaction in the chaos-txn header, as in `txnsim chaos`.

The producer keeps Kafka's rules that matter here: one open transaction per transactional id, a
partition added before its first write (by an AddPartitionsToTxn of its own, or, for the producers with
`implicit_add` as txnsim's own producer does, by the first write's leader: KIP-890 part 2), sequence
numbers per partition (a retried batch keeps its
sequence, so a duplicate is recognised), transactions V2 (EndTxn answers the next epoch), and an
EndTxn retried after a timeout at the same epoch. A produce that times out twice makes it abort: its
first send may still arrive late, after the transaction ended, which is how KAFKA-17754's hanging
and torn transactions begin.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from producer.error_policy import Action, classify_coordinator_error, classify_produce_error
from proto import consumer_protocol
from proto import records as codec
from proto import txnsim_pb2 as pb
from proto.errors import ERRORS_BY_CODE, UnknownServerError, for_code
from proto.structs import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from txnsim.chaos.history import TXN_HEADER, Outcome
from txnsim.simulate.cluster.shape import TOPIC, shard_of_group
from txnsim.simulate.network import TIMED_OUT

if TYPE_CHECKING:
    from txnsim.simulate.cluster.roles import ClientCluster

REQUEST_TIMEOUT_MS = 1_000
RETRY_BACKOFF_MS = 20
TRANSACTION_TIMEOUT_MS = 3_000


def _error_name(code: int) -> str:
    return ERRORS_BY_CODE.get(code, UnknownServerError).name


def produce_action(code: int) -> Action:
    """What txnsim's producer does with a partition's answer (producer/error_policy.py), by its wire code."""
    return classify_produce_error(for_code(code))


def coordinator_action(code: int) -> Action:
    """What txnsim's producer does with a coordinator's answer (producer/error_policy.py), by its wire code."""
    return classify_coordinator_error(for_code(code))


#: the producer's actions that send the same request again
RETRY = (Action.RETRY, Action.REFRESH_AND_RETRY)


class TxnProducer:
    """One transactional id's producer: init, then transactions of a few partitions each, forever."""

    def __init__(self, name: str, transactional_id: str, model: ClientCluster, rng: random.Random, *,
                 implicit_add: bool = False) -> None:
        self.name = name
        self.implicit_add = implicit_add
        self.tid = transactional_id
        self.model = model
        self.net = model.network
        self.rng = rng
        self.producer_id = -1
        self.epoch = -1
        self.sequences: dict[TopicPartition, int] = {}
        self.txn = ""
        self.count = 0
        self.stopped = False

    # ------------------------------------------------------------ plumbing

    def _call(self, node: int, request: Any, on_reply: Callable[[Any], None]) -> None:
        self.net.call(self.name, f"n{node}", request, REQUEST_TIMEOUT_MS, on_reply)

    def _later(self, work: Callable[..., None], *args: Any) -> None:
        self.net.set_timer(self.name, RETRY_BACKOFF_MS, work, *args, label=work.__name__)

    def _coordinator(self) -> int:
        return self.model.control.owner_now(TRANSACTION_STATE_TOPIC, self.model.control.shard_of(self.tid))

    # ------------------------------------------------------------ the transaction loop

    def start(self) -> None:
        self.net.set_timer(self.name, self.rng.randint(1, 50), self.init, label="init")

    def init(self) -> None:
        if self.stopped:
            return
        request = pb.InitProducerIdRequest(transactional_id=self.tid, transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                                           producer_id=-1, producer_epoch=-1)

        def answered(response: Any) -> None:
            if response is TIMED_OUT or response.error_code:
                return self._later(self.init)
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
            self.sequences.clear()
            self.begin()

        self._call(self._coordinator(), request, answered)

    def begin(self) -> None:
        if self.stopped:
            return
        self.count += 1
        self.txn = f"{self.name}/{self.count}"
        self.model.history.begun(self.txn, self.name)
        partitions = self.model.control.data_partitions
        chosen = sorted(self.rng.sample(partitions, self.rng.randint(1, min(3, len(partitions)))))
        if self.implicit_add:
            return self.produce(chosen)
        self.add(chosen)

    def add(self, chosen: list[TopicPartition]) -> None:
        request = pb.AddPartitionsToTxnRequest(
            transactional_id=self.tid, producer_id=self.producer_id, producer_epoch=self.epoch,
            partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in chosen])

        def answered(response: Any) -> None:
            if response is TIMED_OUT:
                return self._later(self.add, chosen)
            code = response.error_code or next((r.error_code for r in response.results if r.error_code), 0)
            if code == 0:
                return self.produce(chosen)
            if coordinator_action(code) in RETRY:
                return self._later(self.add, chosen)
            # fatal, or abortable with nothing written: a new instance (InitProducerId) ends what is open
            self.model.history.ended(self.txn, Outcome.ABORTED)
            self._later(self.init)

        self._call(self._coordinator(), request, answered)

    def produce(self, chosen: list[TopicPartition]) -> None:
        pending = {tp: 0 for tp in chosen}  # attempts so far
        failed: list[str] = []
        batches = {tp: self._batch(tp) for tp in chosen}

        def send(tp: TopicPartition) -> None:
            pending[tp] += 1
            records, values = batches[tp]
            part = pb.PartitionRecords(topic=tp.topic, partition=tp.partition, records=records)
            request = pb.ProduceRequest(transactional_id=self.tid, acks=-1, timeout_ms=REQUEST_TIMEOUT_MS,
                                        add_partitions=self.implicit_add, partitions=[part])
            owner = self.model.control.owner_now(tp.topic, tp.partition)
            self._call(owner, request, lambda response: answered(tp, values, response))

        def answered(tp: TopicPartition, values: list[int], response: Any) -> None:
            if response is not TIMED_OUT:
                result = response.partitions[0]
                if result.error_code == 0:
                    for i, value in enumerate(values):
                        self.model.history.sent(self.name, self.txn, tp.topic, tp.partition, value,
                                                result.base_offset + i)
                    del pending[tp]
                    return finish()
                action = produce_action(result.error_code)
                # SUCCESS (a duplicate of a batch already written) is given up too: its offsets are not known
                if action not in RETRY or pending[tp] >= 3:
                    failed.append("FATAL" if action is Action.FATAL else _error_name(result.error_code))
                    del pending[tp]
                    return finish()
            elif pending[tp] >= 2:  # the first send may still arrive, late: give up and abort
                failed.append("TIMED_OUT")
                del pending[tp]
                return finish()
            self._later(send, tp)

        def finish() -> None:
            if pending:
                return
            self.end(commit=not failed and self.rng.random() < 0.8, fatal="FATAL" in failed)

        for tp in chosen:
            send(tp)

    def _batch(self, tp: TopicPartition) -> tuple[bytes, list[int]]:
        values = [self.model.control.next_value() for _ in range(self.rng.randint(1, 3))]
        now = self.net.now(self.name)
        header = ((TXN_HEADER, self.txn.encode()),)
        records = [(now, None, str(v).encode(), header) for v in values]
        sequence = self.sequences.get(tp, 0)
        self.sequences[tp] = sequence + len(values)
        batch = codec.encode_batch(records, producer_id=self.producer_id, producer_epoch=self.epoch,
                                   base_sequence=sequence, transactional=True)
        return batch, values

    def end(self, *, commit: bool, fatal: bool = False, retried: bool = False) -> None:
        if fatal:  # this instance is fenced: a new one (InitProducerId) aborts what it left open
            self.model.history.ended(self.txn, Outcome.ABORTED)
            return self._later(self.init)
        if commit and not retried:
            self.model.history.commit_started(self.txn)
        request = pb.EndTxnRequest(transactional_id=self.tid, producer_id=self.producer_id,
                                   producer_epoch=self.epoch, committed=commit)

        def answered(response: Any) -> None:
            if response is TIMED_OUT:
                return self._later(lambda: self.end(commit=commit, retried=True))
            if response.error_code == 0:
                self.model.history.ended(self.txn, Outcome.COMMITTED if commit else Outcome.ABORTED,
                                         on_purpose=not commit)
                self.producer_id, self.epoch = response.producer_id, response.producer_epoch
                self.sequences.clear()
                return self.begin()
            action = coordinator_action(response.error_code)
            if action in RETRY:
                return self._later(lambda: self.end(commit=commit, retried=True))
            if action is Action.ABORTABLE and commit:  # the commit was refused: the transaction is aborted
                return self._later(lambda: self.end(commit=False, retried=True))
            # fatal, or an abort refused: a new instance (InitProducerId) ends what is open; after a retried
            # commit, the first EndTxn may have decided it, and a later answer cannot say which way
            self.model.history.ended(self.txn, Outcome.UNKNOWN if (retried and commit) else Outcome.ABORTED)
            self._later(self.init)

        self._call(self._coordinator(), request, answered)


class GroupMember:
    """A consumer group member speaking Kafka's classic protocol (eager: it gives up its partitions before it
    rejoins), the range assignor as leader, heartbeats; now and then it leaves and comes back, so the group
    rebalances. What it holds is reported to the model, which checks no partition has two owners in one
    generation."""

    HEARTBEAT_MS = 100
    SESSION_TIMEOUT_MS = 1_000

    def __init__(self, name: str, group_id: str, model: ClientCluster, rng: random.Random) -> None:
        self.name = name
        self.group_id = group_id
        self.model = model
        self.net = model.network
        self.rng = rng
        self.member_id = ""
        self.generation = -1
        self.owned: list[TopicPartition] = []
        self.last_heartbeat_ok = 0
        self.stopped = False
        self.present = True
        self._session = 0  # bumped on every (re)join: answers to an older session's requests are ignored

    def _coordinator(self) -> int:
        return self.model.control.owner_now(CONSUMER_OFFSETS_TOPIC, shard_of_group(self.group_id))

    def _call(self, request: Any, on_reply: Callable[[Any], None]) -> None:
        session = self._session
        self.net.call(self.name, f"n{self._coordinator()}", request, REQUEST_TIMEOUT_MS,
                      lambda response: on_reply(response) if session == self._session else None)

    def start(self) -> None:
        self.net.set_timer(self.name, self.rng.randint(1, 50), self.join, label="join")
        self.net.set_timer(self.name, self.rng.randint(1_000, 4_000), self.leave_or_return, label="churn")

    def revoke(self) -> None:
        if self.owned:
            self.model.recorder.released(self.group_id, self.name)
        self.owned = []
        self.on_revoked()

    def on_assigned(self) -> None:
        """A subclass's hook: `owned` was just assigned in `generation`."""

    def on_revoked(self) -> None:
        """A subclass's hook: the member gave up what it owned (eager: before it rejoins)."""

    def join(self) -> None:
        if self.stopped or not self.present:
            return
        self._session += 1
        self.revoke()
        request = pb.JoinGroupRequest(
            group_id=self.group_id, member_id=self.member_id, client_id=self.name,
            session_timeout_ms=self.SESSION_TIMEOUT_MS, rebalance_timeout_ms=self.SESSION_TIMEOUT_MS,
            protocol_type="consumer", require_known_member_id=True,
            protocols=[pb.GroupProtocol(name="range", metadata=consumer_protocol.encode_subscription([TOPIC]))])

        def answered(response: Any) -> None:
            if response is TIMED_OUT:
                return self._later(self.join)
            name = _error_name(response.error_code) if response.error_code else ""
            if name == "MEMBER_ID_REQUIRED":
                self.member_id = response.member_id
                return self.join()
            if name in ("UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID"):
                self.member_id = ""
            if name:
                return self._later(self.join)
            self.member_id, self.generation = response.member_id, response.generation_id
            assignments = []
            if response.leader_id == self.member_id:
                members = sorted(m.member_id for m in response.member_list)
                for i, member in enumerate(members):
                    mine = [tp for j, tp in enumerate(self.model.control.data_partitions) if j % len(members) == i]
                    assignments.append(pb.SyncGroupAssignment(member_id=member,
                                                              assignment=consumer_protocol.encode_assignment(mine)))
            self.sync(assignments)

        self._call(request, answered)

    def sync(self, assignments: list[Any]) -> None:
        request = pb.SyncGroupRequest(group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                                      protocol_type="consumer", protocol_name="range", assignments=assignments)

        def answered(response: Any) -> None:
            if response is TIMED_OUT or response.error_code:
                if response is not TIMED_OUT and _error_name(response.error_code) in ("UNKNOWN_MEMBER_ID",):
                    self.member_id = ""
                return self._later(self.join)
            self.owned = consumer_protocol.decode_assignment(response.assignment_bytes)
            self.model.recorder.holding(self.group_id, self.name, self.generation, self.owned, self.SESSION_TIMEOUT_MS)
            self.on_assigned()
            self.last_heartbeat_ok = self.net.now(self.name)
            self.net.set_timer(self.name, self.HEARTBEAT_MS, self.heartbeat, self._session, label="heartbeat")

        self._call(request, answered)

    def heartbeat(self, session: int) -> None:
        if session != self._session or self.stopped or not self.present:
            return
        if self.net.now(self.name) - self.last_heartbeat_ok > self.SESSION_TIMEOUT_MS:
            return self.join()  # cut off longer than its session: the coordinator has surely counted it out
        request = pb.HeartbeatRequest(group_id=self.group_id, generation_id=self.generation, member_id=self.member_id)

        def answered(response: Any) -> None:
            if response is not TIMED_OUT:
                name = _error_name(response.error_code) if response.error_code else ""
                if name in ("REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"):
                    if name == "UNKNOWN_MEMBER_ID":
                        self.member_id = ""
                    return self.join()
                if not name:
                    self.last_heartbeat_ok = self.net.now(self.name)
            self.net.set_timer(self.name, self.HEARTBEAT_MS, self.heartbeat, session, label="heartbeat")

        self._call(request, answered)

    def leave_or_return(self) -> None:
        if self.stopped:
            return
        if self.present:
            self.present = False
            self._session += 1
            self.revoke()
            if self.member_id:
                self.net.call(self.name, f"n{self._coordinator()}",
                              pb.LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id),
                              REQUEST_TIMEOUT_MS, lambda response: None)
            self.member_id = ""
        else:
            self.present = True
            self.join()
        self.net.set_timer(self.name, self.rng.randint(1_000, 4_000), self.leave_or_return, label="churn")

    def _later(self, work: Callable[..., None], *args: Any) -> None:
        self.net.set_timer(self.name, RETRY_BACKOFF_MS * 5, work, *args, label=work.__name__)
