"""Markers owed to one node while a request to it is out go together in its next request."""
from __future__ import annotations

from coordinator.txn.marker_channels import MAX_MARKERS_PER_REQUEST, MarkerChannels, MarkersDone
from coordinator.txn.metadata import Marker, Owed
from proto.structs import TopicPartition

OWNERS = {"a": 1, "b": 2}


def owner_of(tp: TopicPartition) -> int:
    return OWNERS[tp.topic]


def owed(producer_id: int, *tps: TopicPartition, epoch: int = 0, committed: bool = True) -> list[Owed]:
    marker = Marker(producer_id, epoch, committed, frozenset(tps))
    return [(marker, tp) for tp in tps]


A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_an_idle_node_gets_its_markers_at_once_one_request_per_node():
    channels = MarkerChannels()
    batches, done = channels.send(1, owed(7, A0, A1, B0), 3, owner_of)
    assert done == []
    assert sorted(b.node for b in batches) == [1, 2]
    to_a = next(b for b in batches if b.node == 1).request()
    assert [(m.producer_id, m.coordinator_epoch, [p.partition for p in m.partitions]) for m in to_a.markers] == [
        (7, 3, [0, 1])]


def test_markers_owed_while_a_request_is_out_go_together_in_the_next():
    channels = MarkerChannels()
    (first,), _ = channels.send(1, owed(7, A0), 3, owner_of)
    assert channels.send(2, owed(8, A0), 3, owner_of) == ([], [])
    assert channels.send(3, owed(9, A1), 4, owner_of) == ([], [])
    (second,), done = channels.answered(first.batch_id, set(first.owed))
    assert done == [MarkersDone(1, frozenset(first.owed))]
    assert {(m.producer_id, m.coordinator_epoch) for m in second.request().markers} == {(8, 3), (9, 4)}
    nothing, done = channels.answered(second.batch_id, set(second.owed))
    assert nothing == [] and {d.send_id for d in done} == {2, 3}


def test_a_send_is_done_once_every_node_answered_with_what_each_acknowledged():
    channels = MarkerChannels()
    to_a, to_b = sorted(channels.send(1, owed(7, A0, B0), 3, owner_of)[0], key=lambda b: b.node)
    assert channels.answered(to_b.batch_id, set()) == ([], [])  # node 2 failed: nothing acknowledged there
    _, done = channels.answered(to_a.batch_id, set(to_a.owed))
    assert done == [MarkersDone(1, frozenset(to_a.owed))]


def test_two_markers_of_one_producer_never_share_a_request():
    """A response names markers by producer id alone, so it could not say which of the two it answers."""
    channels = MarkerChannels()
    (busy,), _ = channels.send(1, owed(5, A0), 3, owner_of)
    channels.send(2, owed(7, A0, epoch=1, committed=False), 3, owner_of)
    channels.send(3, owed(7, A1, epoch=2), 3, owner_of)
    (next_one,), _ = channels.answered(busy.batch_id, set(busy.owed))
    assert [(m.producer_id, m.producer_epoch) for m in next_one.request().markers] == [(7, 1)]
    (last,), done = channels.answered(next_one.batch_id, set(next_one.owed))
    assert [d.send_id for d in done] == [2]
    assert [(m.producer_id, m.producer_epoch) for m in last.request().markers] == [(7, 2)]


def test_a_request_carries_at_most_its_limit_and_the_rest_follow():
    channels = MarkerChannels()
    (busy,), _ = channels.send(1, owed(1, A0), 0, owner_of)
    for pid in range(2, MAX_MARKERS_PER_REQUEST + 12):
        channels.send(pid, owed(pid, A0), 0, owner_of)
    (full,), _ = channels.answered(busy.batch_id, set())
    assert len(full.items) == MAX_MARKERS_PER_REQUEST
    (rest,), done = channels.answered(full.batch_id, set(full.owed))
    assert len(done) == MAX_MARKERS_PER_REQUEST and len(rest.items) == 10


def test_nothing_owed_is_done_at_once_and_stopping_finishes_every_send():
    channels = MarkerChannels()
    assert channels.send(1, [], 0, owner_of) == ([], [MarkersDone(1, frozenset())])
    (busy,), _ = channels.send(2, owed(7, A0), 0, owner_of)
    channels.send(3, owed(8, A0), 0, owner_of)
    assert sorted(d.send_id for d in channels.abandon()) == [2, 3]
    assert channels.answered(busy.batch_id, set(busy.owed)) == ([], [])  # a late answer changes nothing
