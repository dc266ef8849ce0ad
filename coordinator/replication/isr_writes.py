"""A partition leader's writes of its ISR to the coordination store, as Kafka's leaders did in ZooKeeper mode
(Partition.shrinkIsr / expandIsr: a conditional update of the partition's state znode at the version the
leader last knew). A write at a stale version is refused (BADVERSION): the controller changed the state
since, so the leader keeps the ISR it knows and waits to hear the new state. The controller, writing at the
versions it read, is refused in turn if a leader wrote first, and reads the state again.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.controller.store import BadVersionError, CoordinationStore, StoreError
from coordinator.controller.znodes import PartitionState, partition_state_path
from proto.structs import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IsrWritten:
    state: PartitionState
    #: the state znode's version after the write: the next write is conditional on it
    version: int


@dataclass(frozen=True, slots=True)
class IsrRefused:
    """Not written: `stale` when the znode moved on (the leader must wait for the controller's word), else
    the store could not be reached (try again later)."""

    reason: str
    stale: bool


IsrOutcome = IsrWritten | IsrRefused


class IsrWriter:
    """The leader's side of ISR changes, over one member's session with the store."""

    def __init__(self, store: CoordinationStore) -> None:
        self._store = store

    def write(self, tp: TopicPartition, state: PartitionState, version: int,
              done: Callable[[IsrOutcome], None]) -> None:
        """Write `state` (the leader's own, with a new ISR) if the znode is still at `version`."""
        def written(outcome: object) -> None:
            if isinstance(outcome, int):
                log.info("%s: leader %d wrote the ISR %s (epoch %d)", tp, state.leader, list(state.isr),
                         state.leader_epoch)
                done(IsrWritten(state, outcome))
            elif isinstance(outcome, BadVersionError):
                done(IsrRefused(f"the state of {tp} changed since version {version}", stale=True))
            elif isinstance(outcome, StoreError):
                done(IsrRefused(f"{outcome.name}: {outcome}", stale=False))
            else:
                done(IsrRefused(f"unexpected answer {outcome!r}", stale=False))
        self._store.set(partition_state_path(tp.topic, tp.partition), state.encode(), written, version=version)
