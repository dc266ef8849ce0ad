"""Where the front door's work runs: on the node that owns the log (a data partition, a half shard,
a __consumer_offsets shard), in process when that is this node, else over txnsim's own gRPC.

Invariant: a call is retried only for retriable errors (ownership moving, a node unreachable), and
never past one request timeout.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from client.transport import Deadline, NodeChannels, Stubs, retrying
from coordinator.membership import ClusterOwnership
from proto.errors import CoordinatorNotAvailableError

T = TypeVar("T")
#: runs a call: on this node when given None, else through the owner's stubs, within the timeout given
OnNode = Callable[[Stubs | None, float], T]


class OwnerRouter:
    def __init__(self, *, node_id: int, membership: ClusterOwnership, channels: NodeChannels,
                 address_of: Callable[[int], str], request_timeout_s: float = 5.0) -> None:
        self.node_id = node_id
        self._membership = membership
        self._channels = channels
        self._address_of = address_of
        self._timeout_s = request_timeout_s

    def owner(self, topic: str, partition: int) -> int:
        return self._membership.owner(topic, partition)

    def call(self, topic: str, partition: int, fn: OnNode[T]) -> T:
        """Run `fn` on the current owner of `topic`-`partition`, following it while it moves."""
        deadline = Deadline(self._timeout_s)
        for attempt in retrying(deadline.remaining()):
            with attempt:
                owner = self._membership.owner(topic, partition)
                if owner < 0:
                    raise CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] no live node owns {topic}-{partition}")
                stubs = None if owner == self.node_id else self._channels.stubs(self._address_of(owner))
                return fn(stubs, max(deadline.remaining(), 0.05))
        raise AssertionError("unreachable")
