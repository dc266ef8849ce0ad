"""The Kafka admin handlers against stand-ins for ClusterServer, PartitionServer and the transaction coordinator,
with a real TopicStore: Kafka's error codes for bad topics, per-partition and per-id answers, the filters."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import ClassVar

from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    IncrementalAlterConfigsRequest,
    ListTransactionsRequest,
)

from coordinator.broker_configs import BrokerConfigStore
from coordinator.config import NodeConfig
from coordinator.kafka.admin_apis import AdminApis
from coordinator.kafka.apis import ApiKey
from coordinator.kafka.config_apis import ConfigApis
from coordinator.runtime.shard_status import ShardStatus
from coordinator.topics import TopicStore
from proto import txnsim_pb2 as pb
from proto.errors import NotLeaderOrFollowerError, code_of

T = CreateTopicsRequest.CreatableTopic


class FakeCluster:
    def __init__(self, topics: TopicStore) -> None:
        self.topics = topics

    def create_topic(self, req: pb.CreateTopicRequest) -> pb.CreateTopicResponse:
        factor = self.topics.create(req.name, req.partitions, dict(req.configs),
                                    replication_factor=req.replication_factor or -1)
        return pb.CreateTopicResponse(replication_factor=factor)

    def delete_topic(self, req: pb.DeleteTopicRequest) -> pb.DeleteTopicResponse:
        return pb.DeleteTopicResponse(partitions=self.topics.delete(req.name))

    def alter_topic(self, req: pb.AlterTopicRequest) -> pb.AlterTopicResponse:
        partitions, configs = self.topics.alter(req.name, req.partitions, dict(req.set_configs),
                                                list(req.delete_configs))
        return pb.AlterTopicResponse(partitions=partitions, configs=configs)


class FakePartitions:
    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        if partition == 1:
            raise NotLeaderOrFollowerError("[NOT_LEADER_OR_FOLLOWER] node 1 owns it")
        return max(offset, 0)

    def describe_producers(self, req: pb.DescribeProducersRequest) -> pb.DescribeProducersResponse:
        out = []
        for p in req.partitions:
            if p.partition == 1:
                exc = NotLeaderOrFollowerError("[NOT_LEADER_OR_FOLLOWER] node 1 owns it")
                out.append(pb.PartitionProducers(topic=p.topic, partition=1, error_code=code_of(exc),
                                                 error_message=str(exc)))
            else:
                out.append(pb.PartitionProducers(topic=p.topic, partition=p.partition, active_producers=[
                    pb.ProducerStateInfo(producer_id=7, producer_epoch=2, last_sequence=4, last_timestamp=1000,
                                         coordinator_epoch=3, current_txn_start_offset=10)]))
        return pb.DescribeProducersResponse(partitions=out)


class FakeShard:
    def __init__(self, loading: bool) -> None:
        self.status = ShardStatus.LOADING if loading else ShardStatus.SERVING


class FakeTxn:
    loading = False
    TXNS: ClassVar[dict[str, tuple[str, int, int]]] = {"tx-a": ("Ongoing", 7, 1_000), "tx-b": ("CompleteCommit", 8, 9_000), "tx-dead": ("Dead", 9, 0)}

    def owned_shards(self) -> list[FakeShard]:
        return [FakeShard(False), FakeShard(self.loading)]

    def list_transactions(self, req: pb.ListTransactionsRequest) -> pb.ListTransactionsResponse:
        return pb.ListTransactionsResponse(transactions=[
            pb.TransactionListing(transactional_id=tid, producer_id=pid, state=state)
            for tid, (state, pid, _start) in self.TXNS.items()
            if (not req.state_filters or state in req.state_filters)
            and (not req.producer_id_filters or pid in req.producer_id_filters)])

    def describe_transactions(self, req: pb.DescribeTransactionsRequest, node_id: int):
        out = []
        for tid in req.transactional_ids:
            if tid not in self.TXNS:
                out.append(pb.TransactionDescription(transactional_id=tid, error_code=105, error_message="unknown"))
                continue
            state, pid, start = self.TXNS[tid]
            out.append(pb.TransactionDescription(
                transactional_id=tid, state=state, producer_id=pid, producer_epoch=0, timeout_ms=60000,
                start_time_ms=start, coordinator_id=node_id, partitions=[
                    pb.TopicPartitionRef(topic="orders", partition=1), pb.TopicPartitionRef(topic="audit", partition=0),
                    pb.TopicPartitionRef(topic="orders", partition=0)]))
        return pb.DescribeTransactionsResponse(transactions=out)


def admin_apis(directory: Path | None = None) -> AdminApis:
    topics = TopicStore(Path(directory or tempfile.mkdtemp(prefix="txnsim-admin-")))
    topics.create("orders", 3)
    return AdminApis(cluster=FakeCluster(topics), partitions=FakePartitions(), txn=FakeTxn(), topics=topics,
                     node_id=1, now_ms=lambda: 10_000)


def create(apis: AdminApis, *topics, version: int = 4, validate_only: bool = False) -> dict[str, tuple]:
    response = apis.create_topics(CreateTopicsRequest(version=version, topics=list(topics), timeout_ms=1000,
                                                      validate_only=validate_only), version)
    return {t.name: (t.error_code, t.error_message) for t in response.topics}


def topic(name: str, partitions: int = 1, replication: int = -1, configs: dict | None = None) -> T:
    return T(name=name, num_partitions=partitions, replication_factor=replication, assignments=[],
             configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])


def test_create_topics_answers_kafkas_error_for_each_bad_topic(tmp_path):
    apis = admin_apis(tmp_path)
    codes = {name: code for name, (code, _msg) in create(
        apis, topic("fine", 2, 1), topic("bad name!"), topic("zero", 0), topic("three", 1, 3), topic("orders"),
        topic("__mine"), topic("conf", configs={"retention.ms": "1"}), topic("dflt", -1),
        topic("typo", configs={"retention.msx": "1"}), topic("nan", configs={"retention.ms": "soon"})).items()}
    assert codes == {"fine": 0, "bad name!": 17, "zero": 37, "three": 38, "orders": 36, "__mine": 17,
                     "conf": 0, "dflt": 0, "typo": 40, "nan": 40}  # Kafka's settings are accepted, checked
    assert apis._topics.all() == {"orders": 3, "fine": 2, "dflt": 1, "conf": 1}
    assert apis._topics.configs("conf") == {"retention.ms": "1"}
    (_, message), = create(apis, topic("three", 1, 3)).values()
    assert "one copy of each partition" in message


def test_create_topics_validate_only_creates_nothing_and_duplicates_are_invalid_request(tmp_path):
    apis = admin_apis(tmp_path)
    assert create(apis, topic("a", 2, configs={"message.type": "FIFO"}), validate_only=True) == {"a": (0, None)}
    assert "a" not in apis._topics.all()
    assert create(apis, topic("b"), topic("b"))["b"][0] == 42
    response = apis.create_topics(CreateTopicsRequest(version=5, topics=[topic("c", 2, configs={
        "half.message.storage": "kafka"})], timeout_ms=1, validate_only=False), 5)
    (c,) = response.topics
    assert (c.num_partitions, c.replication_factor) == (2, 1)
    assert [(x.name, x.value) for x in c.configs] == [("half.message.storage", "kafka")]
    assert apis._topics.configs("c") == {"half.message.storage": "kafka"}


def test_delete_topics_by_name_unknown_and_internal_refused(tmp_path):
    apis = admin_apis(tmp_path)
    response = apis.delete_topics(DeleteTopicsRequest(version=4, topic_names=["orders", "nope", "__consumer_offsets"],
                                                      timeout_ms=1000), 4)
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("orders", 0), ("nope", 3), ("__consumer_offsets", 17)]
    assert apis._topics.all() == {}


def test_describe_producers_answers_each_partition_or_not_leader():
    apis = admin_apis()
    request = DescribeProducersRequest(version=0, topics=[DescribeProducersRequest.TopicRequest(
        name="orders", partition_indexes=[0, 1])])
    (orders,) = apis.describe_producers(request, 0).topics
    p0, p1 = orders.partitions
    assert (p0.error_code, [(p.producer_id, p.current_txn_start_offset) for p in p0.active_producers]) == (0, [(7, 10)])
    assert (p1.partition_index, p1.error_code, p1.active_producers) == (1, 6, [])


def test_describe_transactions_groups_partitions_by_topic_and_unknown_ids_are_not_found():
    apis = admin_apis()
    response = apis.describe_transactions(DescribeTransactionsRequest(version=0, transactional_ids=["tx-a", "x"]), 0)
    a, x = response.transaction_states
    assert (a.transaction_state, a.producer_id, a.transaction_start_time_ms) == ("Ongoing", 7, 1000)
    assert [(t.topic, t.partitions) for t in a.topics] == [("audit", [0]), ("orders", [0, 1])]
    assert (x.transactional_id, x.error_code) == ("x", 105)


def test_list_transactions_filters_by_state_producer_duration_and_pattern_and_hides_dead():
    apis = admin_apis()

    def listed(version=2, **fields):
        request = ListTransactionsRequest(version=version, **{"state_filters": [], "producer_id_filters": [],
                                                              "duration_filter": -1, **fields})
        response = apis.list_transactions(request, version)
        return response.error_code, sorted(t.transactional_id for t in response.transaction_states), \
            response.unknown_state_filters
    assert listed() == (0, ["tx-a", "tx-b"], [])
    assert listed(state_filters=["Ongoing", "Bogus"]) == (0, ["tx-a"], ["Bogus"])
    assert listed(producer_id_filters=[8]) == (0, ["tx-b"], [])
    assert listed(duration_filter=5_000) == (0, ["tx-a"], [])  # started at 1 000, now 10 000
    assert listed(transactional_id_pattern="tx-b") == (0, ["tx-b"], [])
    assert listed(transactional_id_pattern="(")[0] == 128
    apis._txn.loading = True
    assert listed() == (14, [], [])  # COORDINATOR_LOAD_IN_PROGRESS, as Kafka answers while a shard loads


def admin_requests():
    """One request per admin API at a given version, for test_handlers' encode-at-every-version check."""
    apis = admin_apis()
    configs = ConfigApis(topics=apis._topics, config=NodeConfig(), node_id=1,
                         stored=BrokerConfigStore(Path(tempfile.mkdtemp(prefix="txnsim-brokers-"))))
    CP = CreatePartitionsRequest.CreatePartitionsTopic
    DR = DeleteRecordsRequest.DeleteRecordsTopic
    DC = DescribeConfigsRequest.DescribeConfigsResource
    AC = AlterConfigsRequest.AlterConfigsResource
    IC = IncrementalAlterConfigsRequest.AlterConfigsResource
    return {
        ApiKey.CREATE_TOPICS: lambda v: (apis.create_topics, CreateTopicsRequest(
            version=v, topics=[topic(f"t{v}", 2, configs={"message.type": "FIFO"}), topic("orders"),
                               topic("x", 1, 3)], timeout_ms=1, validate_only=False)),
        ApiKey.DELETE_TOPICS: lambda v: (apis.delete_topics, DeleteTopicsRequest(
            version=v, topic_names=[f"t{v}", "nope"], timeout_ms=1)),
        ApiKey.DESCRIBE_PRODUCERS: lambda v: (apis.describe_producers, DescribeProducersRequest(
            version=v, topics=[DescribeProducersRequest.TopicRequest(name="orders", partition_indexes=[0, 1])])),
        ApiKey.DESCRIBE_TRANSACTIONS: lambda v: (apis.describe_transactions, DescribeTransactionsRequest(
            version=v, transactional_ids=["tx-a", "x"])),
        ApiKey.LIST_TRANSACTIONS: lambda v: (apis.list_transactions, ListTransactionsRequest(
            version=v, state_filters=["Bogus"], producer_id_filters=[], duration_filter=-1,
            transactional_id_pattern=None)),
        ApiKey.CREATE_PARTITIONS: lambda v: (apis.create_partitions, CreatePartitionsRequest(
            version=v, topics=[CP(name="orders", count=3 + v + 1, assignments=None), CP(name="nope", count=2,
                                                                                       assignments=None)],
            timeout_ms=1, validate_only=False)),
        ApiKey.DELETE_RECORDS: lambda v: (apis.delete_records, DeleteRecordsRequest(version=v, timeout_ms=1, topics=[
            DR(name="orders", partitions=[DR.DeleteRecordsPartition(partition_index=p, offset=5) for p in (0, 1)])])),
        ApiKey.DESCRIBE_CONFIGS: lambda v: (configs.describe_configs, DescribeConfigsRequest(
            version=v, include_synonyms=True, include_documentation=False, resources=[
                DC(resource_type=2, resource_name="orders", configuration_keys=None),
                DC(resource_type=2, resource_name="nope", configuration_keys=None),
                DC(resource_type=4, resource_name="1", configuration_keys=["message.max.bytes"])])),
        ApiKey.ALTER_CONFIGS: lambda v: (configs.alter_configs, AlterConfigsRequest(
            version=v, validate_only=True, resources=[AC(resource_type=2, resource_name="orders", configs=[
                AC.AlterableConfig(name="retention.ms", value="1000")]),
                AC(resource_type=4, resource_name="1", configs=[])])),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: lambda v: (configs.incremental_alter_configs, IncrementalAlterConfigsRequest(
            version=v, validate_only=True, resources=[IC(resource_type=2, resource_name="orders", configs=[
                IC.AlterableConfig(name="cleanup.policy", config_operation=2, value="compact")])])),
    }
