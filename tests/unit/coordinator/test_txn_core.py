"""The transaction coordinator's sans-I/O core, driven by hand: every effect is seen and carried out (or
failed, or delayed) by the test, so phase two, holds, retries and ownership changes are checked step by step."""
from __future__ import annotations

from collections import deque

import pytest

from coordinator.txn.core import (
    PREVIOUS_END_HOLD_MS,
    Reply,
    ReserveProducerIds,
    SendMarkers,
    StartTimer,
    TxnCoordinatorCore,
    WriteEntry,
)
from coordinator.txn.metadata import TxnMetadata
from proto import txnsim_pb2 as pb
from proto.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    ProducerFencedError,
    UnknownServerError,
)
from proto.structs import TopicPartition, TransactionState

S = TransactionState
EPOCH = 5


class Harness:
    """Carries out the core's effects only when the test says so."""

    def __init__(self, *, producer_ids: bool = True) -> None:
        self.core = TxnCoordinatorCore(txn_shards=1, offsets_shards=1, transaction_max_timeout_ms=60_000,
                                       transactional_id_expiration_ms=10_000,
                                       partitions_for=lambda topic: 4 if topic == "t" else None)
        self.now = 1_000
        self.tickets = 0
        self.replies: dict[int, Reply] = {}
        self.writes: deque[WriteEntry] = deque()
        self.sends: deque[SendMarkers] = deque()
        self.timers: list[StartTimer] = []
        self.reservations = 0
        self.take(self.core.begin_loading(0, EPOCH))
        self.take(self.core.loaded(0, EPOCH, {}, self.now))
        if producer_ids:
            self.take(self.core.producer_ids_reserved(1_000, 2_000, self.now))

    def take(self, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, Reply):
                assert effect.ticket not in self.replies, f"ticket {effect.ticket} answered twice"
                self.replies[effect.ticket] = effect
            elif isinstance(effect, WriteEntry):
                self.writes.append(effect)
            elif isinstance(effect, SendMarkers):
                self.sends.append(effect)
            elif isinstance(effect, StartTimer):
                self.timers.append(effect)
            elif isinstance(effect, ReserveProducerIds):
                self.reservations += 1

    def request(self, req, version: int = 2) -> int:
        self.tickets += 1
        self.take(self.core.request(self.tickets, req, self.now, transaction_version=version))
        return self.tickets

    def land(self, error=None) -> WriteEntry:
        write = self.writes.popleft()
        self.take(self.core.entry_written(write.write_id, error, self.now))
        return write

    def land_all(self) -> None:
        while self.writes:
            self.land()

    def ack(self, only=None) -> SendMarkers:
        send = self.sends.popleft()
        acked = [o for o in send.owed if only is None or o[1].partition in only]
        self.take(self.core.markers_written(send.send_id, acked, self.now))
        return send

    def fire_timers(self, kind: str) -> None:
        due = [t for t in self.timers if t.key[0] == kind]
        self.timers = [t for t in self.timers if t.key[0] != kind]
        for timer in due:
            self.now = max(self.now, timer.at_ms)
            self.take(self.core.timer_fired(timer.key, self.now))

    def answer(self, ticket: int):
        reply = self.replies[ticket]
        if reply.error is not None:
            raise reply.error
        return reply.response

    def state(self, tid: str = "tx"):
        return self.core.owned_shards()[0].entries[tid]

    # requests
    def init(self, tid: str = "tx") -> pb.InitProducerIdResponse:
        ticket = self.request(pb.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=30_000,
                                                       producer_id=-1, producer_epoch=-1))
        self.land_all()
        return self.answer(ticket)

    def add(self, ids, *partitions: int, tid: str = "tx") -> int:
        return self.request(pb.AddPartitionsToTxnRequest(
            transactional_id=tid, producer_id=ids.producer_id, producer_epoch=ids.producer_epoch,
            partitions=[pb.TopicPartitionRef(topic="t", partition=p) for p in partitions]))

    def end(self, ids, committed: bool = True, version: int = 2, tid: str = "tx") -> int:
        return self.request(pb.EndTxnRequest(transactional_id=tid, producer_id=ids.producer_id,
                                             producer_epoch=ids.producer_epoch, committed=committed), version)


def open_transaction(h: Harness, *partitions: int):
    ids = h.init()
    ticket = h.add(ids, *partitions)
    h.land_all()
    assert h.answer(ticket).results[0].error_code == 0
    return ids


def test_the_prepare_is_durable_before_end_txn_is_answered_and_markers_go_out_only_after():
    h = Harness()
    ids = open_transaction(h, 0, 1)
    ticket = h.end(ids)
    assert ticket not in h.replies and not h.sends, "answered or marked before PrepareCommit was durable"
    prepare = h.land()
    assert prepare.value.state == S.PREPARE_COMMIT and prepare.value.producer_epoch == ids.producer_epoch + 1
    assert h.answer(ticket).producer_epoch == ids.producer_epoch + 1
    send = h.sends[0]
    assert {(m.committed, tp.partition) for m, tp in send.owed} == {(True, 0), (True, 1)}
    assert send.coordinator_epoch == EPOCH
    assert not h.writes, "Complete written before the markers were acknowledged"
    h.ack()
    assert h.land().value.state == S.COMPLETE_COMMIT
    assert h.state().state == S.COMPLETE_COMMIT


def test_unacknowledged_markers_are_resent_after_a_backoff_until_every_partition_has_one():
    h = Harness()
    ids = open_transaction(h, 0, 1, 2)
    h.end(ids)
    h.land()
    h.ack(only={0})
    assert not h.writes and [t.key[0] for t in h.timers] == ["markers"]
    first_delay = h.timers[0].at_ms - h.now
    h.fire_timers("markers")
    assert {tp.partition for _m, tp in h.sends[0].owed} == {1, 2}, "a resend repeats only what is owed"
    h.ack(only=set())
    assert h.timers[0].at_ms - h.now > first_delay, "the backoff grows"
    h.fire_timers("markers")
    h.ack()
    assert h.land().value.state == S.COMPLETE_COMMIT


def test_the_next_transactions_first_add_is_held_until_the_previous_complete_lands():
    h = Harness()
    ids = open_transaction(h, 0)
    end = h.end(ids)
    h.land()
    bumped = h.answer(end)
    held = h.add(bumped, 1)
    assert held not in h.replies, "answered while the previous markers were out"
    h.ack()
    both = h.land()  # CompleteCommit and the held call's Ongoing, one batch, one fsync
    assert [v.state for v in (*both.passing, both.value)] == [S.COMPLETE_COMMIT, S.ONGOING]
    assert both.value.partitions == frozenset({TopicPartition("t", 1)})
    assert not h.writes
    assert h.answer(held).results[0].error_code == 0
    assert h.state().state == S.ONGOING


def test_adds_held_for_the_previous_markers_all_ride_on_the_complete_write():
    """Implicit add (KIP-890 part 2): each leader of the next transaction adds its partition at once."""
    h = Harness()
    ids = open_transaction(h, 0)
    end = h.end(ids)
    h.land()
    bumped = h.answer(end)
    held = [h.add(bumped, p) for p in (1, 2, 3)]
    offsets = h.request(pb.AddOffsetsToTxnRequest(transactional_id="tx", producer_id=bumped.producer_id,
                                                  producer_epoch=bumped.producer_epoch, group_id="g"))
    h.ack()
    both = h.land()
    assert [v.state for v in (*both.passing, both.value)] == [S.COMPLETE_COMMIT, S.ONGOING]
    assert {tp.partition for tp in both.value.partitions if tp.topic == "t"} == {1, 2, 3}
    assert len(both.value.partitions) == 4, "the group's offsets partition is in the same write"
    assert not h.writes, "one durable write answers every held add"
    assert all(h.answer(t).results[0].error_code == 0 for t in held)
    assert h.answer(offsets).error_code == 0


def test_adds_arriving_while_a_write_is_in_flight_share_the_next_write():
    h = Harness()
    ids = open_transaction(h, 0)  # Ongoing with partition 0
    first = h.add(ids, 1)
    waiting = [h.add(ids, 2), h.add(ids, 3), h.add(ids, 1)]
    assert len(h.writes) == 1 and not set(waiting) & set(h.replies), "the later adds wait for the first"
    h.land()
    assert h.answer(first).results[0].error_code == 0
    (write,) = h.writes
    assert {tp.partition for tp in write.value.partitions} == {0, 1, 2, 3}
    h.land()
    assert all(h.answer(t).results[0].error_code == 0 for t in waiting)
    fenced = h.add(pb.InitProducerIdResponse(producer_id=ids.producer_id, producer_epoch=ids.producer_epoch - 1), 2)
    with pytest.raises(ProducerFencedError):
        h.answer(fenced)


def test_a_refused_add_among_held_ones_is_answered_alone_and_the_rest_still_share_a_write():
    h = Harness()
    ids = open_transaction(h, 0)
    h.add(ids, 1)
    zombie = h.add(pb.InitProducerIdResponse(producer_id=ids.producer_id, producer_epoch=ids.producer_epoch - 1), 2)
    good = [h.add(ids, 2), h.add(ids, 3)]
    with pytest.raises(ProducerFencedError):
        h.answer(zombie)  # refused at once: a fenced epoch does not wait
    h.land()
    (write,) = h.writes
    assert {tp.partition for tp in write.value.partitions} == {0, 1, 2, 3}
    h.land()
    assert all(h.answer(t).results[0].error_code == 0 for t in good)


def test_adds_held_on_a_shard_that_moved_away_are_not_written_when_its_last_write_lands():
    h = Harness()
    ids = open_transaction(h, 0)
    h.add(ids, 1)  # its write is in flight
    held = h.add(ids, 2)
    h.take(h.core.unload(0))
    with pytest.raises(NotCoordinatorError):
        h.answer(held)
    h.land()
    assert not h.writes, "a held add was written by a coordinator that no longer owns the shard"


def test_a_held_add_sharing_a_failed_complete_write_waits_for_the_retry_of_both():
    h = Harness()
    ids = open_transaction(h, 0)
    end = h.end(ids)
    h.land()
    held = h.add(h.answer(end), 1)
    h.ack()
    h.land(error=UnknownServerError("[UNKNOWN_SERVER_ERROR] disk full"))
    assert held not in h.replies, "answered although neither value was written"
    assert h.state().state == S.PREPARE_COMMIT
    h.fire_timers("complete")
    both = h.land()
    assert [v.state for v in (*both.passing, both.value)] == [S.COMPLETE_COMMIT, S.ONGOING]
    assert h.answer(held).results[0].error_code == 0


def test_a_held_add_from_a_fenced_producer_is_refused_after_the_complete_lands_alone():
    h = Harness()
    ids = open_transaction(h, 0)
    end = h.end(ids)
    h.land()
    held = h.add(ids, 1)  # the epoch before the end's bump: a zombie of the previous transaction
    h.ack()
    alone = h.land()
    assert alone.passing == () and alone.value.state == S.COMPLETE_COMMIT
    with pytest.raises(ProducerFencedError):
        h.answer(held)
    assert h.answer(end).producer_epoch == ids.producer_epoch + 1


def test_a_held_add_whose_deadline_passes_hears_concurrent_transactions():
    h = Harness()
    ids = open_transaction(h, 0)
    end = h.end(ids)
    h.land()
    held = h.add(h.answer(end), 1)
    (timer,) = [t for t in h.timers if t.key[0] == "wait"]
    assert timer.at_ms == h.now + PREVIOUS_END_HOLD_MS
    h.fire_timers("wait")
    with pytest.raises(ConcurrentTransactionsError):
        h.answer(held)


def test_a_failed_write_installs_nothing_and_the_client_hears_a_retriable_error():
    h = Harness()
    ids = open_transaction(h, 0)
    ticket = h.end(ids)
    h.land(error=UnknownServerError("[UNKNOWN_SERVER_ERROR] disk full"))
    with pytest.raises(CoordinatorNotAvailableError):
        h.answer(ticket)
    assert h.state().state == S.ONGOING and not h.sends
    ticket = h.end(ids)
    h.land(error=NotLeaderOrFollowerError("[NOT_LEADER_OR_FOLLOWER] fenced by a newer owner"))
    with pytest.raises(NotCoordinatorError):
        h.answer(ticket)


def test_a_failed_complete_write_is_retried_by_a_timer_not_a_sleeping_thread():
    h = Harness()
    ids = open_transaction(h, 0)
    h.end(ids)
    h.land()
    h.ack()
    h.land(error=UnknownServerError("[UNKNOWN_SERVER_ERROR] slow disk"))
    assert [t.key[0] for t in h.timers] == ["complete"]
    h.fire_timers("complete")
    assert h.land().value.state == S.COMPLETE_COMMIT
    assert h.state().state == S.COMPLETE_COMMIT


def test_a_shard_moving_away_stops_phase_two_and_its_next_owner_finishes_it():
    h = Harness()
    ids = open_transaction(h, 3)
    h.end(ids)
    prepare = h.land()
    send = h.sends.popleft()
    h.take(h.core.unload(0))
    h.take(h.core.markers_written(send.send_id, list(send.owed), h.now))
    assert not h.writes, "a node that lost the shard wrote Complete"
    successor = TxnCoordinatorCore(txn_shards=1, offsets_shards=1, transaction_max_timeout_ms=60_000,
                                   transactional_id_expiration_ms=10_000, partitions_for=lambda t: 4)
    successor.begin_loading(0, EPOCH + 1)
    effects = successor.loaded(0, EPOCH + 1, {"tx": prepare.value}, h.now)
    (resend,) = [e for e in effects if isinstance(e, SendMarkers)]
    assert resend.coordinator_epoch == EPOCH + 1 and resend.owed == send.owed


def test_requests_wait_for_producer_ids_to_be_reserved_and_hear_an_error_if_that_fails():
    h = Harness(producer_ids=False)
    ticket = h.request(pb.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=30_000,
                                                producer_id=-1, producer_epoch=-1))
    assert h.reservations == 1 and ticket not in h.replies and not h.writes
    h.take(h.core.producer_ids_reserved(7_000, 7_010, h.now))
    h.land()
    assert h.answer(ticket).producer_id == 7_000
    assert h.reservations == 2, "fewer ids left than the low-water mark: the next block is asked for early"
    second = h.request(pb.InitProducerIdRequest(transaction_timeout_ms=1))  # idempotent: needs only an id
    assert h.answer(second).producer_id == 7_001
    for _ in range(8):
        h.request(pb.InitProducerIdRequest(transaction_timeout_ms=1))
    waiting = h.request(pb.InitProducerIdRequest(transaction_timeout_ms=1))
    assert waiting not in h.replies
    h.take(h.core.producer_ids_failed(CoordinatorNotAvailableError("no space"), h.now))
    with pytest.raises(CoordinatorNotAvailableError):
        h.answer(waiting)


def test_a_new_instance_fences_the_open_transaction_and_hears_concurrent_transactions_until_it_is_aborted():
    h = Harness()
    old = open_transaction(h, 0)
    ticket = h.request(pb.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=30_000,
                                                producer_id=-1, producer_epoch=-1))
    fence = h.land()
    assert fence.value.state == S.PREPARE_ABORT and fence.value.producer_epoch == old.producer_epoch + 1
    with pytest.raises(ConcurrentTransactionsError):
        h.answer(ticket)
    assert not any(m.committed for m, _tp in h.sends[0].owed)
    h.ack()
    h.land()
    stale = h.add(old, 1)
    with pytest.raises(ProducerFencedError):
        h.answer(stale)


def join(h: Harness, task: int, batch: int = 1) -> int:
    return h.request(pb.JoinBatchTxnRequest(batch_txn_id="q", batch_id=batch, task=task, attempt=0,
                                            transaction_timeout_ms=30_000))


def test_batch_joins_at_the_same_moment_queue_behind_each_other_instead_of_failing():
    h = Harness()
    first, second = join(h, 0), join(h, 1)
    assert len(h.writes) == 1, "two writes of one batch in flight"
    h.land()
    h.land()
    a, b = h.answer(first), h.answer(second)
    assert a.producer_id != b.producer_id
    assert [p.task for p in h.state("q").participants] == [0, 1]


def test_a_batch_commit_waits_for_its_markers_when_asked_and_commits_winners_only():
    h = Harness()
    tasks = [join(h, 0), join(h, 1)]
    h.land_all()
    pids = [h.answer(t).producer_id for t in tasks]
    for pid, partition in zip(pids, (0, 1)):
        h.land_all()
        ticket = h.request(pb.AddPartitionsToTxnRequest(
            transactional_id="q", producer_id=pid, producer_epoch=0,
            partitions=[pb.TopicPartitionRef(topic="t", partition=partition)]))
        h.land_all()
        assert h.answer(ticket).results[0].error_code == 0
    end = h.request(pb.EndBatchTxnRequest(batch_txn_id="q", batch_id=1, committed=True, winners=[pids[0]],
                                          wait_ms=5_000))
    h.land()
    assert end not in h.replies, "answered before the markers completed"
    send = h.ack()
    assert {(m.producer_id, m.committed) for m, _tp in send.owed} == {(pids[0], True), (pids[1], False)}
    h.land()
    assert h.answer(end).completed
    repeat = h.request(pb.EndBatchTxnRequest(batch_txn_id="q", batch_id=1, committed=True, winners=[pids[0]]))
    assert h.answer(repeat).repeated_commit and not h.writes


def test_every_request_gets_exactly_one_reply_even_when_its_shard_moves_while_it_waits():
    h = Harness()
    ids = open_transaction(h, 0)
    end = h.end(ids)
    h.land()
    held = h.add(h.answer(end), 1)
    writing = h.end(ids, committed=False, version=1)  # rejected at once: the epoch moved
    h.take(h.core.unload(0))
    with pytest.raises(NotCoordinatorError):
        h.answer(held)
    assert writing in h.replies
    h.fire_timers("wait")  # a timer of a call already answered does nothing
    assert len(h.replies) == h.tickets


def load_stamped_ahead(h: Harness, ahead: int) -> None:
    """Take the shard over with one Ongoing transaction (timeout 1 s) stamped `ahead` ms past this clock."""
    stamp = h.now + ahead
    meta = TxnMetadata("skewed", 1_500, 3, 1_000, S.ONGOING, frozenset({TopicPartition("t", 0)}),
                       start_time_ms=stamp, last_update_time_ms=stamp)
    h.take(h.core.begin_loading(0, EPOCH + 1))
    h.take(h.core.loaded(0, EPOCH + 1, {"skewed": meta}, h.now))


def test_a_transaction_stamped_ahead_of_this_clock_times_out_a_timeout_after_the_coordinator_saw_it():
    """The shard's previous owner stamped the start with a clock a minute ahead of this one (or this clock
    stepped back): the abort comes a timeout after this coordinator first read the stamp as the future, not a
    minute late, which would hold the LSO of every partition of the transaction that long."""
    h = Harness()
    load_stamped_ahead(h, 60_000)
    assert h.core.abort_timed_out(h.now) == []
    assert h.core.abort_timed_out(h.now + 999) == [], "aborted before its timeout had passed here"
    (fence,) = h.core.abort_timed_out(h.now + 1_001)
    assert isinstance(fence, WriteEntry) and fence.value.state == S.PREPARE_ABORT


def test_a_future_stamp_keeps_counting_from_when_it_was_seen_after_this_clock_passes_it():
    h = Harness()
    load_stamped_ahead(h, 5_000)
    assert h.core.abort_timed_out(h.now) == []  # seen at 1,000: due after 2,000, not after 6,000
    (fence,) = h.core.abort_timed_out(h.now + 5_001)
    assert isinstance(fence, WriteEntry) and fence.value.state == S.PREPARE_ABORT
