"""The controller's decisions, without I/O: where a new topic's replicas go, and who leads a partition once
brokers come and go (Kafka's AdminUtils replica assignment and the ZooKeeper-era controller's offline
partition election and replica removal).

Invariants: a leader comes from the ISR unless unclean election is switched on (then, and only then, an
out-of-sync replica may lead and acknowledged writes may be lost); the ISR never empties (its last member
stays, so it is known whose return brings the partition back); every change the controller makes bumps the
leader epoch, so a broker still acting on the old state is fenced.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

from coordinator.controller.znodes import NO_LEADER, PartitionState
from proto.errors import InvalidPartitionsError, InvalidReplicationFactorError


def check_replication_factor(replication_factor: int, live_brokers: Sequence[int]) -> None:
    """INVALID_REPLICATION_FACTOR unless 1 <= factor <= the live brokers, as Kafka's CreateTopics checks it."""
    if replication_factor < 1 or replication_factor > len(live_brokers):
        raise InvalidReplicationFactorError(
            f"[INVALID_REPLICATION_FACTOR] replication factor {replication_factor} with {len(live_brokers)} live "
            f"broker(s) {sorted(live_brokers)}: it must be between 1 and the number of live brokers")


def assign_replicas(partitions: int, replication_factor: int, brokers: Sequence[int], *, start_index: int = 0,
                    replica_shift: int = 0) -> dict[int, tuple[int, ...]]:
    """Kafka's rack-unaware assignment (AdminUtils.assignReplicasToBrokersRackUnaware) with a fixed start and
    shift: partition p's first replica is broker (p + start) mod n, its followers the next brokers at a
    distance that grows by one each time the partitions wrap around the brokers, so leaders and followers
    spread evenly."""
    if partitions < 1:
        raise InvalidPartitionsError(f"[INVALID_PARTITIONS] a topic needs at least 1 partition, not {partitions}")
    ordered = sorted(brokers)
    n = len(ordered)
    check_replication_factor(replication_factor, ordered)
    assignment: dict[int, tuple[int, ...]] = {}
    shift = replica_shift
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        followers = [(first + 1 + (shift + j) % (n - 1)) % n for j in range(replication_factor - 1)] if n > 1 else []
        assignment[p] = (ordered[first], *(ordered[i] for i in followers))
    return assignment


def initial_state(replicas: Sequence[int], live: Collection[int], controller_epoch: int) -> PartitionState:
    """A new partition: its first live replica leads, every live replica is in sync (they are all empty)."""
    isr = tuple(r for r in replicas if r in live)
    return PartitionState(isr[0] if isr else NO_LEADER, 0, isr or tuple(replicas[:1]), controller_epoch)


def preferred_leader(replicas: Sequence[int], state: PartitionState, live: Collection[int],
                     controller_epoch: int) -> PartitionState | None:
    """Leadership back to the preferred replica (the first assigned) when it is live, in the ISR and not
    leading; None otherwise (Kafka's PreferredReplicaPartitionLeaderElectionStrategy). The ISR stays: the
    new leader is in it, so it holds every acknowledged record."""
    preferred = replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch)


def after_brokers_changed(replicas: Sequence[int], state: PartitionState, live: Collection[int],
                          controller_epoch: int, *, unclean: bool = False) -> PartitionState | None:
    """A partition's new state once the live brokers are `live`, or None if nothing changes.

    Dead replicas leave the ISR, except its last member (Kafka's ReplicaStateMachine); a dead or missing
    leader is replaced by the first replica in assignment order that is live and in the ISR
    (OfflinePartitionLeaderElectionStrategy); with none, the partition has no leader, unless `unclean`
    lets the first live replica lead with an ISR of itself alone."""
    isr = tuple(r for r in state.isr if r in live) or state.isr[-1:]
    leader = state.leader if state.leader in live else NO_LEADER
    if leader == NO_LEADER:
        candidates = [r for r in replicas if r in live and r in isr]
        if candidates:
            leader = candidates[0]
        elif unclean:
            leader = next((r for r in replicas if r in live), NO_LEADER)
            if leader != NO_LEADER:
                isr = (leader,)
    if leader == state.leader and isr == state.isr:
        return None
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch)
