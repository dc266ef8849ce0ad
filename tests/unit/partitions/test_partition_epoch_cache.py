"""The leader-epoch cache answers OffsetForLeaderEpoch as Kafka's LeaderEpochFileCache does, and a follower
that diverged cuts its log where the leader's history parts from its own (KIP-101, KIP-279, KIP-595)."""
from __future__ import annotations

import pytest

from partitions.divergence import Truncation, diverging_epoch, truncation_point
from partitions.epoch_cache import UNDEFINED, UNDEFINED_EPOCH, EpochCache, EpochEnd


def cache() -> EpochCache:
    return EpochCache(((1, 0), (3, 10), (5, 25)))


def test_the_latest_epoch_ends_at_the_log_end() -> None:
    assert cache().end_offset_for(5, 40) == EpochEnd(5, 40)


def test_an_older_epoch_ends_where_the_next_one_starts() -> None:
    assert cache().end_offset_for(3, 40) == EpochEnd(3, 25)
    assert cache().end_offset_for(1, 40) == EpochEnd(1, 10)


def test_an_epoch_that_never_wrote_here_answers_the_largest_one_below_it() -> None:
    assert cache().end_offset_for(4, 40) == EpochEnd(3, 25)
    assert cache().end_offset_for(2, 40) == EpochEnd(1, 10)


def test_an_epoch_older_than_every_entry_ends_where_the_first_starts() -> None:
    assert EpochCache(((4, 100), (6, 150))).end_offset_for(2, 200) == EpochEnd(2, 100)


def test_an_epoch_newer_than_the_latest_or_undefined_is_undefined() -> None:
    assert cache().end_offset_for(9, 40) == UNDEFINED
    assert cache().end_offset_for(UNDEFINED_EPOCH, 40) == UNDEFINED
    assert EpochCache().end_offset_for(1, 0) == UNDEFINED


def test_an_epoch_keeps_its_first_start_and_epochs_never_go_back() -> None:
    c = cache()
    c.assign(5, 30)
    assert c.start_of(5) == 25
    with pytest.raises(ValueError, match="only grow"):
        c.assign(4, 50)


def test_a_new_epoch_starting_below_later_entries_replaces_them() -> None:
    c = cache()
    c.assign(7, 10)
    assert c.entries() == ((1, 0), (7, 10))


def test_truncating_the_end_drops_epochs_that_started_there_or_after() -> None:
    c = cache()
    c.truncate_from(25)
    assert c.entries() == ((1, 0), (3, 10))
    assert c.epoch_at(24) == 3 and c.epoch_at(0) == 1


def test_truncating_the_start_moves_the_first_epoch_start_up() -> None:
    c = cache()
    c.truncate_before(12)
    assert c.entries() == ((3, 12), (5, 25))
    c.truncate_before(3)  # below the first entry: nothing changes
    assert c.entries() == ((3, 12), (5, 25))


def test_a_follower_whose_log_is_a_prefix_of_the_leaders_has_not_diverged() -> None:
    assert diverging_epoch(cache(), 40, fetch_offset=22, last_fetched_epoch=3) is None
    assert diverging_epoch(cache(), 40, fetch_offset=40, last_fetched_epoch=5) is None
    assert diverging_epoch(cache(), 40, fetch_offset=0, last_fetched_epoch=UNDEFINED_EPOCH) is None


def test_a_follower_past_the_end_of_its_epoch_on_the_leader_has_diverged() -> None:
    # the follower wrote offsets 25..29 in epoch 3 as an old leader; the leader's epoch 3 ended at 25
    assert diverging_epoch(cache(), 40, fetch_offset=30, last_fetched_epoch=3) == EpochEnd(3, 25)
    # it led at epoch 4, which never wrote on this leader
    assert diverging_epoch(cache(), 40, fetch_offset=27, last_fetched_epoch=4) == EpochEnd(3, 25)


def test_the_follower_cuts_where_the_epoch_ends_on_the_leader() -> None:
    follower = EpochCache(((1, 0), (3, 10)))
    assert truncation_point(EpochEnd(3, 25), follower, log_end_offset=30, high_watermark=20) == Truncation(25, True)


def test_a_follower_that_never_had_the_leaders_epoch_cuts_to_its_own_and_asks_again() -> None:
    follower = EpochCache(((1, 0), (2, 8), (4, 12)))
    # the leader answers epoch 3 ending at 25; this replica has no epoch 3: its epoch 2 ends at 12
    assert truncation_point(EpochEnd(3, 25), follower, log_end_offset=20, high_watermark=5) == Truncation(12, False)


def test_an_undefined_answer_falls_back_to_the_high_watermark() -> None:
    assert truncation_point(UNDEFINED, cache(), log_end_offset=40, high_watermark=18) == Truncation(18, True)


def test_a_divergence_cut_never_removes_what_the_leader_had_in_that_epoch() -> None:
    leader = EpochCache(((0, 0), (2, 50)))
    follower = EpochCache(((0, 0), (1, 40)))  # led briefly at epoch 1 and wrote 40..44 no one else has
    end = diverging_epoch(leader, 80, fetch_offset=45, last_fetched_epoch=1)
    assert end == EpochEnd(0, 50)
    cut = truncation_point(end, follower, log_end_offset=45, high_watermark=40)
    assert cut == Truncation(40, True)
