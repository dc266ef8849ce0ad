"""The half-message coordinator: the driver of the half shards this node owns (half_shard.py holds
the logic). It stores half messages, writes decisions, carries out what they owe (copies to real
topics), and checks back undecided messages with a live producer of their group.

Per shard one writer thread (shard_writer.py) owns RMQ_SYS_TRANS_OP_HALF_TOPIC and carries out
what decisions owe. One checker thread runs the check-backs of all shards: a checked message is
appended again (count + 1) before the check is sent, and a message with no live producer of its
group anywhere is retried without counting.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError

from coordinator.observers import NO_OBSERVER, HalfMessageObserver
from coordinator.rocketmq import log_format
from coordinator.rocketmq.copies import copied
from coordinator.rocketmq.effects import PartitionWriter
from coordinator.rocketmq.half_shard import CheckAction, PendingHalf
from coordinator.rocketmq.in_place import in_place_batch
from coordinator.rocketmq.log_format import HalfRecord, Resolution, Storage
from coordinator.rocketmq.shard_load import load_half_shard
from coordinator.rocketmq.shard_writer import LoadedShard, PendingEnd, ShardWriter, WriteMarkers
from partitions import AppendOrigin, PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import (
    IllegalMessagePropertyKeyError,
    InvalidRequestError,
    InvalidTransactionIdError,
    KafkaError,
    KafkaTimeoutError,
    MessagePropertyConflictWithTypeError,
    NotCoordinatorError,
    RecordTooLargeError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
    for_code,
)
from proto.hashing import partition_for
from proto.structs import CHECK_MAX_TOPIC, TopicPartition

log = logging.getLogger(__name__)

#: a check is handed to a producer by this; None when no producer of the group is live anywhere
FindProducer = Callable[[str], Callable[[pb.TransactionCheck], bool] | None]
#: how long an end waits for the copy it caused before answering (the decision is durable already)
_EFFECT_WAIT_S = 5.0
#: how long a retried send waits for its first attempt's write (an fsync, normally well under a second)
IN_FLIGHT_WAIT_S = 30.0
_RESOLUTIONS = {pb.RESOLUTION_COMMIT: Resolution.COMMIT, pb.RESOLUTION_ROLLBACK: Resolution.ROLLBACK,
                pb.RESOLUTION_UNKNOWN: None}


class HalfMessageCoordinator:
    def __init__(self, *, half_shards: int, check_interval_ms: int, check_max: int, half_message_timeout_ms: int,
                 default_storage: str, now_ms: Callable[[], int], allocate_producer_id: Callable[[], int],
                 partitions_for: Callable[[str], int | None], topic_configs: Callable[[str], dict[str, str]],
                 writer: PartitionWriter, find_producer: FindProducer, write_markers: WriteMarkers,
                 message_max_bytes: int = 4 * 1024 * 1024, node_id: int = 0,
                 observer: HalfMessageObserver = NO_OBSERVER) -> None:
        self.half_shards = half_shards
        self.check_interval_ms = check_interval_ms
        self.check_max = check_max
        self.half_message_timeout_ms = half_message_timeout_ms
        self.default_storage = Storage(default_storage)
        self.node_id = node_id
        self._now_ms = now_ms
        self._allocate_producer_id = allocate_producer_id
        self._partitions_for = partitions_for
        self._topic_configs = topic_configs
        self._writer = writer
        self._find_producer = find_producer
        self._message_max_bytes = message_max_bytes
        self._observer = observer
        self._lock = threading.Lock()
        self._shards: dict[int, LoadedShard] = {}
        self._stopped = threading.Event()
        self._checker_wake = threading.Event()
        self._shard_writer = ShardWriter(writer=writer, write_markers=write_markers, now_ms=now_ms,
                                         on_decided=self._checker_wake.set, node_id=node_id, stopped=self._stopped)
        self._checker = threading.Thread(target=self._run_checks, name="half-checks", daemon=True)
        self._checker.start()

    # ------------------------------------------------------------ ownership

    def shard_of(self, producer_group: str) -> int:
        return partition_for(producer_group, self.half_shards)

    def load_shard(self, shard: int, half_log: PartitionLog, op_log: PartitionLog, discard_log: PartitionLog) -> None:
        """Rebuild the shard from its three logs (half, then OP, then discarded), then serve it."""
        core = load_half_shard(shard, self.check_interval_ms, self.check_max, half_log, op_log, discard_log)
        loaded = LoadedShard(core, half_log, op_log, discard_log)
        with self._lock:
            self._shards[shard] = loaded
        self._shard_writer.start(shard, loaded)
        self._checker_wake.set()
        log.info("half-message shard %d loaded: %d undecided, %d decisions, %d owing their copy", shard,
                 len(core.pending), len(core.decided), len(core.unfinished))

    def unload_shard(self, shard: int) -> None:
        with self._lock:
            loaded = self._shards.pop(shard, None)
        if loaded is not None:
            loaded.stopped.set()
            loaded.wake.set()

    def owned_shards(self) -> list[int]:
        with self._lock:
            return sorted(self._shards)

    def close(self) -> None:
        self._stopped.set()
        self._checker_wake.set()
        for shard in self.owned_shards():
            self.unload_shard(shard)

    def _owned(self, shard: int) -> LoadedShard:
        with self._lock:
            loaded = self._shards.get(shard)
        if loaded is None:
            raise NotCoordinatorError(f"[NOT_COORDINATOR] node {self.node_id} does not own half-message shard {shard}")
        return loaded

    # ------------------------------------------------------------ send

    def send(self, req: pb.SendHalfMessageRequest) -> pb.SendHalfMessageResponse:
        """Store a half message durably; from then on it is invisible until decided, and checked back."""
        msg = req.message
        if not req.producer_group:
            raise InvalidRequestError("[INVALID_REQUEST] a half message needs its producer group")
        count = self._partitions_for(msg.topic)
        if count is None:
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {msg.topic!r} does not exist")
        if not 0 <= msg.partition < count:
            raise UnknownTopicOrPartitionError(
                f"[UNKNOWN_TOPIC_OR_PARTITION] partition {msg.partition} of topic {msg.topic!r} does not exist")
        configs = self._topic_configs(msg.topic)
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
        shard = self.shard_of(req.producer_group)
        loaded = self._owned(shard)
        storage = Storage(configs.get("half.message.storage", self.default_storage.value))
        sending: Future[PendingHalf] | None = None
        key = (req.producer_group, msg.message_id)
        if msg.message_id:
            with loaded.lock:
                stored = loaded.core.find(*key)
                in_flight = loaded.sending.get(key) if stored is None else None
                if stored is None and in_flight is None:
                    sending = loaded.sending[key] = Future()
            if in_flight is not None:  # a retry while the first attempt is being written: its outcome is ours
                try:
                    stored = in_flight.result(timeout=IN_FLIGHT_WAIT_S)
                except FutureTimeoutError:
                    raise KafkaTimeoutError(f"[REQUEST_TIMED_OUT] an earlier send of message {msg.message_id!r} is "
                                            f"still being written after {IN_FLIGHT_WAIT_S:.0f} s; retry") from None
            if stored is not None:  # a retry of a send whose answer was lost: one half message, not two
                if stored.record.storage is Storage.KAFKA and in_flight is None:
                    # the in-place write may never have been made (the shard's previous owner died after the
                    # registration): made again, a duplicate if it was
                    self._write_in_place(shard, loaded, stored, first=False)
                return pb.SendHalfMessageResponse(transaction_id=stored.transaction_id, message_id=msg.message_id,
                                                  half_offset=stored.first_offset, shard=shard,
                                                  storage=stored.record.storage.value)
        try:
            return self._store_half(req, shard, loaded, storage, sending)
        finally:
            if sending is not None:
                with loaded.lock:
                    loaded.sending.pop(key, None)

    def _store_half(self, req: pb.SendHalfMessageRequest, shard: int, loaded: LoadedShard, storage: Storage,
                    sending: Future[PendingHalf] | None) -> pb.SendHalfMessageResponse:
        """Write the half message durably, then let the core (and any retry waiting on `sending`) know it."""
        try:
            pending = self._write_half(req, shard, loaded, storage)
            if storage is Storage.KAFKA:  # a retry waiting on `sending` is answered only once this is written
                self._write_in_place(shard, loaded, pending, first=True)
        except BaseException as exc:
            if sending is not None:
                sending.set_exception(exc)
            raise
        if sending is not None:
            sending.set_result(pending)
        return pb.SendHalfMessageResponse(transaction_id=pending.transaction_id, message_id=pending.record.message_id,
                                          half_offset=pending.first_offset, shard=shard, storage=storage.value)

    def _write_half(self, req: pb.SendHalfMessageRequest, shard: int, loaded: LoadedShard,
                    storage: Storage) -> PendingHalf:
        msg = req.message
        now = self._now_ms()
        record = HalfRecord(
            topic=msg.topic, partition=msg.partition, producer_group=req.producer_group,
            message_id=msg.message_id or _message_id(shard, now), key=msg.key if msg.HasField("key") else None,
            value=msg.value, user_headers=tuple((h.key, h.value) for h in msg.headers), store_time_ms=now,
            check_immunity_ms=msg.check_immunity_ms or self.half_message_timeout_ms, storage=storage, tag=msg.tag,
            keys=msg.keys, born_timestamp_ms=msg.born_timestamp_ms,
            producer_id=self._allocate_producer_id() if storage is Storage.KAFKA else -1)
        # the half message is durable before anything else: from here it is decided or checked back
        appended = loaded.half_log.append(log_format.encode([log_format.encode_half(record, now)]),
                                          origin=AppendOrigin.COORDINATOR)
        with loaded.lock:
            pending = loaded.core.stored(appended.base_offset, record)
        self._checker_wake.set()
        return pending

    def _write_in_place(self, shard: int, loaded: LoadedShard, pending: PendingHalf, *, first: bool) -> None:
        """Storage.KAFKA: write the message to its real partition as a one-message transaction, which
        read_committed consumers hold back until its marker (coordinator/rocketmq/in_place.py). If the
        write fails, the error goes to the producer (its local transaction must not run) and, if this is
        the send that registered the message, the message is rolled back (an ABORT marker). A retried send
        never rolls back: an earlier attempt of it may have been answered, and its local transaction run."""
        r = pending.record
        code, message = self._writer.produce(TopicPartition(r.topic, r.partition), in_place_batch(r),
                                             transactional_id=log_format.half_transactional_id(shard))
        if copied(code):
            return
        if not first:
            raise for_code(code, message)
        log.info("in-place write of %s failed (%s); rolling it back", pending.transaction_id, message)
        end = None
        with loaded.lock:
            if loaded.core.find(r.producer_group, r.message_id) is pending:  # not being decided already
                outcome = loaded.core.end(pending.transaction_id, Resolution.ROLLBACK, source="SERVER")
                if outcome.op is not None:
                    end = PendingEnd(outcome.op)
                    loaded.ends.append(end)
        if end is not None:
            loaded.wake.set()
            # the producer hears only once the rollback is durable: its retry then stores a new message, never
            # one beside this undecided one that check-back would commit too (if the rollback fails, this
            # raises it, and the retry finds this message undecided and writes it again)
            end.decided.result(timeout=30)
        raise for_code(code, message)

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
        """Decide a half message (COMMIT or ROLLBACK; UNKNOWN does nothing). Answers once the decision
        is durable and, for a commit, once the message is on its real topic (or after a few seconds)."""
        parsed = log_format.parse_transaction_id(req.transaction_id)
        if parsed is None or parsed[0] >= self.half_shards:
            raise InvalidTransactionIdError(f"[INVALID_TRANSACTION_ID] {req.transaction_id!r} is not a transaction id")
        if req.resolution not in _RESOLUTIONS:
            raise InvalidRequestError(f"[INVALID_REQUEST] unknown resolution {req.resolution}")
        resolution = _RESOLUTIONS[req.resolution]
        source = "SERVER_CHECK" if req.source == pb.SOURCE_SERVER_CHECK else "CLIENT"
        loaded = self._owned(parsed[0])
        if resolution is Resolution.COMMIT:
            self.ensure_copy_producer(parsed[0])
        with loaded.lock:
            outcome = loaded.core.end(req.transaction_id, resolution, source=source,
                                      producer_group=req.producer_group, message_id=req.message_id)
            if outcome.op is None:
                if resolution is None:
                    log.info("transaction %s: the producer does not know yet (UNKNOW, %s); it will be checked",
                             req.transaction_id, source)
                return pb.EndHalfTransactionResponse(already_decided=outcome.already_decided)
            end = PendingEnd(outcome.op)
            loaded.ends.append(end)
        loaded.wake.set()
        end.decided.result(timeout=30)  # raises what the write raised
        if source == "SERVER_CHECK":
            self._observer.check_back_resolved(resolution is Resolution.COMMIT)
        end.finished.wait(_EFFECT_WAIT_S)
        return pb.EndHalfTransactionResponse()

    # ------------------------------------------------------------ check-back

    def _run_checks(self) -> None:
        while not self._stopped.is_set():
            try:
                wait_ms = self.check_due()
            except Exception:
                log.exception("check-back pass failed")
                wait_ms = 1000
            self._checker_wake.wait(min(max(wait_ms, 5), 1000) / 1000)
            self._checker_wake.clear()

    def check_due(self) -> int:
        """One pass over every owned shard; returns how many ms until the next check is due."""
        now = self._now_ms()
        with self._lock:
            shards = list(self._shards.values())
        producers: dict[str, Callable[[pb.TransactionCheck], bool] | None] = {}
        for loaded in shards:
            if not loaded.stopped.is_set():
                self._check_shard(loaded, now, producers)
        next_due = []
        for loaded in shards:
            with loaded.lock:  # the writer and the RPC threads change the pending set meanwhile
                due = loaded.core.next_due_ms()
            if due is not None:
                next_due.append(due)
        return (min(next_due) - self._now_ms()) if next_due else 1000

    def _check_shard(self, loaded: LoadedShard, now: int,
                     producers: dict[str, Callable[[pb.TransactionCheck], bool] | None]) -> None:
        core = loaded.core
        with loaded.lock:
            due = core.due(now)
        if not due:
            return
        discards = [d for d in due if d.action is CheckAction.DISCARD]
        checks = []
        for d in due:
            if d.action is not CheckAction.CHECK:
                continue
            group = d.record.producer_group
            if group not in producers:
                producers[group] = self._find_producer(group)
            if producers[group] is None:
                with loaded.lock:
                    core.unanswered(d.pending.transaction_id, now)
                log.info("transaction %s: no live producer of group %r to check with; trying again in %d ms",
                         d.pending.transaction_id, group, self.check_interval_ms)
            else:
                checks.append(d)
        if discards:
            self._discard(loaded, [d.pending for d in discards], now)
        if not checks:
            return
        tids = [d.pending.transaction_id for d in checks]
        with loaded.lock:
            core.counting(tids)
        try:
            appended = loaded.half_log.append(
                log_format.encode([log_format.encode_half(d.record, d.record.store_time_ms) for d in checks]),
                origin=AppendOrigin.COORDINATOR)
        except KafkaError as exc:
            log.warning("half-message shard %d: could not count %d check(s): %s", core.shard, len(checks), exc)
            with loaded.lock:
                core.count_failed(tids)
            return
        sent = []
        with loaded.lock:
            for i, d in enumerate(checks):
                pending = core.checked_durably(d.pending.transaction_id, appended.base_offset + i, d.record)
                if pending is not None:
                    sent.append(pending)
        for pending in sent:
            check = _check_message(core.shard, pending)
            deliver = producers.get(pending.record.producer_group)
            delivered = deliver is not None and deliver(check)
            if delivered:
                self._observer.check_back_sent()
            log.info("transaction %s: check-back %d/%d to group %r%s", pending.transaction_id,
                     pending.record.check_times, self.check_max, pending.record.producer_group,
                     "" if delivered else " was not delivered (the producer went away)")

    def _discard(self, loaded: LoadedShard, discarded: list[PendingHalf], now: int) -> None:
        """Too many checks: copy to TRANS_CHECK_MAX_TIME_TOPIC, then decide DISCARD (never delivered)."""
        rows = [log_format.encode_half(dataclasses.replace(p.record, first_offset=p.first_offset), now)
                for p in discarded]
        try:
            loaded.discard_log.append(log_format.encode(rows), origin=AppendOrigin.COORDINATOR)
        except KafkaError as exc:
            log.warning("could not discard %d half message(s): %s", len(discarded), exc)
            return
        with loaded.lock:
            for pending in discarded:
                op = loaded.core.discard(pending.transaction_id)
                if op is None:
                    continue  # decided meanwhile: the discarded copy is harmless, replay sees the decision first
                loaded.ends.append(PendingEnd(op))
                self._observer.half_messages_discarded(1)
                log.warning("transaction %s: still undecided after %d checks; discarded to %s, never delivered",
                            pending.transaction_id, pending.record.check_times, CHECK_MAX_TOPIC)
        loaded.wake.set()

    # ------------------------------------------------------------ listing

    def list(self, req: pb.ListHalfMessagesRequest) -> pb.ListHalfMessagesResponse:
        out = []
        with self._lock:
            shards = list(self._shards.values())
        for loaded in shards:
            with loaded.lock:
                pendings = list(loaded.core.pending.values())
            for p in pendings:
                r = p.record
                if req.producer_group and r.producer_group != req.producer_group:
                    continue
                out.append(pb.HalfMessageListing(
                    transaction_id=p.transaction_id, producer_group=r.producer_group, topic=r.topic,
                    partition=r.partition, message_id=r.message_id, store_time_ms=r.store_time_ms,
                    check_times=r.check_times, last_check_ms=r.last_check_ms, shard=loaded.core.shard,
                    half_offset=p.latest_offset, storage=r.storage.value, unanswered_checks=p.unanswered,
                    node_id=self.node_id, next_check_ms=p.next_check_ms(self.check_interval_ms)))
        return pb.ListHalfMessagesResponse(messages=out)

    def undecided_count(self) -> int:
        """How many half messages of the owned shards are undecided (the metrics' gauge)."""
        with self._lock:
            shards = list(self._shards.values())
        total = 0
        for loaded in shards:
            with loaded.lock:
                total += len(loaded.core.pending)
        return total

    def ensure_copy_producer(self, shard: int) -> None:
        """Give the shard its idempotent producer id for copies before it decides its first commit."""
        loaded = self._owned(shard)
        with loaded.lock:
            if loaded.core.copy_producer_id >= 0:
                return
        producer_id = self._allocate_producer_id()
        with loaded.lock:
            if loaded.core.copy_producer_id < 0:
                loaded.core.copy_producer_id = producer_id


def _check_message(shard: int, pending: PendingHalf) -> pb.TransactionCheck:
    r = pending.record
    return pb.TransactionCheck(
        transaction_id=pending.transaction_id, producer_group=r.producer_group, check_times=r.check_times,
        shard=shard, half_offset=pending.latest_offset,
        message=pb.HalfMessage(topic=r.topic, partition=r.partition, key=r.key, value=r.value or b"",
                               headers=[pb.MessageHeader(key=k, value=v or b"") for k, v in r.user_headers],
                               message_id=r.message_id, tag=r.tag, keys=r.keys,
                               check_immunity_ms=r.check_immunity_ms, born_timestamp_ms=r.born_timestamp_ms))


def _message_id(shard: int, now_ms: int) -> str:
    """A unique message id when the client sent none (RocketMQ's clients always send one)."""
    return f"{now_ms:012X}{shard:04X}{uuid.uuid4().hex[:16].upper()}"
