"""Admin: topics, offsets, and kafka-transactions' tools (list, describe, describe-producers,
find-hanging, abort). A client: it speaks only the wire protocol."""
from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

from client.cluster import GROUP, TRANSACTION, ClusterClient
from client.transport import Deadline, Stubs, call, retrying
from proto import txnsim_pb2 as pb
from proto.errors import (
    IllegalArgumentError,
    InvalidGroupIdError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    KafkaError,
    TopicAlreadyExistsError,
    TransactionalIdNotFoundError,
    raise_for,
)
from proto.structs import INTERNAL_TOPICS, OffsetAndMetadata, TopicPartition, TransactionState, validate_topic_name


@dataclass(frozen=True, slots=True)
class HalfMessageListing:
    """An undecided RocketMQ-style half message, as its shard's owner sees it."""

    transaction_id: str
    producer_group: str
    topic: str
    partition: int
    message_id: str
    store_time_ms: int
    check_times: int
    last_check_ms: int        # 0: never checked
    next_check_ms: int
    unanswered_checks: int    # passes that found no live producer of the group (not counted)
    storage: str
    shard: int
    node_id: int


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: TransactionState


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    state: TransactionState
    producer_id: int
    producer_epoch: int
    partitions: frozenset[TopicPartition]
    timeout_ms: int
    start_time_ms: int
    last_update_time_ms: int
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One producer's state on one partition (DescribeProducers)."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create, as kafka-python's NewTopic: -1 partitions is the cluster default (1), and the
    replication factor must be 1 or -1 (txnsim keeps one copy of every log)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignments: dict[int, list[int]] = field(default_factory=dict)
    topic_configs: dict[str, str] = field(default_factory=dict)


class NewTopicOptions(TypedDict, total=False):
    """A topic's options in create_topics' {name: options} form (kafka-python's dict form)."""

    num_partitions: int
    replication_factor: int
    configs: dict[str, str]


class KafkaPythonNewTopic(Protocol):
    """kafka-python's NewTopic as create_topics reads it (its assignments and configs are read if present)."""

    @property
    def name(self) -> str: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def replication_factor(self) -> int: ...


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: decoded from the member's ConsumerProtocol assignment (empty for other protocol types)
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation_id: int
    members: tuple[GroupMember, ...]
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    start_offset: int
    reason: str


class Admin:
    def __init__(self, bootstrap_servers: str, *, request_timeout_ms: int = 30_000) -> None:
        self._client = ClusterClient(bootstrap_servers, request_timeout_ms=request_timeout_ms)
        self._timeout_s = request_timeout_ms / 1000

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------ topics

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                     replication_factor: int | None = None) -> int:
        """`configs`: "message.type" (RocketMQ's NORMAL, FIFO, DELAY, TRANSACTION or MIXED, the default) and
        "half.message.storage" ("rocketmq" or "kafka": how undecided transactional messages wait).
        `replication_factor`: copies of each partition (None: the cluster's default, 3 on a replicated cluster
        of at least 3 nodes, as Kafka's default.replication.factor; a shared directory keeps 1). Returns the
        replication factor the topic got."""
        validate_topic_name(name)
        request = pb.CreateTopicRequest(name=name, partitions=partitions, configs=configs or {},
                                        replication_factor=replication_factor or 0)
        response: pb.CreateTopicResponse = self._client.any_node(
            lambda s: call(s.cluster.CreateTopic, request, self._timeout_s))
        self._client.refresh_metadata([name])
        return response.replication_factor or 1

    def create_topics(self, new_topics: Iterable[NewTopic | KafkaPythonNewTopic | str] | dict[str, NewTopicOptions],
                      validate_only: bool = False) -> None:
        """kafka-python's create_topics: NewTopic objects, names, or {name: {"num_partitions", "replication_factor",
        "configs"}}. Every topic is checked before any is created; `validate_only` stops there."""
        topics = [_as_new_topic(t) for t in (
            [NewTopic(name, o.get("num_partitions", -1), o.get("replication_factor", -1),
                      topic_configs=o.get("configs") or {}) for name, o in new_topics.items()]
            if isinstance(new_topics, dict) else new_topics)]
        existing = self.list_topics(include_internal=True)
        for topic in topics:
            validate_topic_name(topic.name)
            if topic.replication_factor == 0 or topic.replication_factor < -1:
                raise InvalidReplicationFactorError(
                    f"[INVALID_REPLICATION_FACTOR] {topic.name!r}: replication factor {topic.replication_factor}")
            if topic.replica_assignments:
                raise InvalidReplicaAssignmentError(
                    f"[INVALID_REPLICA_ASSIGNMENT] {topic.name!r}: partitions are placed by txnsim, not assigned")
            if topic.num_partitions == 0 or topic.num_partitions < -1:
                raise InvalidPartitionsError(
                    f"[INVALID_PARTITIONS] {topic.name!r}: {topic.num_partitions} partitions")
            if topic.name in existing:
                raise TopicAlreadyExistsError(f"[TOPIC_ALREADY_EXISTS] topic {topic.name!r} already exists")
        for topic in topics:  # what only the cluster knows (how many brokers live), asked before anything is made
            check = pb.CreateTopicRequest(name=topic.name, partitions=max(topic.num_partitions, 1),
                                          configs=dict(topic.topic_configs),
                                          replication_factor=max(topic.replication_factor, 0), validate_only=True)
            self._client.any_node(functools.partial(_create_topic, request=check, timeout_s=self._timeout_s))
        if validate_only:
            return
        for topic in topics:
            self.create_topic(topic.name, max(topic.num_partitions, 1), dict(topic.topic_configs) or None,
                              topic.replication_factor if topic.replication_factor > 0 else None)

    def delete_topic(self, name: str) -> int:
        """Delete a topic and its data on every node; returns how many partitions it had.

        UnknownTopicOrPartitionError if there is no such topic, InvalidTopicError for an internal one.
        """
        validate_topic_name(name)
        request = pb.DeleteTopicRequest(name=name)
        # the answer's error is raised only here: UNKNOWN_TOPIC_OR_PARTITION is retriable, and would be retried
        response: pb.DeleteTopicResponse = self._client.any_node(
            lambda s: call(s.cluster.DeleteTopic, request, self._timeout_s, check=False))
        self._client.refresh_metadata([name])  # forgets the topic's partition count and leaders
        raise_for(response.error_code, response.error_message)
        return response.partitions

    def alter_topic(self, name: str, partitions: int = 0, set_configs: dict[str, str] | None = None,
                    delete_configs: Iterable[str] = ()) -> tuple[int, dict[str, str]]:
        """kafka-topics.sh --alter: grow the topic to `partitions` (0: leave it; INVALID_PARTITIONS for fewer)
        and set or delete settings. Returns (partition count, settings) as the topic has them now."""
        validate_topic_name(name)
        if partitions < 0:
            raise InvalidPartitionsError(f"[INVALID_PARTITIONS] {name!r}: {partitions} partitions")
        request = pb.AlterTopicRequest(name=name, partitions=partitions, set_configs=set_configs or {},
                                       delete_configs=list(delete_configs))
        response = self._client.any_node(lambda s: call(s.cluster.AlterTopic, request, self._timeout_s))
        self._client.refresh_metadata([name])  # the new partition count, for this client's next lookups
        return response.partitions, dict(response.configs)

    def delete_topics(self, names: Iterable[str]) -> dict[str, int]:
        """Delete each topic in turn (stopping at the first error); topic -> how many partitions it had."""
        return {name: self.delete_topic(name) for name in names}

    def list_topics(self, include_internal: bool = False) -> dict[str, int]:
        response = self._client.refresh_metadata()
        return {t.name: len(t.partitions) for t in response.topics
                if t.error_code == 0 and (include_internal or t.name not in INTERNAL_TOPICS)}

    def describe_cluster(self) -> pb.MetadataResponse:
        return self._client.refresh_metadata()

    def cluster_status(self) -> pb.ClusterStatusResponse:
        """Any live node's view: nodes, the logs it owns, and the latest ownership changes."""
        status: pb.ClusterStatusResponse = self._client.any_node(
            lambda s: call(s.cluster.Status, pb.ClusterStatusRequest(), self._timeout_s))
        return status

    # ------------------------------------------------------------ offsets

    def _list_offsets(self, tps: Iterable[TopicPartition], timestamps: dict[TopicPartition, int] | None = None
                      ) -> dict[TopicPartition, pb.PartitionOffsets]:
        """Offsets of every partition (and the record each of `timestamps` finds); a leader that is moving
        (NOT_LEADER_OR_FOLLOWER, unreachable) is looked up again and asked again until the request timeout, as
        Kafka's AdminClient does."""
        wanted = list(tps)
        out: dict[TopicPartition, pb.PartitionOffsets] = {}
        for attempt in retrying(self._timeout_s, before_retry=lambda _exc: self._client.invalidate()):
            with attempt:
                failure: KafkaError | None = None
                for address, group in self._by_leader(tp for tp in wanted if tp not in out).items():
                    request = pb.ListOffsetsRequest(
                        partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in group],
                        timestamps=[timestamps[tp] for tp in group] if timestamps else [])
                    try:
                        response = call(self._client.stubs(address).partitions.ListOffsets, request, self._timeout_s)
                        for p in response.partitions:
                            raise_for(p.error_code, p.error_message)
                            out[TopicPartition(p.topic, p.partition)] = p
                    except KafkaError as exc:
                        if not exc.retriable:
                            raise
                        failure = failure or exc
                if failure is not None:
                    raise failure
        return out

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """The first offset whose record timestamp is >= the given one (ms), per partition; None if no record
        is that late (Kafka's ListOffsets by time)."""
        found = self._list_offsets(timestamps, timestamps)
        return {tp: p.offset_for_timestamp if p.offset_for_timestamp >= 0 else None for tp, p in found.items()}

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: p.high_watermark for tp, p in self._list_offsets(tps).items()}

    def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: p.log_start_offset for tp, p in self._list_offsets(tps).items()}

    def last_stable_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: p.last_stable_offset for tp, p in self._list_offsets(tps).items()}

    # ------------------------------------------------------------ transactions

    def list_transactions(self, states: Iterable[str] | None = None,
                          producer_ids: Iterable[int] | None = None) -> list[TransactionListing]:
        """Every node answers for the shards it coordinates; the union is the cluster's list."""
        request = pb.ListTransactionsRequest(state_filters=[str(s) for s in states or ()],
                                             producer_id_filters=list(producer_ids or ()))
        listings: dict[str, TransactionListing] = {}
        for node in self._client.refresh_metadata().nodes:
            if not node.alive:
                continue
            try:
                response = call(self._client.stubs(node.address).transactions.ListTransactions, request,
                                self._timeout_s)
            except KafkaError:
                continue
            for t in response.transactions:
                listings[t.transactional_id] = TransactionListing(t.transactional_id, t.producer_id,
                                                                  TransactionState(t.state))
        return sorted(listings.values(), key=lambda t: t.transactional_id)

    def list_half_messages(self, producer_group: str | None = None) -> list[HalfMessageListing]:
        """Undecided half messages of every shard (each node answers for the shards it owns), oldest first."""
        request = pb.ListHalfMessagesRequest(producer_group=producer_group or "")
        listings: dict[str, HalfMessageListing] = {}
        for node in self._client.refresh_metadata().nodes:
            if not node.alive:
                continue
            try:
                response = call(self._client.stubs(node.address).half.ListHalfMessages, request, self._timeout_s)
            except KafkaError:
                continue
            for m in response.messages:
                listings[m.transaction_id] = HalfMessageListing(
                    m.transaction_id, m.producer_group, m.topic, m.partition, m.message_id, m.store_time_ms,
                    m.check_times, m.last_check_ms, m.next_check_ms, m.unanswered_checks, m.storage, m.shard, m.node_id)
        return sorted(listings.values(), key=lambda m: (m.store_time_ms, m.transaction_id))

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        if not transactional_id:
            raise InvalidRequestError("[INVALID_REQUEST] transactional id is empty")
        def check(response: pb.DescribeTransactionsResponse) -> None:
            d = response.transactions[0]
            if d.error_code == TransactionalIdNotFoundError.errno:
                raise TransactionalIdNotFoundError(d.error_message)
            raise_for(d.error_code, d.error_message)

        response, _address = self._coordinator_call(
            TRANSACTION, transactional_id, lambda stubs: stubs.transactions.DescribeTransactions,
            pb.DescribeTransactionsRequest(transactional_ids=[transactional_id]), check)
        d = response.transactions[0]
        return TransactionDescription(
            d.transactional_id, TransactionState(d.state), d.producer_id, d.producer_epoch,
            frozenset(TopicPartition(p.topic, p.partition) for p in d.partitions), d.timeout_ms, d.start_time_ms,
            d.last_update_time_ms, d.coordinator_id)

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """kafka-python's name: describe_transaction of each id, in order."""
        return [self.describe_transaction(tid) for tid in transactional_ids]

    def describe_producers(self, tp: TopicPartition) -> list[ProducerState]:
        address = self._client.leader_address(tp)
        request = pb.DescribeProducersRequest(partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)])
        response = call(self._client.stubs(address).partitions.DescribeProducers, request, self._timeout_s)
        part = response.partitions[0]
        raise_for(part.error_code, part.error_message)
        return [ProducerState(tp, p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp,
                              p.coordinator_epoch, p.current_txn_start_offset) for p in part.active_producers]

    def find_hanging_transactions(self, topic: str | None = None) -> list[HangingTransaction]:
        """KIP-664: an open transaction on a partition that its coordinator does not know about."""
        topics = self.list_topics()
        names = [topic] if topic else sorted(topics)
        by_pid: dict[int, TransactionListing] = {t.producer_id: t for t in self.list_transactions()}
        hanging = []
        for name in names:
            for partition in range(self._client.partitions_for(name)):
                tp = TopicPartition(name, partition)
                for producer in self.describe_producers(tp):
                    if producer.current_txn_start_offset < 0:
                        continue
                    listing = by_pid.get(producer.producer_id)
                    if listing is None:
                        reason = "no transactional id at any coordinator owns this producer id"
                    else:
                        description = self.describe_transaction(listing.transactional_id)
                        if description.state == TransactionState.ONGOING and tp in description.partitions:
                            continue
                        if description.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                            continue  # its markers are on the way
                        reason = (f"coordinator says {listing.transactional_id!r} is {description.state} without "
                                  f"this partition")
                    hanging.append(HangingTransaction(tp, producer.producer_id, producer.producer_epoch,
                                                      producer.current_txn_start_offset, reason))
        return hanging

    def abort_transaction(self, topic: str, partition: int, start_offset: int) -> ProducerState:
        """Write an ABORT marker straight to the partition for the producer whose open transaction
        starts at `start_offset` (kafka-transactions.sh abort)."""
        tp = TopicPartition(topic, partition)
        if start_offset < 0:  # -1 is what describe-producers says of a producer with nothing open
            raise InvalidRequestError(f"[INVALID_REQUEST] start offset {start_offset} on {tp} is negative")
        matches = [p for p in self.describe_producers(tp)
                   if p.current_txn_start_offset >= 0 and p.current_txn_start_offset == start_offset]
        if not matches:
            raise InvalidRequestError(
                f"[INVALID_REQUEST] no open transaction on {tp} starts at offset {start_offset}; "
                "see `txnsim transactions find-hanging`")
        producer = matches[0]
        marker = pb.TxnMarker(producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                              committed=False, coordinator_epoch=max(producer.coordinator_epoch, 0),
                              partitions=[pb.TopicPartitionRef(topic=topic, partition=partition)],
                              admin_abort_start_offset=start_offset)  # the leader checks it again, atomically
        address = self._client.leader_address(tp)
        response = call(self._client.stubs(address).partitions.WriteTxnMarkers,
                        pb.WriteTxnMarkersRequest(markers=[marker]), self._timeout_s)
        result = response.markers[0].partitions[0]
        raise_for(result.error_code, result.error_message)
        return producer

    # ------------------------------------------------------------ consumer groups (kafka-python's KafkaAdminClient names)

    def list_consumer_groups(self) -> list[GroupListing]:
        """Every node answers for the groups of the __consumer_offsets shards it owns; the union is the cluster's."""
        listings: dict[str, GroupListing] = {}
        for node in self._client.refresh_metadata().nodes:
            if not node.alive:
                continue
            try:
                response = call(self._client.stubs(node.address).groups.ListGroups, pb.ListGroupsRequest(),
                                self._timeout_s)
            except KafkaError:
                continue
            for g in response.groups:
                listings[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.state)
        return sorted(listings.values(), key=lambda g: g.group_id)

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """State, protocol, generation and members (with their decoded assignments) of each group; a group
        nobody ever used is described as Dead, as Kafka does."""
        # here, not at the top: the codec imports kafka-python, a fifth of a command-line call's start-up
        from proto.consumer_protocol import decode_assignment

        out = []
        for group_id in group_ids:
            response, address = self._group_call("DescribeGroups", group_id,
                                                 pb.DescribeGroupsRequest(group_ids=[group_id]))
            node_id = next((n.node_id for n in self._client.refresh_metadata().nodes if n.address == address), -1)
            d = response.groups[0]
            raise_for(d.error_code, d.error_message)
            consumer = d.protocol_type == "consumer"
            out.append(GroupDescription(
                d.group_id, d.state, d.protocol_type, d.protocol, d.generation_id,
                tuple(GroupMember(m.member_id, m.group_instance_id or None, m.client_id, m.client_host,
                                  tuple(decode_assignment(m.assignment)) if consumer and m.assignment else ())
                      for m in d.members), node_id))
        return out

    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all of them, or those of `partitions`); a partition with none is left out."""
        request = pb.OffsetFetchRequest(group_id=group_id, partitions=[
            pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in partitions or ()])
        response, _address = self._group_call("OffsetFetch", group_id, request)
        out = {}
        for r in response.results:
            raise_for(r.error_code, r.error_message)
            if r.offset >= 0:
                out[TopicPartition(r.topic, r.partition)] = OffsetAndMetadata(r.offset, r.metadata)
        return out

    def alter_consumer_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit `offsets` for a group that has no active members (kafka-consumer-groups.sh --reset-offsets):
        a standalone commit (generation -1), which the coordinator refuses while members are in the group."""
        for tp, offset in offsets.items():
            if offset < 0:
                raise IllegalArgumentError(f"[INVALID_REQUEST] offset {offset} for {tp} is negative")
        request = pb.OffsetCommitRequest(group_id=group_id, generation_id=-1, member_id="", offsets=[
            pb.OffsetEntry(topic=tp.topic, partition=tp.partition, offset=offset) for tp, offset in offsets.items()])
        response, _address = self._group_call("OffsetCommit", group_id, request)
        for r in response.results:
            raise_for(r.error_code, r.error_message)

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete each group and its committed offsets; NON_EMPTY_GROUP while it has members."""
        for group_id in group_ids:
            response, _address = self._group_call("DeleteGroups", group_id,
                                                  pb.DeleteGroupsRequest(group_ids=[group_id]))
            for r in response.results:
                raise_for(r.error_code, r.error_message)

    def _group_call(self, rpc: str, group_id: str, request: Any) -> tuple[Any, str]:
        """(response, coordinator address) of the GroupCoordinator service's `rpc` at the group's coordinator."""
        if not group_id:
            raise InvalidGroupIdError("[INVALID_GROUP_ID] the group id is empty")
        return self._coordinator_call(GROUP, group_id, lambda stubs: getattr(stubs.groups, rpc), request)

    def _coordinator_call(self, key_type: int, key: str, method: Callable[[Any], Any], request: Any,
                          check: Callable[[Any], None] | None = None) -> tuple[Any, str]:
        """(response, coordinator address) of `method(stubs)(request)` at the coordinator of `key`; a
        coordinator that moved (an invalid-metadata error, from the call or from `check` of its answer) is
        looked up again and asked again, within one budget for lookups and retries alike."""
        deadline = Deadline(self._timeout_s)
        for attempt in retrying(deadline.remaining()):
            with attempt:
                address = self._client.coordinator_address(key_type, key, deadline)
                try:
                    response = call(method(self._client.stubs(address)), request, max(deadline.remaining(), 0.05))
                    if check is not None:
                        check(response)
                except KafkaError as exc:
                    if exc.invalid_metadata:
                        self._client.invalidate_coordinator(key_type, key)
                    raise
        return response, address

    # ------------------------------------------------------------ helpers

    def _by_leader(self, tps: Iterable[TopicPartition]) -> dict[str, list[TopicPartition]]:
        groups: dict[str, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            groups[self._client.leader_address(tp)].append(tp)
        return groups


def _as_new_topic(topic: NewTopic | KafkaPythonNewTopic | str) -> NewTopic:
    """A NewTopic from txnsim's, a name, or kafka-python's NewTopic (same attribute names)."""
    if isinstance(topic, NewTopic):
        return topic
    if isinstance(topic, str):
        return NewTopic(topic)
    return NewTopic(topic.name, topic.num_partitions, topic.replication_factor,
                    dict(getattr(topic, "replica_assignments", None) or {}),
                    dict(getattr(topic, "topic_configs", None) or {}))


def _create_topic(stubs: Stubs, request: pb.CreateTopicRequest, timeout_s: float) -> pb.CreateTopicResponse:
    response: pb.CreateTopicResponse = call(stubs.cluster.CreateTopic, request, timeout_s)
    return response
