"""The group coordinator: consumer-group membership, range assignment and committed offsets
(plain and transactional) for the __consumer_offsets shards this node owns."""
from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.service import GroupService

__all__ = ["GroupCoordinator", "GroupService"]
