"""A simulated node's RocketMQ half-message shards: the real HalfShard core (coordinator/rocketmq/half_shard.py)
driven by simulated requests, timers and fsyncs, as coordinator.py and shard_writer.py drive it on a node.

Each shard's three logs (half, OP, discard) are real PartitionLogs on the simulated disk, opened with a new
leader epoch and replayed with the node's own rule (coordinator/rocketmq/shard_load.py) on take-over. What
the driver keeps from the node:
- every write is made at once and fsynced when the simulated fsync's time has passed (a power loss before
  then loses it); a half message is answered, and a decision's OP record installed, answered and carried
  out, only once durable. The core learns of a half message when it is written, not when durable as on
  a node (so that a retry of its send finds it), and a retry is answered only once the shard's writes so
  far are durable: a woken, fenced owner never answers from a write that cannot become durable;
- a due check is counted first: the message is appended again with count + 1, and only once that is
  durable is the check sent (one-way) to a producer of its group, through that producer's check-back stream
  if it is open to this node, else through a peer holding one (DeliverCheck: the peers are asked first, as
  coordinator/node.py's _find_producer does; if none holds one the check is not counted); after `check_max`
  checks the message goes to the discard log and is decided DISCARD, never delivered;
- a commit owes its copy to the real partition (the node's produce path, an idempotent batch whose
  sequence is fixed in the decision: coordinator/rocketmq/copies.py), then a DONE record;
- a message of a topic stored in place (Storage.KAFKA, coordinator/rocketmq/in_place.py) is written to its
  real partition as a one-message transaction once its registration is durable, verified by the partition
  with this shard, and answered once that write is acknowledged (written again for a retried send); its
  decision owes a COMMIT or ABORT marker, fenced by the shard's leader epoch, then a DONE record.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from coordinator.rocketmq import log_format
from coordinator.rocketmq.copies import copied, copies_owed, copy_batches, split_landed
from coordinator.rocketmq.half_shard import CheckAction, Decision, DueCheck, HalfShard, PendingHalf
from coordinator.rocketmq.in_place import in_place_batch, in_place_decisions, in_place_markers
from coordinator.rocketmq.log_format import HalfRecord, OpRecord, Resolution, Storage
from coordinator.rocketmq.shard_load import load_half_shard
from coordinator.txn.metadata import Owed
from partitions import AppendOrigin, PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import (
    InvalidRequestError,
    InvalidTransactionIdError,
    KafkaError,
    NotCoordinatorError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
    TransactionAbortableError,
    code_of,
)
from proto.hashing import partition_for
from proto.planted_bugs import PlantedBug
from proto.structs import CHECK_MAX_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, TopicPartition
from txnsim.simulate.network import TIMED_OUT, Envelope, Network

if TYPE_CHECKING:
    from txnsim.simulate.cluster.node import SimNode

HALF_SHARDS = 2
#: short intervals, so that a 10 s run sees checks, failovers between them, and discards
CHECK_INTERVAL_MS = 500
CHECK_IMMUNITY_MS = 300
CHECK_MAX = 5
#: how often a node looks for due checks and owed copies
CHECK_TICK_MS = 100
COPY_RETRY_MS = 200
COPY_TIMEOUT_MS = 500
#: a producer's check-back stream is forgotten when it has not been heard of for this many check ticks (1 s: it
#: went away); counted in ticks, not on the node's clock, which a clock jump moves
STREAM_TIMEOUT_TICKS = 10
#: for how many ticks a peer's answer that it holds a stream of a group is used before asking again
ROUTE_TTL_TICKS = 5
#: requests between nodes wait this long for an answer
PEER_TIMEOUT_MS = 500
HALF_REQUESTS = (pb.SendHalfMessageRequest, pb.EndHalfTransactionRequest, pb.VerifyHalfWriteRequest,
                 pb.CheckBackRequest, pb.DeliverCheckRequest)
_RESOLUTIONS = {pb.RESOLUTION_COMMIT: Resolution.COMMIT, pb.RESOLUTION_ROLLBACK: Resolution.ROLLBACK,
                pb.RESOLUTION_UNKNOWN: None}


#: how a decision's requester hears that it is durable (None) or failed
Answer = Callable[[KafkaError | None], None]
#: how a send is answered (its envelope, and any retry waiting for it)
Reply = Callable[[Message], None]


def _nothing() -> None:
    """The work of an fsync whose writes were already answered (the planted bug half-ack-before-fsync)."""


def shard_of_producer_group(group: str) -> int:
    return partition_for(group, HALF_SHARDS)


def _ignore(response: object) -> None:
    """The answer to a delivered check: the count is already made, so nothing waits for it."""


def _answer_end(net: Network, env: Envelope) -> Answer:
    def answer(error: KafkaError | None) -> None:
        if error is None:
            net.reply(env, pb.EndHalfTransactionResponse())
        else:
            net.reply(env, pb.EndHalfTransactionResponse(error_code=code_of(error), error_message=str(error)))
    return answer


@dataclass(frozen=True)
class _Route:
    """Where a check of a group goes: a producer's stream on this node, or a peer node holding one."""

    producer: str = ""
    peer: str = ""


#: a route not known yet: the peers are being asked whether they hold a stream of the group
_ASKING = _Route()


@dataclass
class _Shard:
    core: HalfShard
    half_log: PartitionLog
    op_log: PartitionLog
    discard_log: PartitionLog
    #: real partitions a copy is being written to (one round at a time per partition)
    copying: set[TopicPartition] = field(default_factory=set)
    #: transactions whose in-place marker is being written
    marking: set[str] = field(default_factory=set)
    #: (group, message id) -> the send being registered and written now, and the retries waiting for its outcome
    sending: dict[tuple[str, str], list[Envelope]] = field(default_factory=dict)
    #: when (world time) the last write of this shard is durable: an fsync covers every earlier write, so
    #: writes become durable in the order they were made, a slow one holding back those after it
    synced_at_ms: int = 0
    #: per log of the shard: the end of what is written but not yet fsynced
    unsynced: dict[str, tuple[PartitionLog, int]] = field(default_factory=dict)


class SimHalfMessages:
    """The half shards of one simulated node (volatile: a crash loses them, their logs keep them)."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.model = node.model
        self.net = node.net
        self.shards: dict[int, _Shard] = {}
        #: check ticks so far: the clock of the stream and route bookkeeping below
        self.ticks = 0
        #: the check-back streams open to this node: group -> producer -> the tick it was last heard of
        self.streams: dict[str, dict[str, int]] = {}
        #: group -> a peer holding a stream of it, and the tick until which that answer is used
        self.routes: dict[str, tuple[str, int]] = {}
        #: group -> the tick until which no node is known to hold a stream of it (its due checks are not counted)
        self.absent: dict[str, int] = {}
        #: groups whose peers are being asked
        self.probing: set[str] = set()
        self._turn = 0
        self.net.set_timer(node.name, CHECK_TICK_MS, self._tick, label="half-check")

    # ------------------------------------------------------------ ownership

    def reconcile(self) -> bool:
        """Let go of shards that moved away or whose logs the node closed; take (open, replay) those that moved
        here. False if one could not be taken yet."""
        node = self.node
        wanted = {s for s in range(HALF_SHARDS) if node.owner(HALF_TOPIC, s) == node.node_id}
        for shard_id, shard in sorted(self.shards.items()):
            held = [node.logs.get(t, shard_id) for t in (HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TOPIC)]
            if shard_id not in wanted or held != [shard.half_log, shard.op_log, shard.discard_log]:
                del self.shards[shard_id]
        taken = True
        for shard_id in sorted(wanted - set(self.shards)):
            taken = self._take(shard_id) and taken
        return taken

    def _take(self, shard_id: int) -> bool:
        logs = []
        for topic in (HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TOPIC):
            try:
                log = self.node.logs.get(topic, shard_id) or self.node.logs.open_as_leader(
                    topic, shard_id, self.model.may_cut_off)
            except KafkaError as error:
                self.model.note(self.node.name, f"half shard {shard_id} not taken: {type(error).__name__}")
                return False
            logs.append(log)
            self.model.ownership_changed(self.node.name, topic, shard_id, log.leader_epoch)
        half_log, op_log, discard_log = logs
        core = load_half_shard(shard_id, CHECK_INTERVAL_MS, CHECK_MAX, half_log, op_log, discard_log)
        self.shards[shard_id] = _Shard(core, half_log, op_log, discard_log)
        self.model.note(self.node.name, f"half shard {shard_id} loaded: {len(core.pending)} undecided, "
                                        f"{len(core.unfinished)} owing their copy")
        return True

    def _owned(self, shard_id: int) -> _Shard:
        shard = self.shards.get(shard_id)
        if shard is None:
            raise NotCoordinatorError(f"[NOT_COORDINATOR] {self.node.name} does not own half-message shard {shard_id}")
        return shard

    def _still(self, shard_id: int, shard: _Shard) -> bool:
        return self.shards.get(shard_id) is shard

    def _append(self, shard: _Shard, log: PartitionLog, rows: list[Any]) -> int:
        """Write now, fsync later (_after_fsync): the base offset of what was written."""
        appended = log.append(log_format.encode(rows), origin=AppendOrigin.COORDINATOR, wait_durable=False)
        self.model.appended(self.node.name, log, appended.base_offset, appended.last_offset)
        shard.unsynced[log.topic] = (log, appended.last_offset + 1)
        return appended.base_offset

    def _later(self, work: Any, *args: Any, delay_ms: int, label: str) -> None:
        self.net.set_timer(self.node.name, delay_ms, work, *args, label=label)

    def _after_fsync(self, shard: _Shard, work: Any, *args: Any) -> None:
        """Run `work` once the shard's latest write is durable (in write order); not at all if the fsync cannot
        be made (the shard's logs were fenced or closed: its next owner replays what is durable)."""
        now = self.model.world.now_ms
        shard.synced_at_ms = max(shard.synced_at_ms, now + self.node.fsync_ms)
        self._later(self._synced, shard, work, *args, delay_ms=shard.synced_at_ms - now, label="fsync")

    def _synced(self, shard: _Shard, work: Any, *args: Any) -> None:
        if self._sync(shard):
            work(*args)

    def _sync(self, shard: _Shard) -> bool:
        """The fsync's time has passed: every write of the shard so far becomes durable now (a power loss
        before this took them, unanswered). False if its logs no longer can be (fenced or closed)."""
        try:
            for log, end in shard.unsynced.values():
                log.make_durable(end)
        except KafkaError as error:  # fenced or closed: what it wrote stays unanswered, its next owner takes over
            self.model.note(self.node.name, f"half shard fsync failed: {type(error).__name__}")
            return False
        for log, end in shard.unsynced.values():
            self.model.appended(self.node.name, log, end - 1, end - 1)
        shard.unsynced.clear()
        return True

    # ------------------------------------------------------------ requests

    def receive(self, env: Envelope) -> None:
        message = env.message
        try:
            if isinstance(message, pb.SendHalfMessageRequest):
                self._send(env, message)
            elif isinstance(message, pb.EndHalfTransactionRequest):
                self._end(env, message)
            elif isinstance(message, pb.VerifyHalfWriteRequest):
                self._verify_write(env, message)
            elif isinstance(message, pb.CheckBackRequest):
                self._stream_open(env, message)
            elif isinstance(message, pb.DeliverCheckRequest):
                self._deliver_check(env, message)
        except KafkaError as error:
            response = {pb.SendHalfMessageRequest: pb.SendHalfMessageResponse,
                        pb.EndHalfTransactionRequest: pb.EndHalfTransactionResponse,
                        pb.VerifyHalfWriteRequest: pb.VerifyHalfWriteResponse}[type(message)]
            self.net.reply(env, response(error_code=code_of(error), error_message=str(error)))

    def _send(self, env: Envelope, req: pb.SendHalfMessageRequest) -> None:
        msg = req.message
        if not req.producer_group or not msg.message_id:
            raise InvalidRequestError("[INVALID_REQUEST] a simulated half message names its group and message id")
        shard_id = shard_of_producer_group(req.producer_group)
        shard = self._owned(shard_id)
        key = (req.producer_group, msg.message_id)
        if key in shard.sending:  # a retry while the first attempt is being written: its outcome is ours
            shard.sending[key].append(env)
            return
        stored = shard.core.find(req.producer_group, msg.message_id)
        if stored is not None:  # a retried send whose answer was lost: one half message, not two
            then = self._answer_sent
            if stored.record.storage is Storage.KAFKA and self.model.planted is not PlantedBug.IN_PLACE_RETRY_UNWRITTEN:
                then = self._write_again  # the previous owner may have died before it wrote it
            reply = functools.partial(self.net.reply, env)
            if shard.unsynced:  # the first send's write may not be durable yet: answer once it is (or never)
                self._after_fsync(shard, then, shard_id, shard, stored, reply)
            else:
                then(shard_id, shard, stored, reply)
            return
        now = self.node.now()
        storage = self.model.half_storage(msg.topic)
        record = HalfRecord(
            topic=msg.topic, partition=msg.partition, producer_group=req.producer_group, message_id=msg.message_id,
            key=msg.key if msg.HasField("key") else None, value=msg.value, user_headers=(), store_time_ms=now,
            check_immunity_ms=msg.check_immunity_ms or CHECK_IMMUNITY_MS, storage=storage,
            producer_id=self.model.half_producer_id() if storage is Storage.KAFKA else -1)
        offset = self._append(shard, shard.half_log, [log_format.encode_half(record, now)])
        pending = shard.core.stored(offset, record)
        shard.sending[key] = [env]
        reply = functools.partial(self._reply_sending, shard, key)
        then = self._write_in_place if storage is Storage.KAFKA else self._answer_sent
        if self.model.planted is PlantedBug.HALF_ACK_BEFORE_FSYNC:  # the planted bug: answered before its fsync
            then(shard_id, shard, pending, reply)
            self._after_fsync(shard, _nothing)
        else:
            self._after_fsync(shard, then, shard_id, shard, pending, reply)

    def _reply_sending(self, shard: _Shard, key: tuple[str, str], response: Message) -> None:
        """The first attempt's outcome, to it and to every retry that waited for it."""
        for env in shard.sending.pop(key, []):
            self.net.reply(env, response)

    def _answer_sent(self, shard_id: int, shard: _Shard, pending: PendingHalf, reply: Reply) -> None:
        reply(self._sent(shard_id, pending))

    def _write_again(self, shard_id: int, shard: _Shard, pending: PendingHalf, reply: Reply) -> None:
        self._write_in_place(shard_id, shard, pending, reply, first=False)

    def _write_in_place(self, shard_id: int, shard: _Shard, pending: PendingHalf, reply: Reply, *,
                        first: bool = True) -> None:
        """Storage.KAFKA: the message onto its real partition as a one-message transaction; the send is answered
        once that is acknowledged. If it fails the producer is told (its local transaction must not run) and,
        for the send that registered the message, the message is rolled back at once (an ABORT marker); a
        retried send never rolls back, as an earlier attempt of it may have been answered."""
        r = pending.record
        request = pb.ProduceRequest(
            transactional_id=log_format.half_transactional_id(shard_id), acks=-1, timeout_ms=COPY_TIMEOUT_MS,
            partitions=[pb.PartitionRecords(topic=r.topic, partition=r.partition, records=in_place_batch(r))])
        owner = self.model.owner_now(r.topic, r.partition)

        def answered(response: object) -> None:
            if response is TIMED_OUT:
                error: KafkaError = RequestTimedOutError(f"[REQUEST_TIMED_OUT] the in-place write of "
                                                         f"{pending.transaction_id} was not acknowledged")
                code, message = code_of(error), str(error)
            else:
                assert isinstance(response, pb.ProduceResponse)
                result = response.partitions[0] if response.partitions else response
                code, message = result.error_code, result.error_message
            if copied(code):
                return self._answer_sent(shard_id, shard, pending, reply)

            def failed(rollback_error: KafkaError | None = None) -> None:
                if rollback_error is None:
                    reply(pb.SendHalfMessageResponse(error_code=code, error_message=message))
                else:  # not rolled back: a retry finds the message undecided and writes it again
                    reply(pb.SendHalfMessageResponse(error_code=code_of(rollback_error),
                                                     error_message=str(rollback_error)))

            if not first or not self._still(shard_id, shard) or \
                    shard.core.find(r.producer_group, r.message_id) is not pending:
                return failed()
            outcome = shard.core.end(pending.transaction_id, Resolution.ROLLBACK, source="SERVER")
            if outcome.op is None:
                return failed()
            self.model.note(self.node.name, f"in-place write of {pending.transaction_id} failed ({message}): "
                                            "rolled back")
            # answered once the rollback is durable: only then may a retry store a new message in its place
            self._decide(shard_id, shard, outcome.op, failed)

        self.net.call(self.node.name, f"n{owner}", request, COPY_TIMEOUT_MS, answered)

    def _verify_write(self, env: Envelope, req: pb.VerifyHalfWriteRequest) -> None:
        """A partition asks before accepting an in-place write (KIP-890's first-write verification)."""
        shard = self._owned(req.shard)
        if not shard.core.may_write_in_place(req.producer_id, TopicPartition(req.topic, req.partition)):
            raise TransactionAbortableError(
                f"[TRANSACTION_ABORTABLE] producer {req.producer_id} has no undecided half message for "
                f"{req.topic}-{req.partition} in shard {req.shard}")
        self.net.reply(env, pb.VerifyHalfWriteResponse())

    @staticmethod
    def _sent(shard_id: int, pending: PendingHalf) -> pb.SendHalfMessageResponse:
        return pb.SendHalfMessageResponse(transaction_id=pending.transaction_id, message_id=pending.record.message_id,
                                          half_offset=pending.first_offset, shard=shard_id,
                                          storage=pending.record.storage.value)

    def _end(self, env: Envelope, req: pb.EndHalfTransactionRequest) -> None:
        parsed = log_format.parse_transaction_id(req.transaction_id)
        if parsed is None or parsed[0] >= HALF_SHARDS:
            raise InvalidTransactionIdError(f"[INVALID_TRANSACTION_ID] {req.transaction_id!r} is not a transaction id")
        if req.resolution not in _RESOLUTIONS:
            raise InvalidRequestError(f"[INVALID_REQUEST] unknown resolution {req.resolution}")
        resolution = _RESOLUTIONS[req.resolution]
        source = "SERVER_CHECK" if req.source == pb.SOURCE_SERVER_CHECK else "CLIENT"
        shard_id = parsed[0]
        shard = self._owned(shard_id)
        if resolution is Resolution.COMMIT and shard.core.copy_producer_id < 0:
            shard.core.copy_producer_id = self.model.half_producer_id()
        outcome = shard.core.end(req.transaction_id, resolution, source=source, producer_group=req.producer_group,
                                 message_id=req.message_id)
        if outcome.op is None:
            self.net.reply(env, pb.EndHalfTransactionResponse(already_decided=outcome.already_decided))
            return
        self._decide(shard_id, shard, outcome.op, _answer_end(self.net, env))

    def _decide(self, shard_id: int, shard: _Shard, op: OpRecord, answer: Answer | None) -> None:
        """Write the OP record; the decision is installed, answered and carried out once it is durable."""
        try:
            self._append(shard, shard.op_log, [log_format.encode_op(op, self.node.now())])
        except KafkaError as error:
            shard.core.decisions_failed([op])
            if answer is not None:
                answer(error)
            return
        self._after_fsync(shard, self._decided, shard_id, shard, op, answer)

    def _decided(self, shard_id: int, shard: _Shard, op: OpRecord, answer: Answer | None) -> None:
        if not self._still(shard_id, shard):
            if answer is not None:  # the next owner replays the OP record; the producer's retry hears of it
                answer(NotCoordinatorError(f"[NOT_COORDINATOR] half-message shard {shard_id} moved away"))
            return
        decision = shard.core.decided_durably(op)
        if answer is not None:
            answer(None)
        if decision.needs_effect:
            self._carry_out(shard_id, shard)

    # ------------------------------------------------------------ check-back

    def _tick(self) -> None:
        self.ticks += 1
        for shard_id, shard in list(self.shards.items()):
            self._check_shard(shard_id, shard)
            if shard.core.unfinished:
                self._carry_out(shard_id, shard)
        self.net.set_timer(self.node.name, CHECK_TICK_MS, self._tick, label="half-check")

    def _check_shard(self, shard_id: int, shard: _Shard) -> None:
        core, now = shard.core, self.node.now()
        due = core.due(now)
        discards = [d for d in due if d.action is CheckAction.DISCARD]
        checks: list[tuple[DueCheck, _Route]] = []
        for d in due:
            if d.action is not CheckAction.CHECK:
                continue
            route = self._route(d.record.producer_group)
            if route is None:
                core.unanswered(d.pending.transaction_id, now)
            elif route is not _ASKING:  # asking the peers: due again at the next tick
                checks.append((d, route))
        if discards:
            self._discard(shard_id, shard, [d.pending for d in discards], now)
        if not checks:
            return
        tids = [d.pending.transaction_id for d, _ in checks]
        core.counting(tids)
        if self.model.planted is PlantedBug.CHECK_COUNT_IN_MEMORY:
            # the planted bug: the count moves on in memory only; a crash or a failover starts it again
            for d, route in checks:
                pending = core.checked_durably(d.pending.transaction_id, d.pending.latest_offset, d.record)
                if pending is not None:
                    self._send_check(shard_id, pending, route)
            return
        try:
            base = self._append(shard, shard.half_log,
                                [log_format.encode_half(d.record, d.record.store_time_ms) for d, _ in checks])
        except KafkaError:
            core.count_failed(tids)
            return
        self._after_fsync(shard, self._counted, shard_id, shard, checks, base)

    def _counted(self, shard_id: int, shard: _Shard, checks: list[tuple[DueCheck, _Route]], base: int) -> None:
        if not self._still(shard_id, shard):
            return  # the next owner replays the counts
        for i, (d, route) in enumerate(checks):
            pending = shard.core.checked_durably(d.pending.transaction_id, base + i, d.record)
            if pending is not None:
                self._send_check(shard_id, pending, route)

    def _send_check(self, shard_id: int, pending: PendingHalf, route: _Route) -> None:
        r = pending.record
        self.model.rmq_check_sent(self.node.name, pending.transaction_id, r, via_peer=bool(route.peer))
        check = pb.TransactionCheck(
            transaction_id=pending.transaction_id, producer_group=r.producer_group, check_times=r.check_times,
            shard=shard_id, half_offset=pending.latest_offset,
            message=pb.HalfMessage(topic=r.topic, partition=r.partition, value=r.value or b"",
                                   message_id=r.message_id))
        if route.producer:
            self.net.send(self.node.name, route.producer, check)
        else:  # one-way as far as the count goes: a check lost on the way is asked again next interval
            self.net.call(self.node.name, route.peer, pb.DeliverCheckRequest(check=check), PEER_TIMEOUT_MS,
                          _ignore)

    # ------------------------------------------------------------ check-back: streams and routes (DeliverCheck)

    def _stream_open(self, env: Envelope, req: pb.CheckBackRequest) -> None:
        """A producer's check-back stream is (still) open here; the echo stands for the stream's headers."""
        self.streams.setdefault(req.producer_group, {})[env.src] = self.ticks
        self.net.reply(env, req)

    def _local_producer(self, group: str) -> str | None:
        """A producer of `group` whose stream is open here, round-robin (as coordinator/rocketmq/producers.py)."""
        live = sorted(p for p, seen in self.streams.get(group, {}).items() if self.ticks - seen < STREAM_TIMEOUT_TICKS)
        if not live:
            return None
        self._turn += 1
        return live[self._turn % len(live)]

    def _route(self, group: str) -> _Route | None:
        """Where a check of `group` goes: a stream here, else a peer found by asking (DeliverCheck, probe only);
        None when no node holds one (the check is not counted), _ASKING while the peers are being asked."""
        producer = self._local_producer(group)
        if producer is not None:
            return _Route(producer=producer)
        route = self.routes.get(group)
        if route is not None and self.ticks < route[1]:
            return _Route(peer=route[0])
        if self.ticks < self.absent.get(group, 0):
            return None
        if group not in self.probing:
            self._probe(group)
        return _ASKING

    def _probe(self, group: str) -> None:
        peers = [f"n{i}" for i in sorted(self.node.view) if i != self.node.node_id]
        if not peers:
            self.absent[group] = self.ticks + 2  # through the next tick, which marks the due checks unanswered
            return
        self.probing.add(group)
        waiting = [len(peers)]

        def answered(peer: str, response: object) -> None:
            waiting[0] -= 1
            if isinstance(response, pb.DeliverCheckResponse) and response.delivered and group in self.probing:
                self.probing.discard(group)
                self.routes[group] = (peer, self.ticks + ROUTE_TTL_TICKS)
            elif waiting[0] == 0 and group in self.probing:
                self.probing.discard(group)
                self.absent[group] = self.ticks + 2  # through the next tick, which marks the due checks unanswered

        probe = pb.DeliverCheckRequest(check=pb.TransactionCheck(producer_group=group), probe_only=True)
        for peer in peers:
            self.net.call(self.node.name, peer, probe, PEER_TIMEOUT_MS, functools.partial(answered, peer))

    def _deliver_check(self, env: Envelope, req: pb.DeliverCheckRequest) -> None:
        """A peer asks whether a producer of the group has its stream here, or hands a check to pass on."""
        producer = self._local_producer(req.check.producer_group)
        if producer is not None and not req.probe_only:
            self.net.send(self.node.name, producer, req.check)
        self.net.reply(env, pb.DeliverCheckResponse(delivered=producer is not None))

    def _discard(self, shard_id: int, shard: _Shard, discarded: list[PendingHalf], now: int) -> None:
        """Too many checks: to TRANS_CHECK_MAX_TIME_TOPIC first, then decided DISCARD (never delivered)."""
        rows = [log_format.encode_half(dataclasses.replace(p.record, first_offset=p.first_offset), now)
                for p in discarded]
        try:
            self._append(shard, shard.discard_log, rows)
        except KafkaError:
            return
        for pending in discarded:
            op = shard.core.discard(pending.transaction_id)
            if op is not None:
                self.model.rmq_discarded(pending.transaction_id)
                self._decide(shard_id, shard, op, None)

    # ------------------------------------------------------------ effects: copies to the real topic

    def _carry_out(self, shard_id: int, shard: _Shard) -> None:
        for tp, decisions in copies_owed(shard.core.unfinished.values()).items():
            if tp not in shard.copying:
                shard.copying.add(tp)
                self._copy(shard_id, shard, tp, decisions)
        marking = [d for d in in_place_decisions(shard.core.unfinished.values())
                   if d.transaction_id not in shard.marking]
        if marking:
            self._mark(shard_id, shard, marking)

    # ------------------------------------------------------------ effects: markers of messages stored in place

    def _mark(self, shard_id: int, shard: _Shard, decisions: list[Decision]) -> None:
        """Owe each marker to its partition's owner through the node's marker channels (as a real node's
        half shards share its MarkerWriter), fenced by the shard's leader epoch; DONE once acknowledged,
        sent again shortly if not."""
        shard.marking.update(d.transaction_id for d in decisions)
        markers = in_place_markers(decisions)

        def answered(acked: frozenset[Owed]) -> None:
            if not self._still(shard_id, shard):
                return
            done = [d for d, marker in zip(decisions, markers, strict=True) if marker in acked]
            self._done(shard, [d.transaction_id for d in done])
            shard.marking.difference_update(d.transaction_id for d in done)
            missing = [d for d in decisions if d not in done]
            if missing:
                self._later(self._mark_again, shard_id, shard, missing, delay_ms=COPY_RETRY_MS, label="marker-retry")

        self.node.send_markers(markers, shard.half_log.leader_epoch, answered)

    def _mark_again(self, shard_id: int, shard: _Shard, decisions: list[Decision]) -> None:
        shard.marking.difference_update(d.transaction_id for d in decisions)
        if self._still(shard_id, shard):
            self._carry_out(shard_id, shard)

    def _copy(self, shard_id: int, shard: _Shard, tp: TopicPartition, decisions: list[Decision]) -> None:
        request = pb.ProduceRequest(acks=-1, timeout_ms=COPY_TIMEOUT_MS, partitions=[pb.PartitionRecords(
            topic=tp.topic, partition=tp.partition, records=copy_batches(decisions, self.node.now()))])
        owner = self.model.owner_now(tp.topic, tp.partition)

        def answered(response: object) -> None:
            if not self._still(shard_id, shard):
                return
            if response is TIMED_OUT:
                return self._copy_failed(shard_id, shard, tp)
            assert isinstance(response, pb.ProduceResponse)
            code = response.partitions[0].error_code if response.partitions else response.error_code
            if copied(code):
                return self._copied(shard_id, shard, tp, decisions)
            if code == OutOfOrderSequenceError.errno:
                return self._find_landed(shard_id, shard, tp, decisions)
            self._copy_failed(shard_id, shard, tp)

        self.net.call(self.node.name, f"n{owner}", request, COPY_TIMEOUT_MS, answered)

    def _find_landed(self, shard_id: int, shard: _Shard, tp: TopicPartition, decisions: list[Decision]) -> None:
        """Some copies landed before (a previous owner wrote them and died before its DONE record)."""
        request = pb.DescribeProducersRequest(partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)])
        owner = self.model.owner_now(tp.topic, tp.partition)
        producer_id = decisions[0].copy_producer_id

        def answered(response: object) -> None:
            if not self._still(shard_id, shard):
                return
            if not isinstance(response, pb.DescribeProducersResponse) or response.partitions[0].error_code:
                return self._copy_failed(shard_id, shard, tp)
            last = next((p.last_sequence for p in response.partitions[0].active_producers
                         if p.producer_id == producer_id), -1)
            landed, rest = split_landed(decisions, last)
            if landed:
                self._done(shard, [d.transaction_id for d in landed])
            if rest:  # again shortly, with every copy owed by then (one decided meanwhile may fill the gap)
                self._copy_failed(shard_id, shard, tp)
            else:
                shard.copying.discard(tp)

        self.net.call(self.node.name, f"n{owner}", request, COPY_TIMEOUT_MS, answered)

    def _copied(self, shard_id: int, shard: _Shard, tp: TopicPartition, decisions: list[Decision]) -> None:
        shard.copying.discard(tp)
        self._done(shard, [d.transaction_id for d in decisions])
        if shard.core.unfinished:
            self._carry_out(shard_id, shard)

    def _done(self, shard: _Shard, tids: list[str]) -> None:
        ops = shard.core.done(tids)
        if not ops:
            return
        try:
            self._append(shard, shard.op_log, [log_format.encode_op(op, self.node.now()) for op in ops])
        except KafkaError:
            pass  # not recorded: the next owner copies again, and the partition recognises the duplicates

    def _copy_failed(self, shard_id: int, shard: _Shard, tp: TopicPartition) -> None:
        def retry() -> None:
            shard.copying.discard(tp)
            if self._still(shard_id, shard):
                self._carry_out(shard_id, shard)

        self._later(retry, delay_ms=COPY_RETRY_MS, label="copy-retry")

