"""RecordAccumulator: batching by size and linger, draining heads only, memory bounds, expiry."""
from __future__ import annotations

import threading

import pytest

from producer.accumulator import RecordAccumulator
from proto.errors import IllegalStateError, KafkaTimeoutError, NotLeaderOrFollowerError
from proto.records import iter_batches
from proto.structs import TopicPartition

TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock, **kwargs: int) -> RecordAccumulator:
    settings = dict(batch_size=1000, linger_ms=10, buffer_memory=1 << 20)
    settings.update(kwargs)
    return RecordAccumulator(clock=clock, **settings)


def append(acc: RecordAccumulator, tp: TopicPartition = TP0, value: bytes = b"x" * 100, **kwargs: object):
    return acc.append(tp, 1000, None, value, [], max_block_s=1.0, **kwargs)


def test_records_share_a_batch_until_batch_size() -> None:
    clock = Clock()
    acc = make(clock)
    futures = [append(acc) for _ in range(20)]
    batches = acc.incomplete_batches()
    assert len(batches) > 1
    assert sum(b.record_count for b in batches) == 20
    assert all(b.builder.size <= 1000 + 130 for b in batches)
    assert {f._result for f in futures[:3]} == {futures[0]._result}


def test_a_batch_is_ready_after_linger_not_before() -> None:
    clock = Clock()
    acc = make(clock)
    append(acc)
    ready, next_at = acc.ready(clock.now)
    assert ready == [] and next_at == pytest.approx(100.010)
    clock.now += 0.010
    ready, _ = acc.ready(clock.now)
    assert [b.topic_partition for b in ready] == [TP0]


def test_a_full_batch_is_ready_at_once() -> None:
    clock = Clock()
    acc = make(clock)
    for _ in range(12):
        append(acc)
    ready, _ = acc.ready(clock.now)
    assert len(ready) == 1 and ready[0].closed


def test_flush_makes_every_head_ready() -> None:
    clock = Clock()
    acc = make(clock)
    append(acc, TP0)
    append(acc, TP1)
    acc.begin_flush()
    ready, _ = acc.ready(clock.now)
    assert {b.topic_partition for b in ready} == {TP0, TP1}
    acc.end_flush()
    assert acc.ready(clock.now)[0] == []


def test_only_the_head_is_drained_and_nothing_while_it_is_in_flight() -> None:
    clock = Clock()
    acc = make(clock, batch_size=200)
    for _ in range(6):
        append(acc)  # three full batches for one partition
    ready, _ = acc.ready(clock.now)
    assert len(ready) == 1
    head = ready[0]
    acc.close_for_send(head)
    head.build(1, 0, 0, False)
    head.in_flight = True
    assert acc.ready(clock.now)[0] == []  # one batch in flight per partition
    acc.complete(head, base_offset=0)
    ready, _ = acc.ready(clock.now)
    assert len(ready) == 1 and ready[0] is not head


def test_a_retry_waits_for_its_backoff_and_keeps_its_bytes() -> None:
    clock = Clock()
    acc = make(clock)
    append(acc)
    clock.now += 1
    (head,), _ = acc.ready(clock.now)
    acc.close_for_send(head)
    payload = head.build(7, 0, 0, True)
    head.retry_at = clock.now + 0.5
    append(acc)  # lands in a new batch behind the closed head
    ready, next_at = acc.ready(clock.now)
    assert ready == [] and next_at == pytest.approx(clock.now + 0.5)
    clock.now += 0.5
    (again,), _ = acc.ready(clock.now)
    assert again is head and again.payload == payload
    (batch,) = iter_batches(payload)
    assert batch.header.producer_id == 7 and batch.header.is_transactional


def test_abort_on_new_batch_appends_nothing() -> None:
    clock = Clock()
    acc = make(clock)
    assert append(acc, abort_on_new_batch=True) is None
    assert acc.incomplete_batches() == []
    append(acc)
    assert append(acc, abort_on_new_batch=True) is not None


def test_completing_a_batch_resolves_every_future_and_frees_memory() -> None:
    clock = Clock()
    acc = make(clock)
    futures = [append(acc) for _ in range(3)]
    assert acc.buffered_bytes > 0
    (batch,) = acc.incomplete_batches()
    acc.complete(batch, base_offset=10)
    assert [f.get(0).offset for f in futures] == [10, 11, 12]
    assert acc.buffered_bytes == 0 and not acc.has_incomplete()


def test_send_blocks_on_buffer_memory_then_times_out() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=10, buffer_memory=300)
    append(acc, value=b"x" * 200)
    with pytest.raises(KafkaTimeoutError, match="buffer_memory"):
        acc.append(TP1, 0, None, b"y" * 200, [], max_block_s=0.05)


def test_send_blocked_on_memory_resumes_when_a_batch_completes() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=10, buffer_memory=300)
    append(acc, value=b"x" * 200)
    (batch,) = acc.incomplete_batches()
    started = threading.Event()
    results: list[object] = []

    def blocked_send() -> None:
        started.set()
        results.append(acc.append(TP1, 0, None, b"y" * 200, [], max_block_s=5.0))

    thread = threading.Thread(target=blocked_send)
    thread.start()
    started.wait(1)
    acc.complete(batch, base_offset=0)
    thread.join(5)
    assert results and results[0] is not None


def test_expired_batches_leave_the_queue_but_in_flight_ones_stay() -> None:
    clock = Clock()
    acc = make(clock, batch_size=200)
    for _ in range(4):
        append(acc)
    (head,), _ = acc.ready(clock.now)
    head.in_flight = True
    clock.now += 10
    expired, _ = acc.expired(clock.now, delivery_timeout_s=5)
    assert head not in expired and len(expired) == 3  # one record per batch at this size
    assert acc.ready(clock.now)[0] == [] and set(acc.incomplete_batches()) == {head, *expired}


def test_take_unsent_keeps_in_flight_batches() -> None:
    clock = Clock()
    acc = make(clock)
    append(acc, TP0)
    append(acc, TP1)
    (b0,) = [b for b in acc.incomplete_batches() if b.topic_partition == TP0]
    b0.in_flight = True
    taken = acc.take_unsent()
    assert [b.topic_partition for b in taken] == [TP1]
    acc.complete_all(taken, lambda b: NotLeaderOrFollowerError("x"))
    assert acc.incomplete_batches() == [b0]


def test_sender_is_woken_when_a_new_batch_would_outlive_its_sleep() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=0, buffer_memory=1 << 20)
    woke = threading.Event()

    def sender() -> None:
        acc.await_wakeup(acc.clock() + 30)  # a long sleep: only a wakeup ends it quickly
        woke.set()

    thread = threading.Thread(target=sender)
    thread.start()
    # the sender may not be asleep yet; the flag it finds on waking covers that case too
    append(acc)
    assert woke.wait(5)
    thread.join(5)


def test_closed_accumulator_rejects_appends() -> None:
    acc = make(Clock())
    acc.close()
    with pytest.raises(IllegalStateError, match="closed"):
        append(acc)


# ---------------------------------------------------------------- several batches of a partition in flight


def fill(acc: RecordAccumulator, clock: Clock, batches: int) -> list:
    """`batches` batches of one 100-byte record each (a 200-byte batch has room for one), in queue order."""
    for _ in range(batches):
        append(acc)
        clock.now += 0.001
    clock.now += 0.010  # the last one has lingered too
    return sorted(acc.incomplete_batches(), key=lambda b: b.created)


def send(batch, sequence: int) -> None:
    """What the sender does with a drained batch: seal, build with its sequence, mark in flight."""
    batch.closed = True
    batch.build(1, 0, sequence, False)
    batch.in_flight = True


def test_up_to_max_in_flight_batches_of_a_partition_are_drained_in_queue_order() -> None:
    clock = Clock()
    acc = make(clock, batch_size=200, max_in_flight=5)
    queued = fill(acc, clock, 7)
    ready, _ = acc.ready(clock.now, next_sequence=lambda tp: 10)
    assert ready == queued[:5]
    for i, batch in enumerate(ready):
        send(batch, 10 + i)
    assert acc.ready(clock.now, next_sequence=lambda tp: 15)[0] == []  # five in flight: the limit
    acc.complete(ready[0], base_offset=0)
    assert acc.ready(clock.now, next_sequence=lambda tp: 15)[0] == [queued[5]]


def test_an_epochs_first_batch_goes_alone_with_those_drained_beside_it() -> None:
    """Sequence 0 opens an epoch on the partition: until the node holds that epoch's state it would take any
    sequence, so only the batches drained with the first one (the sender puts them in its record set, which
    the node appends whole and in order) go before the first is answered."""
    clock = Clock()
    acc = make(clock, batch_size=200, max_in_flight=5)
    queued = fill(acc, clock, 3)
    ready, _ = acc.ready(clock.now, next_sequence=lambda tp: 0)
    assert ready == queued[:3] and all(b.exclusive for b in ready)
    for i, batch in enumerate(ready):
        send(batch, i)
    append(acc)
    clock.now += 1
    assert acc.ready(clock.now, next_sequence=lambda tp: 3)[0] == []
    for batch in ready:
        acc.complete(batch, base_offset=0)
    (fourth,), _ = acc.ready(clock.now, next_sequence=lambda tp: 3)
    assert not fourth.exclusive


def test_a_new_epoch_waits_for_batches_of_the_old_one_in_flight() -> None:
    clock = Clock()
    acc = make(clock, batch_size=200, max_in_flight=5)
    old, new = fill(acc, clock, 2)
    send(old, 7)
    assert acc.ready(clock.now, next_sequence=lambda tp: 0)[0] == []
    acc.complete(old, base_offset=0)
    assert acc.ready(clock.now, next_sequence=lambda tp: 0)[0] == [new]


def test_a_resend_goes_only_from_the_head_and_alone() -> None:
    clock = Clock()
    acc = make(clock, batch_size=200, max_in_flight=5)
    b0, b1, b2, b3 = fill(acc, clock, 4)
    for i, batch in enumerate((b0, b1, b2)):
        send(batch, 2 * i + 2)
    b1.in_flight = False  # b1 is answered first (it overtook b0: OUT_OF_ORDER_SEQUENCE) and waits to be resent
    assert acc.ready(clock.now, next_sequence=lambda tp: 8)[0] == []  # not the head: it waits for b0
    assert acc.has_earlier_incomplete(b1) and not acc.has_earlier_incomplete(b0)
    acc.complete(b0, base_offset=0)
    assert not acc.has_earlier_incomplete(b1)
    (resend,), _ = acc.ready(clock.now, next_sequence=lambda tp: 8)
    assert resend is b1 and resend.exclusive  # b3, though ready, stays behind the resend
    b1.in_flight = True
    assert acc.ready(clock.now, next_sequence=lambda tp: 8)[0] == []  # nothing else while the resend is out
    acc.complete(b1, base_offset=2)
    assert acc.ready(clock.now, next_sequence=lambda tp: 8)[0] == [b3]  # b2 is still in flight, b3 may join it


def test_a_batch_drained_behind_an_unanswered_one_is_marked_so_a_refusal_for_overtaking_it_is_resent() -> None:
    """The node may take two requests of a partition in either order, and the earlier batch's success may be
    handled before the later one's OUT_OF_ORDER_SEQUENCE: by then nothing earlier is incomplete, so the sender
    asks `sent_behind` whether it could have overtaken one."""
    clock = Clock()
    acc = make(clock, batch_size=200, max_in_flight=5)
    b0, b1, b2 = fill(acc, clock, 3)
    send(b0, 0)
    ready, _ = acc.ready(clock.now, next_sequence=lambda tp: 2)
    assert ready == [b1, b2] and b1.sent_behind and b2.sent_behind
    send(b1, 1)
    send(b2, 2)
    b1.in_flight = False  # refused for overtaking b0, which then succeeds
    acc.complete(b0, base_offset=0)
    assert not acc.has_earlier_incomplete(b1)
    (resend,), _ = acc.ready(clock.now, next_sequence=lambda tp: 4)
    assert resend is b1 and not b1.sent_behind  # resent alone from the head: a second refusal is a real gap
