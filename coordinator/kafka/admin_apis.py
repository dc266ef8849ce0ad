"""CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeProducers, DescribeTransactions and
ListTransactions on the Kafka port, answered by the objects behind the gRPC Cluster, Partitions and
TransactionCoordinator services.

Topics are checked as `txnsim topics create` checks them (TopicStore.validate), one copy per log: a replication
factor other than 1 or -1 (the default) is INVALID_REPLICATION_FACTOR. Every node answers ListTransactions for
the transaction shards it coordinates, as a Kafka broker does; clients ask every broker and merge.
"""
from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)

from coordinator.cluster_service import ClusterServer
from coordinator.kafka.apis import ApiKey, WireError
from coordinator.kafka.dispatch import Handler
from coordinator.partition_service import PartitionServer
from coordinator.runtime.shard_status import ShardStatus
from coordinator.topics import TopicCatalog
from coordinator.txn.coordinator import TransactionCoordinator
from proto import txnsim_pb2 as pb
from proto.errors import (
    CoordinatorLoadInProgressError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
    code_of,
)

#: Kafka's num.partitions default, used when CreateTopics asks for -1
DEFAULT_PARTITIONS = 1
#: Kafka's ConfigSource for a setting the topic was given (DYNAMIC_TOPIC_CONFIG)
TOPIC_CONFIG_SOURCE = 1
#: the state names Kafka's ListTransactions filters on (any other is echoed back as unknown)
KNOWN_STATES = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                          "Dead", "PrepareEpochFence"})
DEAD = "Dead"


class AdminApis:
    def __init__(self, *, cluster: ClusterServer, partitions: PartitionServer, txn: TransactionCoordinator,
                 topics: TopicCatalog, node_id: int, now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 default_partitions: int = DEFAULT_PARTITIONS) -> None:
        #: partitions of a topic created with num_partitions -1 (the node's num.partitions)
        self._default_partitions = default_partitions
        self._cluster = cluster
        self._partitions = partitions
        self._txn = txn
        self._topics = topics
        self._node_id = node_id
        self._now_ms = now_ms

    def handlers(self) -> dict[ApiKey, Handler]:
        return {
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.DESCRIBE_PRODUCERS: self.describe_producers,
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.DELETE_RECORDS: self.delete_records,
        }

    # ------------------------------------------------------------ CreatePartitions (37)

    def create_partitions(self, request: CreatePartitionsRequest, version: int) -> CreatePartitionsResponse:
        counts = Counter(topic.name for topic in request.topics)
        results = []
        for topic in request.topics:
            try:
                if counts[topic.name] > 1:
                    raise InvalidRequestError("[INVALID_REQUEST] Duplicate topic name.")
                if topic.assignments:
                    raise InvalidReplicaAssignmentError(
                        "[INVALID_REPLICA_ASSIGNMENT] txnsim places partitions itself; leave "
                        "assignments empty")
                current = self._topics.partitions(topic.name)
                if current is None:
                    raise UnknownTopicOrPartitionError(
                        f"[UNKNOWN_TOPIC_OR_PARTITION] topic {topic.name!r} does not exist")
                if topic.count == current:
                    raise InvalidPartitionsError(f"[INVALID_PARTITIONS] Topic already has {current} partition(s).")
                if topic.count < current:
                    raise InvalidPartitionsError(f"[INVALID_PARTITIONS] Topic currently has {current} partition(s); "
                                                 f"{topic.count} would not be an increase.")
                if not request.validate_only:
                    self._cluster.alter_topic(pb.AlterTopicRequest(name=topic.name, partitions=topic.count))
                code, message = 0, None
            except KafkaError as exc:
                code, message = code_of(exc), str(exc)
            results.append(CreatePartitionsResponse.CreatePartitionsTopicResult(name=topic.name, error_code=code,
                                                                                error_message=message))
        return CreatePartitionsResponse(version=version, throttle_time_ms=0, results=results)

    # ------------------------------------------------------------ DeleteRecords (21)

    def delete_records(self, request: DeleteRecordsRequest, version: int) -> DeleteRecordsResponse:
        """On the partitions' leader (clients send each partition to its leader, as to Kafka's)."""
        Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
        topics = []
        for topic in request.topics:
            partitions = []
            for part in topic.partitions:
                try:
                    low, code = self._partitions.delete_records(topic.name, part.partition_index, part.offset), 0
                except KafkaError as exc:
                    low, code = -1, code_of(exc)
                partitions.append(Topic.DeleteRecordsPartitionResult(partition_index=part.partition_index,
                                                                     low_watermark=low, error_code=code))
            topics.append(Topic(name=topic.name, partitions=partitions))
        return DeleteRecordsResponse(version=version, throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------ CreateTopics (19)

    def create_topics(self, request: CreateTopicsRequest, version: int) -> CreateTopicsResponse:
        validate_only = bool(request.validate_only) if version >= 1 else False
        counts: defaultdict[str, int] = defaultdict(int)
        for topic in request.topics:
            counts[topic.name] += 1
        results, seen = [], set()
        for topic in request.topics:
            if topic.name in seen:
                continue  # one answer per name, as the response is keyed by name
            seen.add(topic.name)
            if counts[topic.name] > 1:
                results.append(_created(topic.name, WireError.INVALID_REQUEST, "Duplicate topic name."))
                continue
            results.append(self._create(topic, validate_only))
        return CreateTopicsResponse(version=version, throttle_time_ms=0, topics=results)

    def _create(self, topic: CreateTopicsRequest.CreatableTopic, validate_only: bool) -> CreateTopicsResponse.CreatableTopicResult:
        name = topic.name or ""
        if topic.replication_factor == 0 or topic.replication_factor < -1:
            return _created(name, WireError.INVALID_REPLICATION_FACTOR,
                            f"the replication factor must be at least 1, or -1 (the cluster's default), not "
                            f"{topic.replication_factor}")
        if topic.assignments:
            return _created(name, WireError.INVALID_REPLICA_ASSIGNMENT,
                            "txnsim places partitions itself (each on one live node); leave assignments empty "
                            "and give num_partitions")
        partitions = self._default_partitions if topic.num_partitions == -1 else topic.num_partitions
        try:
            configs = {}
            for config in topic.configs:
                if config.value is None:
                    raise InvalidConfigError(f"[INVALID_CONFIG] topic setting {config.name} has no value")
                configs[config.name] = config.value
            if partitions < 1:
                raise InvalidPartitionsError(f"[INVALID_PARTITIONS] a topic needs at least 1 partition, "
                                             f"not {topic.num_partitions}")
            configs = self._topics.validate(name, partitions, configs, topic.replication_factor)
            factor = max(1, topic.replication_factor)
            if not validate_only:
                factor = self._cluster.create_topic(pb.CreateTopicRequest(
                    name=name, partitions=partitions, configs=configs,
                    replication_factor=max(0, topic.replication_factor))).replication_factor or factor
        except KafkaError as exc:
            return _created(name, code_of(exc), str(exc))
        Config = CreateTopicsResponse.CreatableTopicResult.CreatableTopicConfigs
        return CreateTopicsResponse.CreatableTopicResult(
            name=name, error_code=0, error_message=None, num_partitions=partitions, replication_factor=factor,
            configs=[Config(name=k, value=v, read_only=False, config_source=TOPIC_CONFIG_SOURCE, is_sensitive=False)
                     for k, v in sorted(configs.items())])

    # ------------------------------------------------------------ DeleteTopics (20)

    def delete_topics(self, request: DeleteTopicsRequest, version: int) -> DeleteTopicsResponse:
        names = list(request.topic_names or [])
        results = []
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                code, message = int(WireError.INVALID_REQUEST), "Duplicate topic name."
            else:
                try:
                    self._cluster.delete_topic(pb.DeleteTopicRequest(name=name or ""))
                    code, message = 0, None
                except KafkaError as exc:
                    code, message = code_of(exc), str(exc)
            results.append(DeleteTopicsResponse.DeletableTopicResult(name=name, error_code=code,
                                                                     error_message=message))
        return DeleteTopicsResponse(version=version, throttle_time_ms=0, responses=results)

    # ------------------------------------------------------------ DescribeProducers (61)

    def describe_producers(self, request: DescribeProducersRequest, version: int) -> DescribeProducersResponse:
        wanted = [(topic.name, p) for topic in request.topics for p in topic.partition_indexes]
        answer = self._partitions.describe_producers(pb.DescribeProducersRequest(partitions=[
            pb.TopicPartitionRef(topic=name, partition=p) for name, p in wanted]))
        found = iter(answer.partitions)  # in request order
        Topic = DescribeProducersResponse.TopicResponse
        Partition = Topic.PartitionResponse
        topics = []
        for topic in request.topics:
            partitions = []
            for index in topic.partition_indexes:
                r = next(found)
                partitions.append(Partition(
                    partition_index=index, error_code=r.error_code, error_message=r.error_message or None,
                    active_producers=[Partition.ProducerState(
                        producer_id=p.producer_id, producer_epoch=p.producer_epoch, last_sequence=p.last_sequence,
                        last_timestamp=p.last_timestamp, coordinator_epoch=p.coordinator_epoch,
                        current_txn_start_offset=p.current_txn_start_offset) for p in r.active_producers]))
            topics.append(Topic(name=topic.name, partitions=partitions))
        return DescribeProducersResponse(version=version, throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------ DescribeTransactions (65)

    def describe_transactions(self, request: DescribeTransactionsRequest,
                              version: int) -> DescribeTransactionsResponse:
        ids = list(request.transactional_ids or [])
        answer = self._txn.describe_transactions(pb.DescribeTransactionsRequest(transactional_ids=ids), self._node_id)
        State = DescribeTransactionsResponse.TransactionState
        states = []
        for d in answer.transactions:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for p in d.partitions:
                by_topic[p.topic].append(p.partition)
            if d.error_code:
                states.append(State(error_code=d.error_code, transactional_id=d.transactional_id,
                                    transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                                    producer_id=-1, producer_epoch=-1, topics=[]))
                continue
            states.append(State(
                error_code=0, transactional_id=d.transactional_id, transaction_state=d.state,
                transaction_timeout_ms=d.timeout_ms, transaction_start_time_ms=d.start_time_ms,
                producer_id=d.producer_id, producer_epoch=d.producer_epoch,
                topics=[State.TopicData(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())]))
        return DescribeTransactionsResponse(version=version, throttle_time_ms=0, transaction_states=states)

    # ------------------------------------------------------------ ListTransactions (66)

    def list_transactions(self, request: ListTransactionsRequest, version: int) -> ListTransactionsResponse:
        def answer(code: int, unknown: list[str] | None = None,
                   listings: list[ListTransactionsResponse.TransactionState] | None = None) -> ListTransactionsResponse:
            return ListTransactionsResponse(version=version, throttle_time_ms=0, error_code=code,
                                            unknown_state_filters=unknown or [], transaction_states=listings or [])
        filters = list(request.state_filters or [])
        pattern = None
        if version >= 2 and request.transactional_id_pattern:
            try:
                pattern = re.compile(request.transactional_id_pattern)
            except re.error:
                return answer(WireError.INVALID_REGULAR_EXPRESSION)
        if any(shard.status is ShardStatus.LOADING for shard in self._txn.owned_shards()):  # a partial list would hide transactions
            return answer(CoordinatorLoadInProgressError.errno)
        try:
            listed = self._txn.list_transactions(pb.ListTransactionsRequest(
                state_filters=filters, producer_id_filters=list(request.producer_id_filters or [])))
        except KafkaError as exc:
            return answer(code_of(exc))
        if listed.error_code:
            return answer(listed.error_code)
        found = [t for t in listed.transactions if t.state != DEAD
                 and (pattern is None or pattern.fullmatch(t.transactional_id))]
        duration = request.duration_filter if version >= 1 else -1
        if duration >= 0 and found:  # only those running longer than `duration` ms, as Kafka filters
            described = self._txn.describe_transactions(
                pb.DescribeTransactionsRequest(transactional_ids=[t.transactional_id for t in found]), self._node_id)
            started = {d.transactional_id: d.start_time_ms for d in described.transactions if not d.error_code}
            now = self._now_ms()
            found = [t for t in found if t.transactional_id in started
                     and now - started[t.transactional_id] > duration]
        Listing = ListTransactionsResponse.TransactionState
        return answer(0, [s for s in filters if s not in KNOWN_STATES], [
            Listing(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
            for t in found])


def _created(name: str, code: int, message: str) -> CreateTopicsResponse.CreatableTopicResult:
    return CreateTopicsResponse.CreatableTopicResult(name=name, error_code=int(code), error_message=message,
                                                     num_partitions=-1, replication_factor=-1, configs=[])
