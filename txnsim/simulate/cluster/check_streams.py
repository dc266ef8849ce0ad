"""The check-back streams open to one simulated node: the simulator's stand-in for the gRPC streams a
node's ProducerRegistry holds (coordinator/rocketmq/producers.py), which the shipping half-message
coordinator asks for a live producer of a group and hands checks to.

A simulated producer keeps its stream open by calling the node with a CheckBackRequest every so often (the
echo stands for the stream's headers); a stream not heard of for a second of world time is gone, as a gRPC
stream whose peer went away. A check goes one way, to one live producer of the group, round-robin.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from proto import txnsim_pb2 as pb

if TYPE_CHECKING:
    from txnsim.simulate.cluster.roles import NodeCluster

#: a stream not heard of for this long (world time, which no node's clock jump moves) has closed
STREAM_TIMEOUT_MS = 1000


class SimCheckStreams:
    def __init__(self, node: str, model: NodeCluster) -> None:
        self._node = node
        self._model = model
        #: group -> producer -> when (world time) its stream was last heard of
        self._heard: dict[str, dict[str, int]] = {}
        self._turn = 0

    def opened(self, group: str, producer: str) -> None:
        self._heard.setdefault(group, {})[producer] = self._model.world.now_ms

    def pick(self, group: str) -> str | None:
        now = self._model.world.now_ms
        live = sorted(p for p, heard in self._heard.get(group, {}).items() if now - heard < STREAM_TIMEOUT_MS)
        if not live:
            return None
        self._turn += 1
        return live[self._turn % len(live)]

    def deliver(self, check: pb.TransactionCheck) -> bool:
        producer = self.pick(check.producer_group)
        if producer is None:
            return False
        self._model.network.send(self._node, producer, check)
        return True
