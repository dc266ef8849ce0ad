"""The pop model's logic without threads or clocks: leases, acks, the durable commit, handles."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.rocketmq.pop_service import committed_records
from coordinator.rocketmq.pop_state import WINDOW, Commit, PopQueue, ReceiptHandle, decode_acked, encode_acked
from proto import records
from proto.errors import InvalidReceiptHandleError
from proto.records import ControlType

INVISIBLE_MS = 1000


def queue(messages: list[int], *, committed: int = 0, acked: set[int] | None = None, end: int | None = None,
          incarnation: str = "a1") -> PopQueue:
    q = PopQueue("points", 0, incarnation, committed, acked or set())
    q.add_read(committed, end if end is not None else max(messages, default=committed - 1) + 1,
               [(o, f"m{o}") for o in messages])
    return q


def ack(q: PopQueue, *handles: ReceiptHandle) -> Commit:
    commit = q.prepare_ack([h.offset for h in handles if q.check(h)])
    q.acked_durably(commit)
    return commit


def test_a_popped_message_is_invisible_until_its_deadline_then_delivered_again_with_the_next_attempt():
    q = queue([0, 1])
    first = q.pop(now_ms=0, max_count=1, invisible_ms=INVISIBLE_MS)
    assert [(d.offset, d.attempt) for d in first] == [(0, 1)]
    assert [d.offset for d in q.pop(now_ms=999, max_count=10, invisible_ms=INVISIBLE_MS)] == [1]
    assert q.pop(now_ms=999, max_count=10, invisible_ms=INVISIBLE_MS) == []
    assert q.next_visible_ms() == 1000
    again = q.pop(now_ms=1000, max_count=10, invisible_ms=INVISIBLE_MS)
    assert [(d.offset, d.attempt) for d in again] == [(0, 2)]


def test_acks_advance_the_committed_prefix_over_markers_and_keep_the_acked_offsets_above_it():
    q = queue([0, 2, 4], end=6)  # 1, 3 and 5 are markers or aborted records
    d0, d2, d4 = q.pop(0, 10, INVISIBLE_MS)
    assert ack(q, d2.handle) == Commit(0, frozenset({2}))
    assert ack(q, d0.handle) == Commit(4, frozenset())          # 0, 1, 2 and 3 are done
    assert ack(q, d4.handle) == Commit(6, frozenset())
    assert q.pop(5000, 10, INVISIBLE_MS) == []


def test_a_queue_loaded_from_a_commit_never_hands_out_an_acked_message():
    q = queue([0, 1, 2, 3])
    handles = {d.offset: d.handle for d in q.pop(0, 10, INVISIBLE_MS)}
    commit = ack(q, handles[0], handles[2])
    assert commit == Commit(1, frozenset({2}))
    reloaded = queue([0, 1, 2, 3], committed=commit.offset, acked=decode_acked(commit.offset, commit.metadata),
                     incarnation="b2")
    # leases were in memory: 1 and 3 come back at once (at-least-once), 0 and 2 never
    assert [(d.offset, d.attempt) for d in reloaded.pop(0, 10, INVISIBLE_MS)] == [(1, 1), (3, 1)]


def test_change_invisible_gives_a_new_handle_and_voids_the_old():
    q = queue([0])
    [delivery] = q.pop(0, 1, INVISIBLE_MS)
    renewed = q.change_invisible(delivery.handle, now_ms=500, invisible_ms=10_000)
    assert renewed != delivery.handle
    assert q.pop(2000, 1, INVISIBLE_MS) == [], "invisible until 10.5 s now"
    with pytest.raises(InvalidReceiptHandleError):
        q.check(delivery.handle)
    assert ack(q, renewed).offset == 1


def test_a_new_delivery_voids_the_previous_handle_and_an_ack_again_is_harmless():
    q = queue([0])
    [first] = q.pop(0, 1, INVISIBLE_MS)
    [second] = q.pop(INVISIBLE_MS, 1, INVISIBLE_MS)
    with pytest.raises(InvalidReceiptHandleError):
        q.check(first.handle)
    ack(q, second.handle)
    assert q.check(second.handle) is False  # acked already: nothing to do, no error


def test_a_handle_of_an_earlier_incarnation_or_another_queue_is_void():
    q = queue([0])
    [delivery] = q.pop(0, 1, INVISIBLE_MS)
    for handle in (ReceiptHandle("points", 0, 0, delivery.handle.version, "zz"),
                   ReceiptHandle("points", 1, 0, delivery.handle.version, "a1"),
                   ReceiptHandle("other", 0, 0, delivery.handle.version, "a1")):
        with pytest.raises(InvalidReceiptHandleError):
            q.check(handle)


def test_nothing_is_handed_out_beyond_the_window_until_the_prefix_is_acked():
    q = PopQueue("points", 0, "a1", committed=0, window=4)
    q.add_read(0, 6, [(o, o) for o in range(6)])
    assert q.read_from() is None
    handles = {d.offset: d.handle for d in q.pop(0, 10, INVISIBLE_MS)}
    assert sorted(handles) == [0, 1, 2, 3]
    ack(q, handles[0], handles[1])
    assert [d.offset for d in q.pop(0, 10, INVISIBLE_MS)] == [4, 5]


@pytest.mark.parametrize("text", ["", "garbage", "1.2.3", "x.2.3.a1.points", "1.2.3..points", "1.2.3.a1."])
def test_a_malformed_receipt_handle_is_refused(text):
    with pytest.raises(InvalidReceiptHandleError):
        ReceiptHandle.parse(text)


@given(st.text(alphabet="abcXYZ09._-", min_size=1, max_size=20), st.integers(0, 10_000), st.integers(0, 2**40),
       st.integers(1, 2**31), st.text(alphabet="0123456789abcdef", min_size=1, max_size=12))
def test_a_receipt_handle_round_trips(topic, partition, offset, version, incarnation):
    handle = ReceiptHandle(topic, partition, offset, version, incarnation)
    assert ReceiptHandle.parse(handle.encode()) == handle


@given(st.integers(0, 2**40), st.sets(st.integers(1, WINDOW - 1), max_size=WINDOW))
def test_the_acked_offsets_round_trip_through_the_commit_metadata_and_fit_kafkas_limit(committed, deltas):
    acked = {committed + d for d in deltas}
    metadata = encode_acked(committed, acked)
    assert decode_acked(committed, metadata) == acked
    assert len(metadata.encode()) <= 4096  # offset.metadata.max.bytes


def test_metadata_not_written_by_the_pop_model_means_nothing_acked():
    assert decode_acked(5, "written by a Kafka consumer") == set()
    assert decode_acked(5, "rmq-pop-v1:not-hex") == set()


def test_committed_records_skip_markers_and_aborted_transactions():
    def batch(offset, values, producer_id=-1, transactional=False):
        return records.encode_batch([(0, None, v, []) for v in values], producer_id=producer_id, producer_epoch=0,
                                    base_sequence=0 if producer_id >= 0 else -1, transactional=transactional,
                                    base_offset=offset)

    def marker(offset, producer_id, control_type):
        return records.encode_control_batch(producer_id=producer_id, producer_epoch=0, control_type=control_type,
                                            coordinator_epoch=0, timestamp=0, base_offset=offset)

    log = (batch(0, [b"plain-0", b"plain-1"]) + batch(2, [b"aborted"], 7, True) + batch(3, [b"kept"], 8, True)
           + marker(4, 7, ControlType.ABORT) + marker(5, 8, ControlType.COMMIT) + batch(6, [b"after"], 7, True))
    delivered, end = committed_records(log, 1, aborted=[(7, 2)])
    assert [(r.offset, r.value) for r in delivered] == [(1, b"plain-1"), (3, b"kept"), (6, b"after")]
    assert end == 7
