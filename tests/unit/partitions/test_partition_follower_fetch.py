"""A follower and a leader, both the pure replication cores, over logs kept as lists of each offset's epoch:
an old leader that wrote past the high watermark alone comes back as a follower, cuts exactly what the new
leader never had (what acks=all never acknowledged) and then copies the new leader's log."""
from __future__ import annotations

from partitions.epoch_cache import EpochCache, EpochEnd
from partitions.follower_fetch import (
    Append,
    Backoff,
    FetchAnswer,
    FetchState,
    FollowerFetcher,
    SetHighWatermark,
    Truncate,
)
from partitions.leader_replicas import FetchAccepted, FetchDiverged, LeaderReplicas


class Log:
    """A log as the epochs of its offsets, with its epoch cache."""

    def __init__(self) -> None:
        self.epochs_at: list[int] = []
        self.cache = EpochCache()

    def write(self, epoch: int, count: int) -> None:
        self.cache.assign(epoch, len(self.epochs_at))
        self.epochs_at.extend([epoch] * count)

    @property
    def end(self) -> int:
        return len(self.epochs_at)


def fetch_once(follower_id: int, follower: FollowerFetcher, log: Log, leader: LeaderReplicas, leader_log: Log,
               now_ms: int) -> list[object]:
    asked = follower.next_fetch()
    assert asked is not None
    answer = leader.follower_fetch(follower_id, asked.fetch_offset, asked.last_fetched_epoch, leader_log.cache,
                                   now_ms)
    if isinstance(answer, FetchDiverged):
        reply = FetchAnswer(diverging=answer.diverging)
    else:
        assert isinstance(answer, FetchAccepted)
        records = leader_log.epochs_at[asked.fetch_offset:]
        reply = FetchAnswer(records=bytes(records), records_end=leader_log.end, high_watermark=answer.high_watermark)
    effects = follower.answered(asked, reply)
    for effect in effects:
        if isinstance(effect, Truncate):
            del log.epochs_at[effect.offset:]
            log.cache.truncate_from(effect.offset)
        elif isinstance(effect, Append):
            for epoch in effect.records:  # the follower's cache is the log's: it learns each new epoch
                follower.appended_epoch(epoch, log.end)
                log.epochs_at.append(epoch)
    return list(effects)


def test_an_old_leader_cuts_what_only_it_had_and_then_copies_the_new_leader() -> None:
    a, b = Log(), Log()
    a.write(0, 10)
    b.write(0, 10)  # offsets 0..9 on both: the high watermark reached 10
    a.write(0, 3)   # 10..12 written by A alone, never on the ISR: no acks=all write was answered for them
    # A dies; B leads at epoch 1 from its log end and takes three writes of its own
    leader = LeaderReplicas(leader_id=1, leader_epoch=1, replicas=(0, 1), isr=frozenset({1}), log_end_offset=10,
                            high_watermark=10, now_ms=0)
    b.write(1, 5)
    leader.appended(b.end, now_ms=1)
    assert leader.high_watermark == 15  # an ISR of one

    follower = FollowerFetcher(leader_epoch=1, log_end_offset=a.end, high_watermark=10, epochs=a.cache)
    first = fetch_once(0, follower, a, leader, b, now_ms=2)
    assert first == [Truncate(10)] and a.epochs_at == [0] * 10  # exactly A's unreplicated tail
    second = fetch_once(0, follower, a, leader, b, now_ms=3)
    assert isinstance(second[0], Append) and SetHighWatermark(15) in second
    assert a.epochs_at == b.epochs_at and a.cache.entries() == b.cache.entries() == ((0, 0), (1, 10))
    assert follower.state is FetchState.FETCHING


def test_a_follower_that_never_had_the_leaders_epoch_asks_again_from_its_own() -> None:
    follower_log = Log()
    follower_log.write(0, 5)
    follower_log.write(2, 4)  # it led briefly at epoch 2 (offsets 5..8), which the current leader never saw
    follower = FollowerFetcher(leader_epoch=3, log_end_offset=9, high_watermark=5, epochs=follower_log.cache)
    asked = follower.next_fetch()
    assert asked is not None and asked.last_fetched_epoch == 2
    # the leader has epochs 0 and 1: epoch 2 is past its epoch 1, which ends at 7 on the leader
    effects = follower.answered(asked, FetchAnswer(diverging=EpochEnd(1, 7)))
    assert effects == [Truncate(5)] and follower.state is FetchState.TRUNCATING  # its own epoch 0 ends at 5
    again = follower.next_fetch()
    assert again is not None and again.fetch_offset == 5 and again.last_fetched_epoch == 0


def test_a_fenced_follower_waits_for_the_controller_and_stale_answers_change_nothing() -> None:
    follower = FollowerFetcher(leader_epoch=4, log_end_offset=3, high_watermark=3, epochs=EpochCache(((4, 0),)))
    asked = follower.next_fetch()
    assert asked is not None
    follower.leader_changed(5)
    assert follower.answered(asked, FetchAnswer(records=b"\x05", records_end=4, high_watermark=4)) == []
    asked = follower.next_fetch()
    assert asked is not None and asked.current_leader_epoch == 5
    assert follower.answered(asked, FetchAnswer(error="FENCED_LEADER_EPOCH")) == [Backoff("FENCED_LEADER_EPOCH")]
    assert follower.state is FetchState.WAITING and follower.next_fetch() is None
