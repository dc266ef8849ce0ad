"""What every client needs before its first real request: nodes, partition leaders, coordinators.

A ClusterClient caches metadata and coordinator addresses; callers drop the cache
(`invalidate`) when a node answers NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR or cannot
be reached, and the next lookup asks any live node again.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from client.transport import Deadline, NodeChannels, Stubs, call, retrying
from proto import txnsim_pb2 as pb
from proto.errors import (
    CoordinatorNotAvailableError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
    raise_for,
)
from proto.structs import TopicPartition

GROUP = 0
TRANSACTION = 1
#: txnsim's key type for the half-message shard of a producer group
HALF_MESSAGES = 100
#: the longest a metadata or coordinator lookup waits for one node before asking the next (and the
#: producer's I/O thread blocks on one lookup in a round)
LOOKUP_TIMEOUT_S = 2.0

T = TypeVar("T")


def parse_bootstrap(bootstrap_servers: str | Iterable[str]) -> list[str]:
    if isinstance(bootstrap_servers, str):
        servers = [s.strip() for s in bootstrap_servers.split(",")]
    else:
        servers = [str(s).strip() for s in bootstrap_servers]
    servers = [s for s in servers if s]
    if not servers:
        raise ValueError("bootstrap_servers is empty; pass 'host:port[,host:port...]'")
    return servers


class ClusterClient:
    """Metadata cache and coordinator lookup, shared by one client's threads."""

    def __init__(self, bootstrap_servers: str | Iterable[str], *, request_timeout_ms: int = 30_000) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.request_timeout_s = request_timeout_ms / 1000
        self.channels = NodeChannels()
        self._lock = threading.RLock()
        self._nodes: dict[int, str] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._partition_counts: dict[str, int] = {}
        self._coordinators: dict[tuple[int, str], str] = {}
        self._rotation = 0

    # ------------------------------------------------------------ plumbing

    def stubs(self, address: str) -> Stubs:
        return self.channels.stubs(address)

    def known_addresses(self) -> list[str]:
        with self._lock:
            known = list(self._nodes.values())
            self._rotation += 1
            rotation = self._rotation
        addresses = list(dict.fromkeys(known + self.bootstrap))
        shift = rotation % len(addresses)
        return addresses[shift:] + addresses[:shift]

    def any_node(self, fn: Callable[[Stubs], T], deadline: Deadline | None = None) -> T:
        """Run `fn(stubs)` against the first node that answers (rotating), retrying until the deadline."""
        deadline = deadline or Deadline(self.request_timeout_s)
        for attempt in retrying(deadline.remaining()):
            with attempt:
                last: KafkaError | None = None
                for address in self.known_addresses():
                    try:
                        return fn(self.stubs(address))
                    except (KafkaConnectionError, KafkaTimeoutError) as exc:  # down or stalled: ask the next
                        last = exc
                raise last or KafkaConnectionError("no node is reachable")
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.channels.close()

    # ------------------------------------------------------------ metadata

    def refresh_metadata(self, topics: Iterable[str] = (), deadline: Deadline | None = None) -> pb.MetadataResponse:
        request = pb.MetadataRequest(topics=list(topics), include_internal=True)
        response: pb.MetadataResponse = self.any_node(
            lambda s: call(s.cluster.Metadata, request, self._lookup_timeout(deadline)), deadline)
        with self._lock:
            self._nodes = {n.node_id: n.address for n in response.nodes}
            for topic in response.topics:
                if topic.error_code != 0:
                    self._partition_counts.pop(topic.name, None)
                    continue
                self._partition_counts[topic.name] = len(topic.partitions)
                for p in topic.partitions:
                    self._leaders[TopicPartition(topic.name, p.partition)] = p.leader
        return response

    def partitions_for(self, topic: str, deadline: Deadline | None = None) -> int:
        """The topic's partition count; UnknownTopicOrPartitionError as soon as the cluster says it does not exist."""
        with self._lock:
            count = self._partition_counts.get(topic)
        if count is not None:
            return count
        response = self.refresh_metadata([topic], deadline)
        for t in response.topics:
            if t.name == topic:
                raise_for(t.error_code, t.error_message)
                return len(t.partitions)
        raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {topic!r} does not exist")

    def leader_address(self, tp: TopicPartition, deadline: Deadline | None = None) -> str:
        """Address of the node that owns `tp` now (refreshes metadata when unknown)."""
        for refreshed in (False, True):
            with self._lock:
                leader = self._leaders.get(tp)
                address = self._nodes.get(leader) if leader is not None and leader >= 0 else None
            if address is not None:
                return address
            if refreshed:
                break
            self.refresh_metadata([tp.topic], deadline)
            self.partitions_for(tp.topic, deadline)
            if tp.partition >= self._partition_counts.get(tp.topic, 0) or tp.partition < 0:
                raise UnknownTopicOrPartitionError(
                    f"[UNKNOWN_TOPIC_OR_PARTITION] partition {tp.partition} of topic {tp.topic!r} does not exist")
        raise KafkaConnectionError(f"no live node owns {tp} yet")

    def invalidate(self, tp: TopicPartition | None = None) -> None:
        """Forget leaders (all, or one partition's) so the next lookup asks the cluster."""
        with self._lock:
            if tp is None:
                self._leaders.clear()
            else:
                self._leaders.pop(tp, None)

    # ------------------------------------------------------------ coordinators

    def coordinator_address(self, key_type: int, key: str, deadline: Deadline | None = None) -> str:
        with self._lock:
            address = self._coordinators.get((key_type, key))
        if address is not None:
            return address
        request = pb.FindCoordinatorRequest(key_type=key_type, key=key)
        response: pb.FindCoordinatorResponse = self.any_node(
            lambda s: call(s.cluster.FindCoordinator, request, self._lookup_timeout(deadline)), deadline)
        if not response.address:
            raise CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] no coordinator for {key!r} yet")
        with self._lock:
            self._coordinators[(key_type, key)] = response.address
        return response.address

    def invalidate_coordinator(self, key_type: int, key: str) -> None:
        with self._lock:
            self._coordinators.pop((key_type, key), None)

    def _lookup_timeout(self, deadline: Deadline | None) -> float:
        """Metadata and FindCoordinator are cheap for any live node: one that has not answered in
        two seconds is stalled, and the next node is asked instead."""
        return min(self._timeout(deadline), LOOKUP_TIMEOUT_S)

    def _timeout(self, deadline: Deadline | None) -> float:
        if deadline is None:
            return self.request_timeout_s
        return min(self.request_timeout_s, max(deadline.remaining(), 0.05))
