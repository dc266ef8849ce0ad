"""What a half-message shard's decisions owe to data partitions, carried out over the node's I/O: the copy
of a committed message to its real topic (an idempotent batch, so a redone copy is a duplicate the
partition recognises; copies.py), the COMMIT or ABORT marker of a message stored in place (in_place.py,
through the node's MarkerWriter, fenced by the shard's leader epoch), then a DONE record. What fails is
tried again shortly, for as long as the shard is served here; its next owner redoes what is left.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from coordinator.rocketmq import log_format
from coordinator.rocketmq.copies import copied, copies_owed, copy_batches, split_landed
from coordinator.rocketmq.half_shard import Decision
from coordinator.rocketmq.in_place import in_place_decisions, in_place_markers
from coordinator.rocketmq.loaded_shard import LoadedShard, write
from coordinator.runtime.io import NodeIO, Outcome
from coordinator.txn.metadata import Owed
from proto import txnsim_pb2 as pb
from proto.errors import (
    ERRORS_BY_CODE,
    BrokerResponseError,
    KafkaError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
    UnknownServerError,
)
from proto.records import NO_SEQUENCE
from proto.structs import TopicPartition

log = logging.getLogger(__name__)

#: where a produce's outcome goes: (error code, message), 0 when written or a duplicate
Produced = Callable[[int, str], None]


class MarkerSender(Protocol):
    """The node's marker writer (coordinator/txn/markers.py), shared with the transaction coordinator."""

    def send_async(self, owed: Iterable[Owed], *, coordinator_epoch: int,
                   done: Callable[[frozenset[Owed]], object]) -> None: ...


#: a produce that got no answer from the partition (the node unreachable, or too slow): worth trying again
_NO_ANSWER = -1


def _result(outcome: Outcome) -> tuple[int, str]:
    """(error code, message) of a produce's outcome: its partition's answer, or the error that stood for it."""
    if isinstance(outcome, BrokerResponseError):
        return outcome.errno, str(outcome)
    if isinstance(outcome, BaseException):
        return _NO_ANSWER, str(outcome)
    if outcome.error_code:
        return outcome.error_code, outcome.error_message
    if not outcome.partitions:
        return UnknownServerError.errno, "an empty produce answer"
    return outcome.partitions[0].error_code, outcome.partitions[0].error_message


class EffectWriter:
    def __init__(self, *, io: NodeIO, owner_of: Callable[[str, int], int], markers: MarkerSender,
                 request_timeout_ms: int, retry_ms: int, finished: Callable[[LoadedShard, list[str]], None]) -> None:
        """`finished(shard, transaction ids)` hears of effects carried out (it records them DONE)."""
        self._io = io
        self._finished = finished
        self._owner_of = owner_of
        self._markers = markers
        self._timeout_ms = request_timeout_ms
        self._retry_ms = retry_ms

    # ------------------------------------------------------------ one produce, following the partition's owner

    def produce(self, tp: TopicPartition, records: bytes, done: Produced, *, transactional_id: str | None = None,
                tries: int = 3) -> None:
        """Append `records` to `tp` on its owner (acks=all); answers with retriable errors are tried again
        after a moment (ownership moving, a node unreachable), `tries` times in all."""
        request = pb.ProduceRequest(acks=-1, timeout_ms=self._timeout_ms, partitions=[
            pb.PartitionRecords(topic=tp.topic, partition=tp.partition, records=records)])
        if transactional_id is not None:
            request.transactional_id = transactional_id

        def answered(outcome: Outcome) -> None:
            code, message = _result(outcome)
            retriable = code == _NO_ANSWER or (code != 0 and ERRORS_BY_CODE.get(code, UnknownServerError).retriable)
            if retriable and tries > 1:
                self._io.after(self._retry_ms, lambda: self.produce(tp, records, done, transactional_id=transactional_id,
                                                                    tries=tries - 1), "half-produce-retry")
                return
            done(RequestTimedOutError.errno if code == _NO_ANSWER else code, message)
        self._io.call(self._owner_of(tp.topic, tp.partition), request, self._timeout_ms, answered)

    # ------------------------------------------------------------ carrying out

    def carry_out(self, shard: LoadedShard) -> None:
        """Start every copy and marker the shard owes that is not under way."""
        with shard.lock:
            if shard.released:
                return
            owed = list(shard.core.unfinished.values())
            copies = {tp: decisions for tp, decisions in copies_owed(owed).items() if tp not in shard.copying}
            shard.copying.update(copies)
            marking = [d for d in in_place_decisions(owed) if d.transaction_id not in shard.marking]
            shard.marking.update(d.transaction_id for d in marking)
        for tp, decisions in copies.items():
            self._copy(shard, tp, decisions)
        if marking:
            self._mark(shard, marking)

    def _again(self, shard: LoadedShard) -> None:
        self._io.after(self._retry_ms, lambda: self.carry_out(shard), "half-effect-retry")

    def _copy(self, shard: LoadedShard, tp: TopicPartition, decisions: list[Decision]) -> None:
        """Copy `decisions` (consecutive sequences of one partition) to `tp`."""
        def produced(code: int, message: str) -> None:
            if copied(code):
                self._copy_over(shard, tp, [d.transaction_id for d in decisions])
            elif code == OutOfOrderSequenceError.errno:
                self._find_landed(shard, tp, decisions)
            else:
                log.info("copy of %d committed message(s) to %s failed, will retry: %s", len(decisions), tp, message)
                self._copy_over(shard, tp, [], retry=True)
        self.produce(tp, copy_batches(decisions, self._io.now_ms()), produced, tries=1)

    def _find_landed(self, shard: LoadedShard, tp: TopicPartition, decisions: list[Decision]) -> None:
        """Some copies landed before (a previous owner wrote them and died before its DONE record): which."""
        request = pb.DescribeProducersRequest(partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)])
        producer_id = decisions[0].copy_producer_id

        def answered(outcome: Outcome) -> None:
            if isinstance(outcome, BaseException) or outcome.error_code or not outcome.partitions \
                    or outcome.partitions[0].error_code:
                return self._copy_over(shard, tp, [], retry=True)
            last = next((p.last_sequence for p in outcome.partitions[0].active_producers
                         if p.producer_id == producer_id), NO_SEQUENCE)
            landed, rest = split_landed(decisions, last)
            log.info("copies to %s up to sequence %d had landed already; %d left", tp, last, len(rest))
            # the rest again shortly, with every copy owed by then (one decided meanwhile may fill the gap)
            self._copy_over(shard, tp, [d.transaction_id for d in landed], retry=bool(rest))
        self._io.call(self._owner_of(tp.topic, tp.partition), request, self._timeout_ms, answered)

    def _copy_over(self, shard: LoadedShard, tp: TopicPartition, done: list[str], *, retry: bool = False) -> None:
        if done:
            self._finished(shard, done)
        with shard.lock:
            shard.copying.discard(tp)
            more = bool(shard.core.unfinished)
        if retry:
            self._again(shard)
        elif more:
            self.carry_out(shard)

    def _mark(self, shard: LoadedShard, decisions: list[Decision]) -> None:
        """Owe each marker to its partition's owner; DONE once acknowledged, sent again shortly if not."""
        markers = in_place_markers(decisions)

        def answered(acked: frozenset[Owed]) -> None:
            done = [d.transaction_id for d, marker in zip(decisions, markers, strict=True) if marker in acked]
            if done:
                self._finished(shard, done)
            with shard.lock:
                shard.marking.difference_update(d.transaction_id for d in decisions)
            if len(done) < len(decisions):
                self._again(shard)
        self._markers.send_async(markers, coordinator_epoch=shard.half_log.leader_epoch, done=answered)


def record_done(io: NodeIO, shard: LoadedShard, tids: list[str]) -> list[Callable[[], None]]:
    """Record these effects DONE (replay then owes nothing for them); the answers that waited for them (they
    need not wait for the DONE record: a crash before it is durable only makes the next owner redo the
    effects, which the partitions recognise as duplicates)."""
    with shard.lock:
        ops = shard.core.done(tids)
        waiting = [answer for tid in tids for answer in shard.waiting.pop(tid, [])]
        released = shard.released
    if ops and not released:
        write(io, shard.op_log, [log_format.encode_op(op, io.now_ms()) for op in ops], functools.partial(
            _done_written, shard.shard))
    return waiting


def _done_written(shard: int, outcome: int | KafkaError) -> None:
    if isinstance(outcome, KafkaError):
        log.info("half-message shard %d: DONE records not written (its next owner redoes them): %s", shard, outcome)

