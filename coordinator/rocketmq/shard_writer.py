"""The writer of one half-message shard: the only thread that writes its OP log.

It takes every end waiting, writes their OP records in one batch (one fsync), installs them,
then carries out what they owe: copies of committed messages to their real partitions (idempotent
batches, sequences fixed in the decision, so never a gap and never a double), or the COMMIT/ABORT
markers of messages stored in place; then it records them DONE. What fails is retried.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from coordinator.rocketmq import log_format
from coordinator.rocketmq.copies import copied, copies_owed, copy_batches, split_landed
from coordinator.rocketmq.effects import PartitionWriter
from coordinator.rocketmq.half_shard import Decision, HalfShard, PendingHalf
from coordinator.rocketmq.in_place import in_place_decisions, in_place_markers
from coordinator.rocketmq.log_format import OpRecord
from partitions import AppendOrigin, PartitionLog
from proto.errors import KafkaError, NotCoordinatorError, OutOfOrderSequenceError
from proto.structs import TopicPartition

log = logging.getLogger(__name__)

#: writes markers, returns False if not every partition acknowledged before `still_valid` said stop
WriteMarkers = Callable[..., bool]


@dataclass
class PendingEnd:
    op: OpRecord
    decided: Future[None] = field(default_factory=Future)     # the OP record is durable (or failed)
    finished: threading.Event = field(default_factory=threading.Event)


@dataclass
class LoadedShard:
    core: HalfShard
    half_log: PartitionLog
    op_log: PartitionLog
    discard_log: PartitionLog
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: (producer group, message id) -> the half message of a send being made durable now: a retry of it
    #: arriving meanwhile waits for that one instead of storing a second
    sending: dict[tuple[str, str], Future[PendingHalf]] = field(default_factory=dict)
    ends: list[PendingEnd] = field(default_factory=list)
    waiting: dict[str, PendingEnd] = field(default_factory=dict)   # tid -> end waiting for its effect
    wake: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    retry_at: float = 0.0


class ShardWriter:
    def __init__(self, *, writer: PartitionWriter, write_markers: WriteMarkers, now_ms: Callable[[], int],
                 on_decided: Callable[[], None], node_id: int, stopped: threading.Event) -> None:
        self._writer = writer
        self._write_markers = write_markers
        self._now_ms = now_ms
        self._on_decided = on_decided
        self._node_id = node_id
        self._stopped = stopped

    def start(self, shard: int, loaded: LoadedShard) -> None:
        loaded.wake.set()  # redo what the previous owner left unfinished
        threading.Thread(target=self._run, args=(shard, loaded), name=f"half-writer-{shard}", daemon=True).start()

    def _run(self, shard: int, loaded: LoadedShard) -> None:
        while not loaded.stopped.is_set() and not self._stopped.is_set():
            loaded.wake.wait(1.0)
            loaded.wake.clear()
            if loaded.stopped.is_set():
                break
            try:
                self._write_decisions(loaded)
                if loaded.core.unfinished and time.monotonic() >= loaded.retry_at:
                    self._carry_out(loaded)
            except Exception:
                log.exception("half-message shard %d: writer step failed", shard)
                loaded.retry_at = time.monotonic() + 0.5
        with loaded.lock:
            ends, loaded.ends = loaded.ends, []
        for end in ends:
            end.decided.set_exception(NotCoordinatorError(
                f"[NOT_COORDINATOR] half-message shard {shard} moved away from node {self._node_id}"))

    def _write_decisions(self, loaded: LoadedShard) -> None:
        with loaded.lock:
            ends, loaded.ends = loaded.ends, []
        if not ends:
            return
        core = loaded.core
        now = self._now_ms()
        try:
            loaded.op_log.append(log_format.encode([log_format.encode_op(e.op, now) for e in ends]),
                                 origin=AppendOrigin.COORDINATOR)
        except KafkaError as exc:
            with loaded.lock:
                core.decisions_failed([e.op for e in ends])
            for e in ends:
                e.decided.set_exception(exc)
            return
        with loaded.lock:
            for e in ends:
                decision = core.decided_durably(e.op)
                if decision.needs_effect:
                    loaded.waiting[e.op.transaction_id] = e
                else:
                    e.finished.set()
        for e in ends:
            e.decided.set_result(None)
        self._on_decided()

    def _carry_out(self, loaded: LoadedShard) -> None:
        """Copy committed messages to their real partitions, in sequence order, and write the markers of
        messages stored in place; then record them DONE."""
        with loaded.lock:
            owed = list(loaded.core.unfinished.values())
        in_place = in_place_decisions(owed)
        by_partition = copies_owed(owed)
        done: list[str] = []
        failed = False
        if in_place:
            if self._mark(loaded, in_place):
                done += [d.transaction_id for d in in_place]
            else:
                failed = True
        for tp, decisions in by_partition.items():
            landed = self._copy(tp, decisions)
            done += landed
            failed |= len(landed) < len(decisions)
        if done:
            with loaded.lock:
                ops = loaded.core.done(done)
            if ops:
                loaded.op_log.append(log_format.encode([log_format.encode_op(op, self._now_ms()) for op in ops]),
                                     origin=AppendOrigin.COORDINATOR)
            with loaded.lock:
                finished = [loaded.waiting.pop(tid) for tid in done if tid in loaded.waiting]
            for end in finished:
                end.finished.set()
        if failed:
            loaded.retry_at = time.monotonic() + 0.2
            threading.Timer(0.2, loaded.wake.set).start()

    def _mark(self, loaded: LoadedShard, decisions: list[Decision]) -> bool:
        """COMMIT or ABORT markers for messages written in place, fenced by the shard's leader epoch;
        one round of tries (a second or so): what is not acknowledged is retried by the next step."""
        markers = [marker for marker, _tp in in_place_markers(decisions)]
        give_up_at = time.monotonic() + 1.0
        return self._write_markers(markers, coordinator_epoch=loaded.half_log.leader_epoch,
                                   still_valid=lambda: not loaded.stopped.is_set() and time.monotonic() < give_up_at)

    def _copy(self, tp: TopicPartition, decisions: list[Decision]) -> list[str]:
        """Copy `decisions` (consecutive sequences) to `tp`; the transaction ids copied."""
        code, message = self._writer.produce(tp, copy_batches(decisions, self._now_ms()))
        if copied(code):
            return [d.transaction_id for d in decisions]
        if code == OutOfOrderSequenceError.errno:
            # some of these landed before (a previous owner copied them and died before its DONE record)
            last = self._writer.last_sequence(tp, decisions[0].copy_producer_id)
            if last is not None:
                landed, rest = split_landed(decisions, last)
                log.info("copies to %s up to sequence %d had landed already; %d left", tp, last, len(rest))
                return [d.transaction_id for d in landed] + (self._copy(tp, rest) if rest else [])
        log.info("copy of %d committed message(s) to %s failed, will retry: %s", len(decisions), tp, message)
        return []
