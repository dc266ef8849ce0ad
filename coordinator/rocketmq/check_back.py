"""Check-backs of the half shards a node serves, over the node's I/O: one pass at a time, timed by the next
check due (at least once a second), across every shard.

A due check is counted before it is sent: the message is appended again with count + 1, and only once that
is durable is the check handed to a live producer of its group, connected here or to a peer (asked with a
DeliverCheck probe, RocketMQ's broker likewise picks one channel of the group). A check that finds no live
producer anywhere is not counted; it is looked at again after an interval. After `check_max` checks the
message goes to TRANS_CHECK_MAX_TIME_TOPIC and is decided DISCARD, never delivered.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Protocol

from coordinator.observers import HalfMessageObserver
from coordinator.rocketmq import log_format
from coordinator.rocketmq.half_shard import CheckAction, DueCheck, PendingHalf
from coordinator.rocketmq.loaded_shard import LoadedShard, write
from coordinator.rocketmq.log_format import OpRecord
from coordinator.runtime.io import Cancellable, NodeIO, Outcome
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError
from proto.planted_bugs import PlantedBug
from proto.structs import CHECK_MAX_TOPIC

log = logging.getLogger(__name__)

#: a pass runs at least this often (messages stored meanwhile wake it sooner), and at most this often
MAX_PASS_GAP_MS = 1000
MIN_PASS_GAP_MS = 5
#: after a write of the shard failed (its log fenced, closed, or the disk refusing): the next try, no sooner
AFTER_FAILURE_MS = 200
#: a route to producers of a group: on this node (LOCAL), or the id of a peer holding one
LOCAL = -1
#: records a decision: (shard, OP record, answer or None)
Decide = Callable[[LoadedShard, OpRecord, Callable[[KafkaError | None], None] | None], None]


class LocalProducers(Protocol):
    """The producers connected to this node that answer check-backs (producers.ProducerRegistry; the
    simulator's streams)."""

    def pick(self, group: str) -> object | None: ...

    def deliver(self, check: pb.TransactionCheck) -> bool: ...


class CheckBack:
    def __init__(self, *, io: NodeIO, check_interval_ms: int, check_max: int, producers: LocalProducers,
                 peers: Callable[[], Iterable[int]], shards: Callable[[], list[LoadedShard]], decide: Decide,
                 observer: HalfMessageObserver, request_timeout_ms: int,
                 planted_bug: PlantedBug | None = None) -> None:
        self._io = io
        self.check_interval_ms = check_interval_ms
        self.check_max = check_max
        self._producers = producers
        self._peers = peers
        self._shards = shards
        self._decide = decide
        self._observer = observer
        self._timeout_ms = request_timeout_ms
        self._planted = planted_bug
        self._lock = threading.Lock()
        self._armed: Cancellable | None = None
        self._armed_at: int | None = None
        self._closed = False

    # ------------------------------------------------------------ when passes run

    def wake(self, due_ms: int | None = None) -> None:
        """Make sure a pass runs by `due_ms` (now when None)."""
        now = self._io.now_ms()
        due = now if due_ms is None else max(now, due_ms)
        with self._lock:
            if self._closed or (self._armed_at is not None and self._armed_at <= due):
                return
            previous, self._armed_at = self._armed, due
            self._armed = self._io.after(due - now, self._pass, "half-checks")
        if previous is not None:
            previous.cancel()

    def _wake_for(self, shard: LoadedShard) -> None:
        """Messages of `shard` are undecided again (counted, or no producer found): a pass by their next check.
        The pass that picked them could not plan for them while they were being checked."""
        with shard.lock:
            due = shard.core.next_due_ms()
        if due is not None:
            self.wake(due)

    def wake_after_failure(self) -> None:
        """A write failed and left messages due again: try them after a pause, not at once (a fenced log
        fails every write at once)."""
        self.wake(self._io.now_ms() + AFTER_FAILURE_MS)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            armed, self._armed, self._armed_at = self._armed, None, None
        if armed is not None:
            armed.cancel()

    def _pass(self) -> None:
        with self._lock:
            self._armed, self._armed_at = None, None
        now = self._io.now_ms()
        next_due = now + MAX_PASS_GAP_MS
        try:
            for shard in self._shards():
                self._check_shard(shard, now)
                with shard.lock:
                    due = shard.core.next_due_ms()
                if due is not None:
                    next_due = min(next_due, due)
        finally:
            self.wake(max(next_due, now + MIN_PASS_GAP_MS))

    # ------------------------------------------------------------ one shard's due checks

    def _check_shard(self, shard: LoadedShard, now: int) -> None:
        with shard.lock:
            if shard.released:
                return
            due = shard.core.due(now)
            checks = [d for d in due if d.action is CheckAction.CHECK]
            shard.core.counting(d.pending.transaction_id for d in due)  # no second pass plans them meanwhile
        discards = [d.pending for d in due if d.action is CheckAction.DISCARD]
        if discards:
            self._discard(shard, discards, now)
        by_group: dict[str, list[DueCheck]] = defaultdict(list)
        for d in checks:
            by_group[d.record.producer_group].append(d)
        for group, group_checks in by_group.items():
            self._route(group, functools.partial(self._routed, shard, group_checks, now))

    def _route(self, group: str, done: Callable[[int | None], None]) -> None:
        """Where checks of `group` go: LOCAL, a peer that holds a producer of it, or None (no live producer)."""
        if self._producers.pick(group) is not None:
            done(LOCAL)
            return
        peers = [peer for peer in self._peers() if peer != self._io.node_id]
        if not peers:
            done(None)
            return
        state = {"waiting": len(peers), "found": False}
        lock = threading.Lock()
        probe = pb.DeliverCheckRequest(check=pb.TransactionCheck(producer_group=group), probe_only=True)

        def answered(peer: int, outcome: Outcome) -> None:
            held = isinstance(outcome, pb.DeliverCheckResponse) and outcome.delivered and not outcome.error_code
            with lock:
                state["waiting"] -= 1
                first = held and not state["found"]
                state["found"] = state["found"] or held
                none = state["waiting"] == 0 and not state["found"]
            if first:
                done(peer)
            elif none:
                done(None)

        for peer in peers:
            with lock:
                if state["found"]:  # the I/O answered inline: the peers after it need not be asked
                    return
            self._io.call(peer, probe, self._timeout_ms, functools.partial(answered, peer))

    def _routed(self, shard: LoadedShard, checks: list[DueCheck], now: int, route: int | None) -> None:
        tids = [d.pending.transaction_id for d in checks]
        if route is None:
            with shard.lock:
                for tid in tids:
                    shard.core.unanswered(tid, now)
            log.info("half-message shard %d: no live producer of group %r to check %d message(s) with; trying "
                     "again in %d ms", shard.shard, checks[0].record.producer_group, len(checks),
                     self.check_interval_ms)
            self._wake_for(shard)
            return
        if self._planted is PlantedBug.CHECK_COUNT_IN_MEMORY:
            # the planted bug: the count moves on in memory only; a crash or a failover starts it again
            with shard.lock:
                sent = [p for d in checks
                        if (p := shard.core.checked_durably(d.pending.transaction_id, d.pending.latest_offset,
                                                            d.record)) is not None]
            self._send(shard, sent, route)
            return
        rows = [log_format.encode_half(d.record, d.record.store_time_ms) for d in checks]

        def counted(outcome: int | KafkaError) -> None:
            if isinstance(outcome, KafkaError):
                log.warning("half-message shard %d: could not count %d check(s): %s", shard.shard, len(checks),
                            outcome)
                with shard.lock:
                    shard.core.count_failed(tids)
                self.wake_after_failure()
                return
            with shard.lock:
                if shard.released:
                    return  # the next owner replays the counts
                sent = [p for i, d in enumerate(checks)
                        if (p := shard.core.checked_durably(d.pending.transaction_id, outcome + i, d.record))
                        is not None]
            self._send(shard, sent, route)
            self._wake_for(shard)
        write(self._io, shard.half_log, rows, counted)

    def _send(self, shard: LoadedShard, sent: list[PendingHalf], route: int) -> None:
        for pending in sent:
            check = check_message(shard.shard, pending)
            self._observer.check_back_sent(pending.transaction_id, pending.record, route != LOCAL)
            if route == LOCAL:
                delivered = self._producers.deliver(check)
                log.info("transaction %s: check-back %d/%d to group %r%s", pending.transaction_id,
                         pending.record.check_times, self.check_max, pending.record.producer_group,
                         "" if delivered else " was not delivered (the producer went away)")
            else:  # one-way as far as the count goes: a check lost on the way is asked again next interval
                self._io.call(route, pb.DeliverCheckRequest(check=check), self._timeout_ms, _delivered_by_peer)

    # ------------------------------------------------------------ too many checks

    def _discard(self, shard: LoadedShard, discarded: list[PendingHalf], now: int) -> None:
        """Too many checks: to TRANS_CHECK_MAX_TIME_TOPIC first, then decided DISCARD (never delivered)."""
        rows = [log_format.encode_half(dataclasses.replace(p.record, first_offset=p.first_offset), now)
                for p in discarded]

        def stored(outcome: int | KafkaError) -> None:
            if isinstance(outcome, KafkaError):
                log.warning("could not discard %d half message(s): %s", len(discarded), outcome)
                with shard.lock:
                    shard.core.count_failed(p.transaction_id for p in discarded)
                self.wake_after_failure()
                return
            for pending in discarded:
                with shard.lock:
                    op = None if shard.released else shard.core.discard(pending.transaction_id)
                if op is None:
                    continue  # decided meanwhile: the discarded copy is harmless, replay sees the decision first
                self._observer.half_message_discarded(pending.transaction_id)
                log.warning("transaction %s: still undecided after %d checks; discarded to %s, never delivered",
                            pending.transaction_id, pending.record.check_times, CHECK_MAX_TOPIC)
                self._decide(shard, op, None)
        write(self._io, shard.discard_log, rows, stored)


def _delivered_by_peer(outcome: Outcome) -> None:
    if not isinstance(outcome, pb.DeliverCheckResponse) or not outcome.delivered:
        log.info("a check-back handed to a peer was not delivered (%s); it is asked again next interval", outcome)


def check_message(shard: int, pending: PendingHalf) -> pb.TransactionCheck:
    r = pending.record
    return pb.TransactionCheck(
        transaction_id=pending.transaction_id, producer_group=r.producer_group, check_times=r.check_times,
        shard=shard, half_offset=pending.latest_offset,
        message=pb.HalfMessage(topic=r.topic, partition=r.partition, key=r.key, value=r.value or b"",
                               headers=[pb.MessageHeader(key=k, value=v or b"") for k, v in r.user_headers],
                               message_id=r.message_id, tag=r.tag, keys=r.keys,
                               check_immunity_ms=r.check_immunity_ms, born_timestamp_ms=r.born_timestamp_ms))
