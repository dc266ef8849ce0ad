"""The controller's decisions: replicas spread as Kafka's assignment spreads them, leaders come from the ISR
only (unless unclean election is on), and every change bumps the leader epoch."""
from __future__ import annotations

from collections import Counter

import pytest

from coordinator.controller.elections import after_brokers_changed, assign_replicas, initial_state, preferred_leader
from coordinator.controller.znodes import NO_LEADER, BrokerInfo, PartitionState, decode_assignment, encode_assignment
from proto.errors import InvalidReplicationFactorError


def test_replicas_spread_leaders_and_followers_evenly_over_the_brokers() -> None:
    assignment = assign_replicas(6, 3, [2, 0, 1])
    assert assignment[0] == (0, 1, 2) and assignment[1] == (1, 2, 0) and assignment[2] == (2, 0, 1)
    assert assignment[3] == (0, 2, 1)  # the followers' distance grows once the partitions wrap around
    assert Counter(r[0] for r in assignment.values()) == {0: 2, 1: 2, 2: 2}
    assert all(len(set(replicas)) == 3 for replicas in assignment.values())
    assert decode_assignment(encode_assignment(assignment)) == assignment


def test_a_replication_factor_above_the_live_brokers_is_refused_with_kafkas_error() -> None:
    with pytest.raises(InvalidReplicationFactorError, match=r"INVALID_REPLICATION_FACTOR.*3 .*2 live"):
        assign_replicas(1, 3, [0, 1])


def test_a_new_partition_is_led_by_its_first_live_replica_with_every_live_replica_in_sync() -> None:
    assert initial_state((1, 2, 0), {0, 1, 2}, 4) == PartitionState(1, 0, (1, 2, 0), 4)
    assert initial_state((1, 2, 0), {0, 2}, 4) == PartitionState(2, 0, (2, 0), 4)


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order() -> None:
    state = PartitionState(0, 3, (0, 1, 2), 1)
    new = after_brokers_changed((0, 2, 1), state, live={1, 2}, controller_epoch=2)
    assert new == PartitionState(2, 4, (1, 2), 2)


def test_a_dead_follower_leaves_the_isr_and_the_epoch_moves_on() -> None:
    state = PartitionState(0, 3, (0, 1, 2), 1)
    assert after_brokers_changed((0, 1, 2), state, live={0, 1}, controller_epoch=1) == PartitionState(0, 4, (0, 1), 1)
    assert after_brokers_changed((0, 1, 2), state, live={0, 1, 2}, controller_epoch=1) is None


def test_an_out_of_sync_replica_never_leads_unless_unclean_election_is_on() -> None:
    state = PartitionState(0, 5, (0,), 1)  # the ISR had shrunk to the leader alone; then it died
    offline = after_brokers_changed((0, 1, 2), state, live={1, 2}, controller_epoch=1)
    assert offline == PartitionState(NO_LEADER, 6, (0,), 1)  # the last ISR member stays named
    assert after_brokers_changed((0, 1, 2), offline, live={1, 2}, controller_epoch=1) is None
    unclean = after_brokers_changed((0, 1, 2), offline, live={1, 2}, controller_epoch=1, unclean=True)
    assert unclean == PartitionState(1, 7, (1,), 1)


def test_the_last_isr_member_coming_back_leads_again() -> None:
    offline = PartitionState(NO_LEADER, 6, (0,), 1)
    assert after_brokers_changed((0, 1, 2), offline, live={0, 1, 2}, controller_epoch=3) == PartitionState(0, 7, (0,), 3)


def test_leadership_goes_back_to_the_preferred_replica_only_once_it_is_live_and_in_sync() -> None:
    moved = PartitionState(1, 4, (1, 2), 1)  # the preferred replica 0 died; 1 took over
    assert preferred_leader((0, 1, 2), moved, live={0, 1, 2}, controller_epoch=2) is None  # back, not in sync yet
    caught_up = PartitionState(1, 4, (1, 2, 0), 1)
    assert preferred_leader((0, 1, 2), caught_up, live={1, 2}, controller_epoch=2) is None  # in the ISR, but dead
    assert preferred_leader((0, 1, 2), caught_up, live={0, 1, 2}, controller_epoch=2) == PartitionState(0, 5, (1, 2, 0), 2)
    assert preferred_leader((0, 1, 2), PartitionState(0, 5, (0, 1), 2), live={0, 1, 2}, controller_epoch=2) is None


def test_znodes_round_trip_in_kafkas_json() -> None:
    state = PartitionState(2, 9, (2, 0), 3)
    assert PartitionState.decode(state.encode()) == state
    broker = BrokerInfo(1, "10.0.0.2:7001", "10.0.0.2:9092")
    assert BrokerInfo.decode(1, broker.encode()) == broker
