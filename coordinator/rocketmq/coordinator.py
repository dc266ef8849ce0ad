"""The half-message coordinator: the driver of the half shards this node owns (half_shard.py holds the
logic), written once over the node's I/O (coordinator/runtime/io.py), so that a node process and the
simulator run the same code. It stores half messages, writes decisions, carries out what they owe
(effects.py: copies to real topics, markers of messages stored in place) and checks back undecided messages
with a live producer of their group (check_back.py).

Every request is answered through a callback once what it changed is durable; `send` and `end` wait for
that answer on the caller's thread, for the node's blocking front doors (its gRPC servicer and RocketMQ's).
"""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from coordinator.observers import NO_OBSERVER, HalfMessageObserver
from coordinator.rocketmq import log_format
from coordinator.rocketmq.check_back import CheckBack, LocalProducers
from coordinator.rocketmq.copies import copied
from coordinator.rocketmq.effects import EffectWriter, MarkerSender, record_done
from coordinator.rocketmq.half_shard import HalfShard, PendingHalf
from coordinator.rocketmq.in_place import in_place_batch
from coordinator.rocketmq.loaded_shard import LoadedShard, write
from coordinator.rocketmq.log_format import HalfRecord, OpRecord, Resolution, Storage
from coordinator.rocketmq.shard_load import load_half_shard
from coordinator.runtime.io import NodeIO, Outcome, wait_for
from coordinator.runtime.shard_status import ShardStatus, still_loading
from partitions import PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import (
    IllegalMessagePropertyKeyError,
    InvalidRequestError,
    InvalidTransactionIdError,
    KafkaError,
    MessagePropertyConflictWithTypeError,
    NotCoordinatorError,
    RecordTooLargeError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
    for_code,
)
from proto.hashing import partition_for
from proto.planted_bugs import PlantedBug
from proto.structs import TopicPartition

log = logging.getLogger(__name__)

_RESOLUTIONS = {pb.RESOLUTION_COMMIT: Resolution.COMMIT, pb.RESOLUTION_ROLLBACK: Resolution.ROLLBACK,
                pb.RESOLUTION_UNKNOWN: None}
#: how a decision's requester hears that it is durable (None) or failed
Answer = Callable[[KafkaError | None], None]


class TopicsView(Protocol):
    def partitions(self, topic: str) -> int | None: ...

    def configs(self, topic: str) -> dict[str, str]: ...


class HalfMessageCoordinator:
    def __init__(self, *, io: NodeIO, half_shards: int, check_interval_ms: int, check_max: int,
                 half_message_timeout_ms: int, default_storage: str, allocate_producer_id: Callable[[], int],
                 topics: TopicsView, owner_of: Callable[[str, int], int], markers: MarkerSender,
                 producers: LocalProducers, peers: Callable[[], Iterable[int]],
                 message_max_bytes: int = 4 * 1024 * 1024, request_timeout_ms: int = 5000,
                 effect_wait_ms: int = 5000, retry_ms: int = 200, observer: HalfMessageObserver = NO_OBSERVER,
                 planted_bug: PlantedBug | None = None) -> None:
        """`effect_wait_ms`: how long an end waits for the copy or marker its decision owes before it answers
        (the decision is durable already). `planted_bug`: the simulator's check-count-in-memory and
        in-place-retry-unwritten switch off what they name; a node never passes one."""
        self.half_shards = half_shards
        self.check_interval_ms = check_interval_ms
        self.check_max = check_max
        self.half_message_timeout_ms = half_message_timeout_ms
        self.default_storage = Storage(default_storage)
        self.node_id = io.node_id
        self._io = io
        self._allocate_producer_id = allocate_producer_id
        self._topics = topics
        self._producers = producers
        self._message_max_bytes = message_max_bytes
        self._effect_wait_ms = effect_wait_ms
        self._observer = observer
        self._planted = planted_bug
        self._lock = threading.Lock()
        self._shards: dict[int, LoadedShard] = {}
        self._effects = EffectWriter(io=io, owner_of=owner_of, markers=markers, request_timeout_ms=request_timeout_ms,
                                     retry_ms=retry_ms, finished=self._finished)
        self._checks = CheckBack(io=io, check_interval_ms=check_interval_ms, check_max=check_max,
                                 producers=producers, peers=peers, shards=self.loaded, decide=self._decide,
                                 observer=observer, request_timeout_ms=request_timeout_ms, planted_bug=planted_bug)

    # ------------------------------------------------------------ ownership

    def shard_of(self, producer_group: str) -> int:
        return partition_for(producer_group, self.half_shards)

    def load_shard(self, shard: int, half_log: PartitionLog, op_log: PartitionLog, discard_log: PartitionLog) -> None:
        """Rebuild the shard from its three logs (half, then OP, then discarded), then serve it: redo what its
        previous owner left unfinished, and check back what is due."""
        loaded = LoadedShard(shard, HalfShard(shard, self.check_interval_ms, self.check_max), half_log, op_log,
                             discard_log)
        with self._lock:  # requests meanwhile hear COORDINATOR_LOAD_IN_PROGRESS
            self._shards[shard] = loaded
        core = load_half_shard(shard, self.check_interval_ms, self.check_max, half_log, op_log, discard_log,
                               to_log_end=True)
        with loaded.lock:
            loaded.core, loaded.status = core, ShardStatus.SERVING
        log.info("half-message shard %d loaded: %d undecided, %d decisions, %d owing their copy", shard,
                 len(core.pending), len(core.decided), len(core.unfinished))
        self._effects.carry_out(loaded)
        self._checks.wake()

    def unload_shard(self, shard: int) -> None:
        with self._lock:
            loaded = self._shards.pop(shard, None)
        if loaded is None:
            return
        with loaded.lock:
            loaded.released = True
            waiting = [answer for answers in loaded.waiting.values() for answer in answers]
            loaded.waiting.clear()
        for answer in waiting:  # decided durably: the next owner carries out what is owed
            answer()

    def owned_shards(self) -> list[int]:
        with self._lock:
            return sorted(self._shards)

    def close(self) -> None:
        self._checks.close()
        for shard in self.owned_shards():
            self.unload_shard(shard)

    def loaded(self) -> list[LoadedShard]:
        """The shards served here now (loaded)."""
        with self._lock:
            return [shard for shard in self._shards.values() if shard.status is ShardStatus.SERVING]

    def _owned(self, shard: int) -> LoadedShard:
        with self._lock:
            loaded = self._shards.get(shard)
        if loaded is None:
            raise NotCoordinatorError(f"[NOT_COORDINATOR] node {self.node_id} does not own half-message shard {shard}")
        if loaded.status is ShardStatus.LOADING:
            raise still_loading(f"half-message shard {shard}")
        return loaded

    # ------------------------------------------------------------ send

    def send(self, req: pb.SendHalfMessageRequest) -> pb.SendHalfMessageResponse:
        answer: pb.SendHalfMessageResponse = wait_for(lambda done: self.send_async(req, done))
        return answer

    def send_async(self, req: pb.SendHalfMessageRequest, done: Callable[[Outcome], None]) -> None:
        """Store a half message durably; from then on it is invisible until decided, and checked back. A send
        retried under the same message id stores nothing twice: it hears the first one's outcome."""
        try:
            shard, storage = self._check_send(req)
        except KafkaError as exc:
            done(exc)
            return
        msg = req.message
        key = (req.producer_group, msg.message_id) if msg.message_id else None
        retried: PendingHalf | None = None
        with shard.lock:
            if key is not None:
                retried = shard.core.find(*key)
                if retried is None and key in shard.sending:  # the first attempt is being written: its outcome is ours
                    shard.sending[key].append(done)
                    return
                if retried is None:
                    shard.sending[key] = [done]
        if retried is not None:  # a retry of a send whose answer was lost: one half message, not two
            if retried.record.storage is Storage.KAFKA and self._planted is not PlantedBug.IN_PLACE_RETRY_UNWRITTEN:
                # the in-place write may never have been made (the shard's previous owner died after the
                # registration): made again, a duplicate if it was
                self._write_in_place(shard, retried, done, first=False)
            else:
                done(_sent(shard.shard, retried))
            return

        def finish(outcome: Outcome) -> None:
            if key is None:
                done(outcome)
                return
            with shard.lock:
                answers = shard.sending.pop(key, [])
            for answer in answers:
                answer(outcome)
        self._store(req, shard, storage, finish)

    def _check_send(self, req: pb.SendHalfMessageRequest) -> tuple[LoadedShard, Storage]:
        msg = req.message
        if not req.producer_group:
            raise InvalidRequestError("[INVALID_REQUEST] a half message needs its producer group")
        count = self._topics.partitions(msg.topic)
        if count is None:
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {msg.topic!r} does not exist")
        if not 0 <= msg.partition < count:
            raise UnknownTopicOrPartitionError(
                f"[UNKNOWN_TOPIC_OR_PARTITION] partition {msg.partition} of topic {msg.topic!r} does not exist")
        configs = self._topics.configs(msg.topic)
        if configs.get("message.type", "MIXED") not in ("TRANSACTION", "MIXED"):
            raise MessagePropertyConflictWithTypeError(
                f"[MESSAGE_PROPERTY_CONFLICT_WITH_TYPE] topic {msg.topic!r} accepts {configs['message.type']} "
                "messages, not TRANSACTION; create it with message.type=TRANSACTION (or MIXED)")
        reserved = sorted({h.key for h in msg.headers} & log_format.SYSTEM_PROPERTIES)
        if reserved:
            raise IllegalMessagePropertyKeyError(
                f"[ILLEGAL_MESSAGE_PROPERTY_KEY] property {reserved[0]!r} is reserved by RocketMQ")
        size = len(msg.value) + len(msg.key) + sum(len(h.key) + len(h.value) for h in msg.headers)
        if size > self._message_max_bytes:
            raise RecordTooLargeError(f"[MESSAGE_TOO_LARGE] the message is {size} bytes; at most "
                                      f"{self._message_max_bytes} are accepted")
        if msg.check_immunity_ms < 0:
            raise InvalidRequestError(f"[INVALID_REQUEST] check immunity must not be negative, not {msg.check_immunity_ms}")
        shard = self._owned(self.shard_of(req.producer_group))
        return shard, Storage(configs.get("half.message.storage", self.default_storage.value))

    def _store(self, req: pb.SendHalfMessageRequest, shard: LoadedShard, storage: Storage,
               finish: Callable[[Outcome], None]) -> None:
        """Write the half message durably, then let the core know it (and, stored in place, write it to its
        partition); then answer."""
        msg = req.message
        now = self._io.now_ms()
        record = HalfRecord(
            topic=msg.topic, partition=msg.partition, producer_group=req.producer_group,
            message_id=msg.message_id or _message_id(shard.shard, now), key=msg.key if msg.HasField("key") else None,
            value=msg.value, user_headers=tuple((h.key, h.value) for h in msg.headers), store_time_ms=now,
            check_immunity_ms=msg.check_immunity_ms or self.half_message_timeout_ms, storage=storage, tag=msg.tag,
            keys=msg.keys, born_timestamp_ms=msg.born_timestamp_ms,
            producer_id=self._allocate_producer_id() if storage is Storage.KAFKA else -1)

        def stored(outcome: int | KafkaError) -> None:
            if isinstance(outcome, KafkaError):
                finish(outcome)
                return
            with shard.lock:
                if shard.released:
                    pending = None
                else:
                    pending = shard.core.stored(outcome, record)
            if pending is None:  # durable, and the next owner's replay finds it: the producer's retry hears of it
                finish(NotCoordinatorError(f"[NOT_COORDINATOR] half-message shard {shard.shard} moved away"))
                return
            self._checks.wake(pending.next_check_ms(self.check_interval_ms))
            if storage is Storage.KAFKA:
                self._write_in_place(shard, pending, finish, first=True)
            else:
                finish(_sent(shard.shard, pending))
        # the half message is durable before anything else: from here it is decided or checked back
        write(self._io, shard.half_log, [log_format.encode_half(record, now)], stored)

    def _write_in_place(self, shard: LoadedShard, pending: PendingHalf, done: Callable[[Outcome], None], *,
                        first: bool) -> None:
        """Storage.KAFKA: write the message to its real partition as a one-message transaction, which
        read_committed consumers hold back until its marker (in_place.py); answered once acknowledged. If
        the write fails, the error goes to the producer (its local transaction must not run) and, if this
        is the send that registered the message, the message is rolled back first (an ABORT marker). A
        retried send never rolls back: an earlier attempt of it may have been answered, and its local
        transaction run."""
        r = pending.record

        def produced(code: int, message: str) -> None:
            if copied(code):
                done(_sent(shard.shard, pending))
                return
            error = for_code(code, message)
            op = None
            if first:
                with shard.lock:
                    if not shard.released and shard.core.find(r.producer_group, r.message_id) is pending:
                        op = shard.core.end(pending.transaction_id, Resolution.ROLLBACK, source="SERVER").op
            if op is None:
                done(error)
                return
            log.info("in-place write of %s failed (%s); rolling it back", pending.transaction_id, message)
            # the producer hears only once the rollback is durable: its retry then stores a new message, never
            # one beside this undecided one that check-back would commit too (if the rollback fails, the retry
            # finds this message undecided and writes it again)
            self._decide(shard, op, lambda rollback_error: done(rollback_error or error))
        self._effects.produce(TopicPartition(r.topic, r.partition), in_place_batch(r), produced,
                              transactional_id=log_format.half_transactional_id(shard.shard))

    def verify_write(self, req: pb.VerifyHalfWriteRequest) -> pb.VerifyHalfWriteResponse:
        """A partition asks before accepting an in-place write (KIP-890's first-write verification)."""
        loaded = self._owned(req.shard)
        with loaded.lock:
            allowed = loaded.core.may_write_in_place(req.producer_id, TopicPartition(req.topic, req.partition))
        if not allowed:
            raise TransactionAbortableError(
                f"[TRANSACTION_ABORTABLE] producer {req.producer_id} has no undecided half message for "
                f"{req.topic}-{req.partition} in shard {req.shard}")
        return pb.VerifyHalfWriteResponse()

    # ------------------------------------------------------------ end

    def end(self, req: pb.EndHalfTransactionRequest) -> pb.EndHalfTransactionResponse:
        answer: pb.EndHalfTransactionResponse = wait_for(lambda done: self.end_async(req, done))
        return answer

    def end_async(self, req: pb.EndHalfTransactionRequest, done: Callable[[Outcome], None]) -> None:
        """Decide a half message (COMMIT or ROLLBACK; UNKNOWN does nothing). Answers once the decision is
        durable and, for a commit, once the message is on its real topic (or after effect_wait_ms)."""
        try:
            shard, resolution, source = self._check_end(req)
            with shard.lock:
                outcome = shard.core.end(req.transaction_id, resolution, source=source,
                                         producer_group=req.producer_group, message_id=req.message_id)
        except KafkaError as exc:
            done(exc)
            return
        if outcome.op is None:
            if resolution is None:
                log.info("transaction %s: the producer does not know yet (UNKNOW, %s); it will be checked",
                         req.transaction_id, source)
            done(pb.EndHalfTransactionResponse(already_decided=outcome.already_decided))
            return
        tid = req.transaction_id

        def decided(error: KafkaError | None) -> None:
            if error is not None:
                done(error)
                return
            if source == "SERVER_CHECK":
                self._observer.check_back_resolved(resolution is Resolution.COMMIT)
            self._when_carried_out(shard, tid, lambda: done(pb.EndHalfTransactionResponse()))
        self._decide(shard, outcome.op, decided)

    def _check_end(self, req: pb.EndHalfTransactionRequest) -> tuple[LoadedShard, Resolution | None, str]:
        parsed = log_format.parse_transaction_id(req.transaction_id)
        if parsed is None or parsed[0] >= self.half_shards:
            raise InvalidTransactionIdError(f"[INVALID_TRANSACTION_ID] {req.transaction_id!r} is not a transaction id")
        if req.resolution not in _RESOLUTIONS:
            raise InvalidRequestError(f"[INVALID_REQUEST] unknown resolution {req.resolution}")
        resolution = _RESOLUTIONS[req.resolution]
        shard = self._owned(parsed[0])
        if resolution is Resolution.COMMIT:
            self._ensure_copy_producer(shard)
        return shard, resolution, "SERVER_CHECK" if req.source == pb.SOURCE_SERVER_CHECK else "CLIENT"

    def _when_carried_out(self, shard: LoadedShard, tid: str, answer: Callable[[], None]) -> None:
        """Run `answer` once the decision of `tid` owes nothing more, or after effect_wait_ms."""
        once = _Once(answer)
        with shard.lock:
            owed = tid in shard.core.unfinished and not shard.released
            if owed:
                shard.waiting.setdefault(tid, []).append(once)
        if owed:
            once.timer = self._io.after(self._effect_wait_ms, once, "half-effect-wait")
        else:
            once()

    def _decide(self, shard: LoadedShard, op: OpRecord, answer: Answer | None) -> None:
        """Write the OP record; once it is durable the decision is installed, answered and carried out."""
        def written(outcome: int | KafkaError) -> None:
            if isinstance(outcome, KafkaError):
                with shard.lock:
                    shard.core.decisions_failed([op])
                self._checks.wake_after_failure()
                if answer is not None:
                    answer(outcome)
                return
            with shard.lock:
                decision = None if shard.released else shard.core.decided_durably(op)
            if decision is None:  # the next owner replays the OP record; the producer's retry hears of it
                if answer is not None:
                    answer(NotCoordinatorError(f"[NOT_COORDINATOR] half-message shard {shard.shard} moved away"))
                return
            if answer is not None:  # first: an end waiting for the effect registers before it can happen
                answer(None)
            if decision.needs_effect:
                self._effects.carry_out(shard)
        write(self._io, shard.op_log, [log_format.encode_op(op, self._io.now_ms())], written)

    def _finished(self, shard: LoadedShard, tids: list[str]) -> None:
        for answer in record_done(self._io, shard, tids):
            answer()

    def _ensure_copy_producer(self, shard: LoadedShard) -> None:
        """Give the shard its idempotent producer id for copies before it decides its first commit."""
        with shard.lock:
            if shard.core.copy_producer_id >= 0:
                return
        producer_id = self._allocate_producer_id()
        with shard.lock:
            if shard.core.copy_producer_id < 0:
                shard.core.copy_producer_id = producer_id

    # ------------------------------------------------------------ check-back, listing

    def deliver_check(self, req: pb.DeliverCheckRequest) -> pb.DeliverCheckResponse:
        """A peer asks whether a producer of the group is connected here, or hands a check to pass on."""
        if req.probe_only:
            return pb.DeliverCheckResponse(delivered=self._producers.pick(req.check.producer_group) is not None)
        return pb.DeliverCheckResponse(delivered=self._producers.deliver(req.check))

    def list(self, req: pb.ListHalfMessagesRequest) -> pb.ListHalfMessagesResponse:
        out = []
        for loaded in self.loaded():
            with loaded.lock:
                pendings = list(loaded.core.pending.values())
            for p in pendings:
                r = p.record
                if req.producer_group and r.producer_group != req.producer_group:
                    continue
                out.append(pb.HalfMessageListing(
                    transaction_id=p.transaction_id, producer_group=r.producer_group, topic=r.topic,
                    partition=r.partition, message_id=r.message_id, store_time_ms=r.store_time_ms,
                    check_times=r.check_times, last_check_ms=r.last_check_ms, shard=loaded.shard,
                    half_offset=p.latest_offset, storage=r.storage.value, unanswered_checks=p.unanswered,
                    node_id=self.node_id, next_check_ms=p.next_check_ms(self.check_interval_ms)))
        return pb.ListHalfMessagesResponse(messages=out)

    def undecided_count(self) -> int:
        """How many half messages of the owned shards are undecided (the metrics' gauge)."""
        total = 0
        for loaded in self.loaded():
            with loaded.lock:
                total += len(loaded.core.pending)
        return total


class _Once:
    """An answer given once, by whichever comes first: the effect carried out, or the wait's timer."""

    def __init__(self, answer: Callable[[], None]) -> None:
        self._answer = answer
        self._lock = threading.Lock()
        self._given = False
        self.timer: Any = None

    def __call__(self) -> None:
        with self._lock:
            given, self._given = self._given, True
        if given:
            return
        if self.timer is not None:
            self.timer.cancel()
        self._answer()


def _sent(shard: int, pending: PendingHalf) -> pb.SendHalfMessageResponse:
    return pb.SendHalfMessageResponse(transaction_id=pending.transaction_id, message_id=pending.record.message_id,
                                      half_offset=pending.first_offset, shard=shard,
                                      storage=pending.record.storage.value)


def _message_id(shard: int, now_ms: int) -> str:
    """A unique message id when the client sent none (RocketMQ's clients always send one)."""
    return f"{now_ms:012X}{shard:04X}{uuid.uuid4().hex[:16].upper()}"
