"""The topics of a replicated cluster, behind the same interface as the shared directory's topics.json
(coordinator/topics.py): read from the broker's ClusterView, created through TopicAdmin in the coordination
store. A creation returns once this broker has seen every partition get its first leader, so a client that
creates a topic and then produces to it finds a leader.

A topic's settings change in the store (its /config/topics znode, conditionally on its version); the call
returns once this broker's view has them, so the next describe shows them and the next write obeys them.
Partitions are added in the store too, and the call returns once this broker has seen each new one led. A
topic is deleted through the store's deletion marker (topic_deletion.py); the call returns once this
broker's view no longer has it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from coordinator.controller.cluster_view import ClusterView
from coordinator.controller.elections import check_replication_factor
from coordinator.controller.topic_admin import TopicAdmin
from coordinator.runtime.io import wait_for
from coordinator.topic_configs import check_configs
from coordinator.topics import (
    check_alterable,
    check_changes,
    check_new_topic,
    check_replacement,
    with_changes,
)
from proto.errors import (
    InvalidPartitionsError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from proto.structs import INTERNAL_TOPICS, MAX_PARTITIONS_PER_TOPIC

#: how long a creation waits for the controller to give every new partition its first leader
FIRST_LEADERS_TIMEOUT_S = 10.0
#: how long a settings change waits for this node's view of the store to show it
CONFIGS_SEEN_TIMEOUT_S = 10.0
#: how long a deletion waits for every replica's broker to delete its log and the controller to finish
DELETION_TIMEOUT_S = 10.0


class StoreTopics:
    def __init__(self, view: ClusterView, admin: TopicAdmin) -> None:
        self._view = view
        self._admin = admin

    def all(self) -> dict[str, int]:
        """topic -> partition count, the cluster's own topics left out (as topics.json leaves them out)."""
        return {name: count for name, count in self._view.topics().items() if name not in INTERNAL_TOPICS}

    def partitions(self, topic: str) -> int | None:
        return self._view.partitions(topic)

    def configs_view(self, topic: str) -> Mapping[str, str]:
        return self._view.configs(topic)

    def configs(self, topic: str) -> dict[str, str]:
        return dict(self._view.configs(topic))

    def validate(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                 replication_factor: int = -1) -> dict[str, str]:
        settings = check_new_topic(name, partitions, configs)
        if replication_factor != -1:
            check_replication_factor(replication_factor, sorted(self._view.live))
        if self._view.partitions(name) is not None:
            raise TopicAlreadyExistsError(f"[TOPIC_ALREADY_EXISTS] topic {name!r} already exists")
        return settings

    def create(self, name: str, partitions: int, configs: dict[str, str] | None = None,
               replication_factor: int = -1) -> int:
        """Create the topic (`replication_factor` -1: the cluster's default) and wait for its first leaders;
        returns the copies of each partition."""
        self.validate(name, partitions, configs, replication_factor)
        assignment: dict[int, tuple[int, ...]] = wait_for(
            lambda done: self._admin.create(name, partitions, replication_factor, configs, done))
        if not self.wait_for_leaders(name, partitions, FIRST_LEADERS_TIMEOUT_S):
            raise RequestTimedOutError(f"[REQUEST_TIMED_OUT] topic {name!r} was created, but not every partition "
                                       f"had a leader within {FIRST_LEADERS_TIMEOUT_S:.0f} s; it will have soon")
        return len(assignment[0])

    def wait_for_leaders(self, name: str, partitions: int, timeout_s: float) -> bool:
        view = self._view
        return view.wait_for(lambda: view.partitions(name) == partitions and all(
            view.owner(name, p) >= 0 for p in range(partitions)), timeout_s)

    def delete(self, name: str) -> int:
        """Delete the topic (topic_deletion.py) and wait until this broker's view no longer has it; returns its
        partition count. REQUEST_TIMED_OUT if a replica's broker has not deleted its log in time (one that is
        down does when it is back): the deletion goes on, and the name stays taken until it is done."""
        count = self._existing(name)
        wait_for(lambda done: self._admin.delete(name, done))
        if not self._view.wait_for(lambda: self._view.partitions(name) is None, DELETION_TIMEOUT_S):
            raise RequestTimedOutError(
                f"[REQUEST_TIMED_OUT] topic {name!r} is marked for deletion, but not every broker holding a "
                f"replica of it had deleted its log within {DELETION_TIMEOUT_S:.0f} s (one that is down does once "
                "it is back); it is deleted then")
        return count

    def alter(self, name: str, partitions: int, set_configs: dict[str, str], delete_configs: list[str]
              ) -> tuple[int, dict[str, str]]:
        """More partitions (0: as many as now) and changed settings (IncrementalAlterConfigs' SET and DELETE),
        durably; returns (partitions, settings). New partitions are placed in the store and given their first
        leaders by the controller; the call returns once this broker has seen every one led. Existing
        partitions keep their replicas and their logs."""
        count = self._existing(name)
        if partitions and not count < partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"[INVALID_PARTITIONS] topic {name!r} has {count} partitions; it can only grow, to at most "
                f"{MAX_PARTITIONS_PER_TOPIC}, not to {partitions}")
        set_configs = check_changes(set_configs, delete_configs)
        if partitions:
            wait_for(lambda done: self._admin.add_partitions(name, partitions, done))
            if not self.wait_for_leaders(name, partitions, FIRST_LEADERS_TIMEOUT_S):
                raise RequestTimedOutError(f"[REQUEST_TIMED_OUT] topic {name!r} has {partitions} partitions now, "
                                           f"but not every new one had a leader within "
                                           f"{FIRST_LEADERS_TIMEOUT_S:.0f} s; it will have soon")
            count = partitions
        if not set_configs and not delete_configs:
            return count, dict(self._view.configs(name))
        return count, self._change(name, lambda current: with_changes(current, set_configs, delete_configs))

    def replace_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> dict[str, str]:
        """Kafka's AlterConfigs: the topic's settings become exactly `configs` (those not named return to their
        defaults), durably; returns them. Settings fixed at creation must keep their values."""
        self._existing(name)
        settings = check_configs(configs)

        def change(current: dict[str, str]) -> dict[str, str]:
            check_replacement(current, settings)
            return dict(settings)
        if validate_only:
            change(dict(self._view.configs(name)))
            return settings
        return self._change(name, change)

    def _existing(self, name: str) -> int:
        """The partition count of `name`, a topic clients may change: INVALID_TOPIC_EXCEPTION for an internal
        one, UNKNOWN_TOPIC_OR_PARTITION for one that does not exist."""
        check_alterable(name)
        count = self._view.partitions(name)
        if count is None:
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {name!r} does not exist")
        return count

    def _change(self, name: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        new: dict[str, str] = wait_for(lambda done: self._admin.change_configs(name, change, done))
        if not self._view.wait_for(lambda: dict(self._view.configs(name)) == new, CONFIGS_SEEN_TIMEOUT_S):
            raise RequestTimedOutError(f"[REQUEST_TIMED_OUT] the settings of topic {name!r} were changed, but this "
                                       f"node had not seen them within {CONFIGS_SEEN_TIMEOUT_S:.0f} s; it will soon")
        return new

    def remove_logs_if_deleted(self, name: str) -> list[str]:
        return []

