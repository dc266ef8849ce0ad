"""Which node owns which log: every data partition and every internal shard has exactly one owner.

Owners are spread evenly and computed the same way by every node and client-facing answer,
so no coordination is needed while the node set is fixed. Each log also carries a leader
epoch (bumped by every node that opens it as owner), which is the coordinator epoch that
fences markers from an older owner.
"""
from __future__ import annotations

from dataclasses import dataclass

from proto.hashing import java_string_hash


@dataclass(frozen=True)
class Placement:
    node_ids: tuple[int, ...]

    def owner(self, topic: str, partition: int) -> int:
        """Internal shards go round-robin; a data partition starts at a per-topic offset so topics spread too."""
        n = len(self.node_ids)
        if topic.startswith("__"):
            return self.node_ids[partition % n]
        start = (java_string_hash(topic) & 0x7FFFFFFF) % n
        return self.node_ids[(start + partition) % n]

    def owned_by(self, node_id: int, topic: str, partitions: int) -> list[int]:
        return [p for p in range(partitions) if self.owner(topic, p) == node_id]
