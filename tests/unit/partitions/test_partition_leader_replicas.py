"""A leader's view of its followers: the high watermark is the ISR's lowest log end and never goes back,
followers leave the ISR after replica.lag.time.max.ms and rejoin once caught up, and acks=all answers as
Kafka's Partition does (NOT_ENOUGH_REPLICAS before the append, _AFTER_APPEND after)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions.epoch_cache import EpochCache, EpochEnd
from partitions.leader_replicas import FetchAccepted, FetchDiverged, LeaderReplicas
from proto.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError

LAG = 1_000


def leader(log_end: int = 10, high_watermark: int = 10, isr: frozenset[int] = frozenset({0, 1, 2}),
           now_ms: int = 0) -> LeaderReplicas:
    return LeaderReplicas(leader_id=0, leader_epoch=3, replicas=(0, 1, 2), isr=isr, log_end_offset=log_end,
                          high_watermark=high_watermark, now_ms=now_ms, max_lag_ms=LAG)


EPOCHS = EpochCache(((0, 0), (3, 10)))


def fetch(state: LeaderReplicas, replica: int, offset: int, now_ms: int, epoch: int = 3) -> FetchAccepted:
    answer = state.follower_fetch(replica, offset, epoch, EPOCHS, now_ms)
    assert isinstance(answer, FetchAccepted)
    return answer


def test_the_high_watermark_waits_for_every_isr_member() -> None:
    state = leader()
    state.appended(15, now_ms=1)
    assert state.high_watermark == 10
    fetch(state, 1, 15, now_ms=2)
    assert state.high_watermark == 10  # follower 2 has not fetched since this leader began
    assert fetch(state, 2, 13, now_ms=3).high_watermark == 13
    assert fetch(state, 2, 15, now_ms=4).high_watermark_advanced
    assert state.high_watermark == 15


def test_the_high_watermark_never_goes_back() -> None:
    state = leader()
    state.appended(20, now_ms=1)
    fetch(state, 1, 20, now_ms=2)
    fetch(state, 2, 20, now_ms=2)
    fetch(state, 2, 12, now_ms=3)  # a follower that truncated and fetches lower again
    assert state.high_watermark == 20


def test_a_lagging_follower_leaves_the_isr_and_the_high_watermark_moves_on_once_the_store_has_it() -> None:
    state = leader()
    state.appended(20, now_ms=0)
    fetch(state, 1, 20, now_ms=100)
    assert state.out_of_sync(now_ms=LAG) is None  # within the lag: still in sync
    assert state.out_of_sync(now_ms=LAG + 1) == frozenset({0, 1})
    assert state.high_watermark == 10  # proposed, not written: 2 still counts
    assert state.isr_written(frozenset({0, 1}), now_ms=LAG + 2)
    assert state.high_watermark == 20


def test_a_follower_fetching_from_the_end_never_lags_however_long_ago_it_fetched() -> None:
    state = leader()
    fetch(state, 1, 10, now_ms=1)
    fetch(state, 2, 10, now_ms=1)
    assert state.out_of_sync(now_ms=10 * LAG) is None


def test_a_follower_rejoins_once_it_has_the_high_watermark_and_this_epochs_start() -> None:
    state = leader(isr=frozenset({0, 1}))
    state.appended(30, now_ms=0)
    assert fetch(state, 1, 30, now_ms=1).high_watermark == 30
    assert fetch(state, 2, 9, now_ms=2).propose_isr is None  # below the epoch's start (10)
    assert fetch(state, 2, 25, now_ms=3).propose_isr is None  # below the high watermark
    assert fetch(state, 2, 30, now_ms=4).propose_isr == frozenset({0, 1, 2})
    assert state.isr_written(frozenset({0, 1, 2}), now_ms=5) is False
    assert state.isr == {0, 1, 2}


def test_one_isr_change_at_a_time() -> None:
    state = leader()
    state.appended(20, now_ms=0)
    assert state.out_of_sync(now_ms=LAG + 1) == frozenset({0})
    assert state.out_of_sync(now_ms=LAG + 2) is None
    state.isr_refused()
    assert state.isr == {0, 1, 2} and state.pending_isr is None


def test_a_diverged_follower_is_told_where_its_epoch_ends() -> None:
    state = leader(log_end=40)
    answer = state.follower_fetch(1, 12, 2, EPOCHS, now_ms=1)  # it led at epoch 2, which never wrote here
    assert answer == FetchDiverged(EpochEnd(0, 10))
    assert state.followers[1].log_end_offset == -1  # a diverged fetch tells nothing of its progress


def test_acks_all_refuses_before_the_append_when_the_isr_is_too_small() -> None:
    state = leader(isr=frozenset({0}))
    with pytest.raises(NotEnoughReplicasError, match=r"NOT_ENOUGH_REPLICAS\].*min.insync.replicas=2"):
        state.check_enough_replicas(2, "orders-0")
    state.check_enough_replicas(1, "orders-0")


def test_acks_all_waits_for_the_isr_and_says_when_it_shrank_below_min_insync_meanwhile() -> None:
    state = leader()
    state.appended(11, now_ms=0)
    assert state.acks_all_outcome(11, 2, "orders-0") is False
    fetch(state, 1, 11, now_ms=1)
    assert state.out_of_sync(now_ms=LAG + 1) == frozenset({0, 1})
    assert state.isr_written(frozenset({0, 1}), now_ms=LAG + 1)
    assert state.acks_all_outcome(11, 2, "orders-0") is True
    state.appended(12, now_ms=2)  # follower 1 never fetches it
    assert state.out_of_sync(now_ms=3 * LAG) == frozenset({0})
    state.isr_written(frozenset({0}), now_ms=3 * LAG)
    outcome = state.acks_all_outcome(12, 2, "orders-0")
    assert isinstance(outcome, NotEnoughReplicasAfterAppendError)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "fetch1", "fetch2", "shrink", "written", "refused"]),
                          st.integers(0, 20)), max_size=60))
def test_the_high_watermark_never_passes_an_isr_member_and_never_goes_back(steps: list[tuple[str, int]]) -> None:
    state = leader()
    now = 0
    ends = {1: -1, 2: -1}
    last_mark = state.high_watermark
    for action, n in steps:
        now += n * 100
        if action == "append":
            state.appended(state.log_end_offset + n, now)
        elif action.startswith("fetch"):
            replica = int(action[-1])
            offset = min(state.log_end_offset, max(ends[replica], 0) + n)
            fetch(state, replica, offset, now)
            ends[replica] = offset
        elif action == "shrink":
            state.out_of_sync(now)
        elif action == "written" and state.pending_isr is not None:
            state.isr_written(state.pending_isr, now)
        elif action == "refused":
            state.isr_refused()
        assert state.high_watermark >= last_mark
        last_mark = state.high_watermark
        for member in state.maximal_isr - {0}:
            assert state.high_watermark <= max(ends[member], 10)  # 10: what this leader's epoch started with
        assert state.high_watermark <= state.log_end_offset


def test_an_isr_member_asking_from_below_the_high_watermark_leaves_the_isr_at_once() -> None:
    """It had those offsets (the mark counted it), so it lost fsynced data: it must not be electable until it
    has them back, and the mark waits for it meanwhile (the maximal ISR still names it)."""
    state = leader()
    state.appended(15, now_ms=1)
    fetch(state, 1, 15, now_ms=2)
    fetch(state, 2, 15, now_ms=2)
    assert state.high_watermark == 15
    damaged = fetch(state, 2, 9, now_ms=3)  # restarted with a damaged segment cut at offset 9
    assert damaged.propose_isr == frozenset({0, 1}) and state.high_watermark == 15
    state.isr_written(frozenset({0, 1}), now_ms=4)
    assert fetch(state, 2, 15, now_ms=5).propose_isr == frozenset({0, 1, 2})  # back once it has them


def test_a_follower_idle_at_the_log_end_counts_as_caught_up_until_the_next_append() -> None:
    """A fetch session does not fetch an idle partition again: a follower that had the whole log long before
    an append was still caught up at it, and is out of sync only a lag after it without fetching."""
    state = leader()
    fetch(state, 1, 10, now_ms=100)
    fetch(state, 2, 10, now_ms=100)
    state.appended(11, now_ms=50_000)  # fifty lags without a fetch naming the partition, then a write
    assert state.out_of_sync(now_ms=50_000 + LAG - 1) is None
    assert state.out_of_sync(now_ms=50_000 + LAG + 1) == frozenset({0})
