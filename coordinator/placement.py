"""Which node owns which log: every data partition and every internal shard has one preferred
node, and while that node is down the next live node around the ring takes it.

Owners are computed the same way by every node from the same inputs (node ids and the set of
live nodes), so no coordination service is needed to agree on them. Agreement is not what
keeps logs safe, though: a node can only write a log it holds the owner lock of
(partitions/log_manager.py), so two nodes that briefly disagree cannot both write.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from proto.hashing import java_string_hash
from proto.structs import INTERNAL_TOPICS

NO_OWNER = -1


@dataclass(frozen=True)
class Placement:
    node_ids: tuple[int, ...]

    def preferred_index(self, topic: str, partition: int) -> int:
        """Internal shards go round-robin; a data partition starts at a per-topic offset so topics spread too."""
        n = len(self.node_ids)
        if topic.startswith("__") or topic in INTERNAL_TOPICS:
            return partition % n
        return ((java_string_hash(topic) & 0x7FFFFFFF) + partition) % n

    def owner(self, topic: str, partition: int, live: Collection[int] | None = None) -> int:
        """The preferred node if live, else the next live one around the ring (NO_OWNER if none is)."""
        start = self.preferred_index(topic, partition)
        n = len(self.node_ids)
        for step in range(n):
            node = self.node_ids[(start + step) % n]
            if live is None or node in live:
                return node
        return NO_OWNER

    def owned_by(self, node_id: int, topic: str, partitions: int, live: Collection[int] | None = None) -> list[int]:
        return [p for p in range(partitions) if self.owner(topic, p, live) == node_id]
