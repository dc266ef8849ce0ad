"""The Kafka handlers' conversions against stand-ins for PartitionServer, ClusterServer and the transaction
coordinator: what each Kafka field becomes in txnsim's request, and back."""
from __future__ import annotations

from concurrent.futures import Future

from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from coordinator.kafka.apis import ApiKey, WireError
from coordinator.kafka.cluster_apis import ClusterApis
from coordinator.kafka.error_versions import downgrade
from coordinator.kafka.partition_apis import PartitionApis
from coordinator.later import answered
from proto import txnsim_pb2 as pb
from proto.errors import CoordinatorNotAvailableError, InvalidRequestError

KAFKA = {0: "127.0.0.1:9092", 1: "127.0.0.1:9093", 2: "127.0.0.1:9094"}


class FakePartitions:
    def __init__(self) -> None:
        self.requests: list = []

    def produce(self, req: pb.ProduceRequest) -> pb.ProduceResponse:
        self.requests.append(req)
        return pb.ProduceResponse(partitions=[
            pb.PartitionProduceResult(topic=p.topic, partition=p.partition, base_offset=10 * p.partition,
                                      log_start_offset=0)
            if p.partition != 2 else
            pb.PartitionProduceResult(topic=p.topic, partition=2, error_code=6, base_offset=-1,
                                      error_message="[NOT_LEADER_OR_FOLLOWER] node 1 owns it")
            for p in req.partitions])

    def fetch_future(self, req: pb.FetchRequest) -> Future[pb.FetchResponse]:
        return answered(self.fetch(req))

    def fetch(self, req: pb.FetchRequest) -> pb.FetchResponse:
        self.requests.append(req)
        return pb.FetchResponse(partitions=[
            pb.FetchPartitionResult(topic=p.topic, partition=p.partition, high_watermark=9, last_stable_offset=5,
                                    log_start_offset=0, records=b"batches",
                                    aborted_transactions=[pb.AbortedTransaction(producer_id=3, first_offset=1)])
            for p in req.partitions])

    def list_offsets(self, req: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        self.requests.append(req)
        # a timestamp finds offset 7 (written at 1000) if it is at most 1000; -3 finds offset 8
        found = [(7, 1000) if 0 <= t <= 1000 else (8, 1200) if t == -3 else (-1, -1) for t in req.timestamps]
        return pb.ListOffsetsResponse(partitions=[
            pb.PartitionOffsets(topic=p.topic, partition=p.partition, log_start_offset=2, high_watermark=9,
                                last_stable_offset=5, offset_for_timestamp=offset, timestamp=timestamp)
            for p, (offset, timestamp) in zip(req.partitions, found)])


class FakeCluster:
    def metadata(self, req: pb.MetadataRequest) -> pb.MetadataResponse:
        nodes = [pb.NodeInfo(node_id=i, address=f"127.0.0.1:{7000 + i}", alive=i != 2) for i in range(3)]
        topics = []
        for name in req.topics or ["orders"]:
            if name == "orders":
                topics.append(pb.TopicMetadata(name="orders", partitions=[
                    pb.PartitionMetadata(partition=0, leader=0), pb.PartitionMetadata(partition=1, leader=2)]))
            else:
                topics.append(pb.TopicMetadata(name=name, error_code=3))
        return pb.MetadataResponse(nodes=nodes, topics=topics)

    def find_coordinator(self, req: pb.FindCoordinatorRequest) -> pb.FindCoordinatorResponse:
        if req.key == "nobody":
            raise CoordinatorNotAvailableError("[COORDINATOR_NOT_AVAILABLE] no live node")
        return pb.FindCoordinatorResponse(node_id=1, address="127.0.0.1:7001")


def cluster_apis(init_producer_id=None) -> ClusterApis:
    return ClusterApis(cluster=FakeCluster(), init_producer_id=init_producer_id, kafka_address_of=KAFKA.get)


def produce_request(acks: int, version: int = 9) -> ProduceRequest:
    T = ProduceRequest.TopicProduceData
    return ProduceRequest(version=version, transactional_id=None, acks=acks, timeout_ms=100, topic_data=[
        T(name="orders", partition_data=[T.PartitionProduceData(index=i, records=b"batch%d" % i) for i in range(3)])])


def test_produce_passes_the_batches_through_and_answers_per_partition():
    partitions = FakePartitions()
    response = PartitionApis(partitions).produce(produce_request(acks=-1), 9)
    sent = partitions.requests[0]
    assert [(p.topic, p.partition, p.records) for p in sent.partitions] == [
        ("orders", i, b"batch%d" % i) for i in range(3)]
    assert not sent.HasField("transactional_id") and sent.acks == -1
    answers = response.responses[0].partition_responses
    assert [(a.index, a.error_code, a.base_offset) for a in answers] == [(0, 0, 0), (1, 0, 10), (2, 6, -1)]
    assert "NOT_LEADER_OR_FOLLOWER" in answers[2].error_message and answers[0].error_message is None


def test_produce_with_acks_0_writes_and_answers_nothing():
    partitions = FakePartitions()
    assert PartitionApis(partitions).produce(produce_request(acks=0), 9) is None
    assert len(partitions.requests) == 1


def test_produce_with_other_acks_is_invalid_required_acks_and_writes_nothing():
    partitions = FakePartitions()
    response = PartitionApis(partitions).produce(produce_request(acks=2), 9)
    assert {a.error_code for a in response.responses[0].partition_responses} == {WireError.INVALID_REQUIRED_ACKS}
    assert partitions.requests == []


def fetch_request(isolation_level: int, session_id: int = 0) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(version=11, replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
                        isolation_level=isolation_level, session_id=session_id, session_epoch=-1, topics=[
                            T(topic="orders", partitions=[T.FetchPartition(partition=1, current_leader_epoch=-1,
                                                                           fetch_offset=4, log_start_offset=-1,
                                                                           partition_max_bytes=1000)])],
                        forgotten_topics_data=[], rack_id="")


def test_fetch_read_committed_carries_the_lso_and_aborted_transactions():
    partitions = FakePartitions()
    response = PartitionApis(partitions).fetch(fetch_request(isolation_level=1), 11)
    sent = partitions.requests[0]
    assert (sent.isolation_level, sent.max_wait_ms, sent.min_bytes) == (1, 500, 1)
    assert (sent.partitions[0].fetch_offset, sent.partitions[0].max_bytes) == (4, 1000)
    data = response.responses[0].partitions[0]
    assert (data.high_watermark, data.last_stable_offset, data.log_start_offset) == (9, 5, 0)
    assert [(a.producer_id, a.first_offset) for a in data.aborted_transactions] == [(3, 1)]
    assert data.records == b"batches" and response.session_id == 0


def test_fetch_read_uncommitted_has_no_aborted_transactions():
    response = PartitionApis(FakePartitions()).fetch(fetch_request(isolation_level=0), 11)
    assert response.responses[0].partitions[0].aborted_transactions is None


def test_an_incremental_fetch_session_is_never_found():
    partitions = FakePartitions()
    response = PartitionApis(partitions).fetch(fetch_request(isolation_level=0, session_id=12), 11)
    assert response.error_code == WireError.FETCH_SESSION_ID_NOT_FOUND and partitions.requests == []


def list_offsets(timestamp: int, isolation_level: int) -> ListOffsetsRequest:
    T = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(version=5, replica_id=-1, isolation_level=isolation_level, topics=[
        T(name="orders", partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                            timestamp=timestamp)])])


def test_list_offsets_latest_is_the_hw_or_for_read_committed_the_lso_and_earliest_the_log_start():
    apis = PartitionApis(FakePartitions())

    def offset(timestamp, isolation):
        return apis.list_offsets(list_offsets(timestamp, isolation), 5).topics[0].partitions[0]
    assert offset(-1, 0).offset == 9
    assert offset(-1, 1).offset == 5
    assert offset(-2, 1).offset == 2
    assert offset(-1, 1).timestamp == -1


def test_list_offsets_by_time_answers_the_record_found_or_minus_one_and_max_timestamp_from_v7():
    partitions = FakePartitions()
    apis = PartitionApis(partitions)

    def answer(timestamp, version=5):
        return apis.list_offsets(list_offsets(timestamp, 1), version).topics[0].partitions[0]
    found = answer(900)
    assert (found.error_code, found.offset, found.timestamp) == (0, 7, 1000)
    assert partitions.requests[-1].timestamps == [900] and partitions.requests[-1].isolation_level == 1
    none = answer(5000)
    assert (none.error_code, none.offset, none.timestamp) == (0, -1, -1)
    assert (answer(-3, 7).offset, answer(-3, 7).timestamp) == (8, 1200)
    assert answer(-3, 6).error_code == WireError.UNSUPPORTED_VERSION


def test_metadata_lists_live_brokers_at_their_kafka_addresses_and_owners_as_leaders():
    response = cluster_apis().metadata(MetadataRequest(version=9, topics=None, allow_auto_topic_creation=True), 9)
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(0, "127.0.0.1", 9092), (1, "127.0.0.1", 9093)]
    assert response.controller_id == 0
    (orders,) = response.topics
    leaders = [(p.partition_index, p.leader_id, p.error_code) for p in orders.partitions]
    assert leaders == [(0, 0, 0), (1, -1, WireError.LEADER_NOT_AVAILABLE)]  # node 2 is down


def test_metadata_of_an_unknown_topic_is_unknown_topic_or_partition_and_never_creates_it():
    T = MetadataRequest.MetadataRequestTopic
    response = cluster_apis().metadata(MetadataRequest(version=4, topics=[T(name="nope")],
                                                       allow_auto_topic_creation=True), 4)
    assert [(t.name, t.error_code, t.partitions) for t in response.topics] == [("nope", 3, [])]


def test_metadata_v1_with_an_empty_list_names_no_topic_but_v0_means_all():
    assert cluster_apis().metadata(MetadataRequest(version=1, topics=[]), 1).topics == []
    assert [t.name for t in cluster_apis().metadata(MetadataRequest(version=0, topics=[]), 0).topics] == ["orders"]


def test_find_coordinator_answers_the_kafka_address_single_and_batched():
    single = cluster_apis().find_coordinator(FindCoordinatorRequest(version=2, key="g", key_type=0), 2)
    assert (single.error_code, single.node_id, single.host, single.port) == (0, 1, "127.0.0.1", 9093)
    batched = cluster_apis().find_coordinator(
        FindCoordinatorRequest(version=4, key_type=1, coordinator_keys=["tx", "nobody"]), 4)
    assert [(c.key, c.error_code, c.node_id, c.port) for c in batched.coordinators] == [
        ("tx", 0, 1, 9093), ("nobody", 15, -1, -1)]
    other = cluster_apis().find_coordinator(FindCoordinatorRequest(version=2, key="g", key_type=100), 2)
    assert other.error_code == WireError.INVALID_REQUEST


def test_init_producer_id_grants_idempotent_and_transactional_ids():
    asked = []

    def grant(req: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
        asked.append(req)
        return pb.InitProducerIdResponse(producer_id=42, producer_epoch=0)
    apis = cluster_apis(grant)
    granted = apis.init_producer_id(InitProducerIdRequest(version=4, transactional_id=None,
                                                          transaction_timeout_ms=60000, producer_id=-1,
                                                          producer_epoch=-1), 4)
    assert (granted.error_code, granted.producer_id, granted.producer_epoch) == (0, 42, 0)
    assert not asked[0].HasField("transactional_id")
    transactional = apis.init_producer_id(InitProducerIdRequest(
        version=4, transactional_id="tx", transaction_timeout_ms=1000, producer_id=-1, producer_epoch=-1), 4)
    assert transactional.error_code == 0
    assert (asked[1].transactional_id, asked[1].transaction_timeout_ms) == ("tx", 1000)

    def failing(req):
        raise InvalidRequestError("[INVALID_REQUEST] no")
    assert cluster_apis(failing).init_producer_id(
        InitProducerIdRequest(version=0, transactional_id=None, transaction_timeout_ms=1), 0).error_code == 42


def test_every_answer_encodes_at_every_served_version():
    """kafka-python refuses a field value its schema cannot carry at that version: run each handler at each one."""
    from coordinator.kafka.apis import SERVED, ApiKey

    def grant(req):
        return pb.InitProducerIdResponse(producer_id=42, producer_epoch=0)
    clusters, partitions = cluster_apis(grant), PartitionApis(FakePartitions())
    T = FetchRequest.FetchTopic
    L = ListOffsetsRequest.ListOffsetsTopic
    P = ProduceRequest.TopicProduceData
    requests = {
        ApiKey.METADATA: lambda v: (clusters.metadata, MetadataRequest(
            version=v, topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in ("orders", "nope")])),
        ApiKey.FIND_COORDINATOR: lambda v: (clusters.find_coordinator, FindCoordinatorRequest(
            version=v, key="g", key_type=0, coordinator_keys=["g", "nobody"])),
        ApiKey.INIT_PRODUCER_ID: lambda v: (clusters.init_producer_id, InitProducerIdRequest(
            version=v, transactional_id=None, transaction_timeout_ms=1, producer_id=-1, producer_epoch=-1)),
        ApiKey.API_VERSIONS: lambda v: (clusters.api_versions, None),
        ApiKey.PRODUCE: lambda v: (partitions.produce, ProduceRequest(
            version=v, acks=1, timeout_ms=1, topic_data=[P(name="orders", partition_data=[
                P.PartitionProduceData(index=i, records=b"x") for i in range(3)])])),
        ApiKey.FETCH: lambda v: (partitions.fetch, FetchRequest(
            version=v, max_wait_ms=0, min_bytes=1, max_bytes=100, isolation_level=1, session_id=0, session_epoch=-1,
            topics=[T(topic="orders", partitions=[T.FetchPartition(partition=0, fetch_offset=0,
                                                                   partition_max_bytes=100)])])),
        ApiKey.LIST_OFFSETS: lambda v: (partitions.list_offsets, ListOffsetsRequest(
            version=v, replica_id=-1, isolation_level=1, topics=[L(name="orders", partitions=[
                L.ListOffsetsPartition(partition_index=0, timestamp=t) for t in (-1, -2, 5)])])),
    }
    requests.update(txn_requests())
    requests.update(admin_requests())
    requests.update(group_requests())
    for key, api in SERVED.items():
        for version in range(api.lowest_served, api.max_version + 1):
            handler, request = requests[key](version)
            response = handler(request, version)
            response.with_header(correlation_id=1)
            assert response.encode(header=True, framed=True), (key.name, version)


class FakeTxn:
    """Answers every transaction call with one per-partition error, or raises a request-level one."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.ends: list[tuple[pb.EndTxnRequest, int]] = []

    def add_partitions(self, req):
        if self.fail:
            raise self.fail
        return pb.AddPartitionsToTxnResponse(results=[
            pb.PartitionError(topic=p.topic, partition=p.partition, error_code=3 if p.topic == "nope" else 0)
            for p in req.partitions])

    def add_offsets(self, req):
        if self.fail:
            raise self.fail
        return pb.AddOffsetsToTxnResponse()

    def end_txn(self, req, *, transaction_version):
        if self.fail:
            raise self.fail
        self.ends.append((req, transaction_version))
        return pb.EndTxnResponse(producer_id=req.producer_id, producer_epoch=req.producer_epoch)

    def txn_offset_commit(self, req):
        if self.fail:
            raise self.fail
        return pb.TxnOffsetCommitResponse(results=[
            pb.PartitionError(topic=o.topic, partition=o.partition, error_code=0) for o in req.offsets])


def txn_requests(fake=None):
    from kafka.protocol.producer import (
        AddOffsetsToTxnRequest,
        AddPartitionsToTxnRequest,
        EndTxnRequest,
        TxnOffsetCommitRequest,
    )

    from coordinator.kafka.apis import ApiKey
    from coordinator.kafka.txn_apis import TxnApis
    fake = fake or FakeTxn()
    apis = TxnApis(txn=fake, groups=fake)
    Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    topics = [Topic(name="orders", partitions=[0, 1]), Topic(name="nope", partitions=[0])]
    C = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    return {
        ApiKey.ADD_PARTITIONS_TO_TXN: lambda v: (apis.add_partitions_to_txn, AddPartitionsToTxnRequest(
            version=v, v3_and_below_transactional_id="tx", v3_and_below_producer_id=7, v3_and_below_producer_epoch=0,
            v3_and_below_topics=topics, transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id="tx", producer_id=7, producer_epoch=0, verify_only=True, topics=topics)])),
        ApiKey.ADD_OFFSETS_TO_TXN: lambda v: (apis.add_offsets_to_txn, AddOffsetsToTxnRequest(
            version=v, transactional_id="tx", producer_id=7, producer_epoch=0, group_id="g")),
        ApiKey.END_TXN: lambda v: (apis.end_txn, EndTxnRequest(
            version=v, transactional_id="tx", producer_id=7, producer_epoch=0, committed=True)),
        ApiKey.TXN_OFFSET_COMMIT: lambda v: (apis.txn_offset_commit, TxnOffsetCommitRequest(
            version=v, transactional_id="tx", group_id="g", producer_id=7, producer_epoch=0, generation_id=-1,
            member_id="", group_instance_id=None, topics=[C(name="orders", partitions=[
                C.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                                  committed_metadata="m")])])),
    }


def test_txn_apis_answer_per_partition_and_end_transactions_as_v1():
    from coordinator.kafka.apis import ApiKey
    fake = FakeTxn()
    requests = txn_requests(fake)
    handler, request = requests[ApiKey.ADD_PARTITIONS_TO_TXN](3)
    answer = handler(request, 3)
    codes = {(t.name, p.partition_index): p.partition_error_code
             for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}
    assert codes == {("orders", 0): 0, ("orders", 1): 0, ("nope", 0): 3}
    handler, request = requests[ApiKey.END_TXN](1)
    assert handler(request, 1).error_code == 0
    assert fake.ends[0][1] == 1  # transactions V1: the coordinator keeps the epoch


def test_a_request_level_error_is_every_partitions_error():
    from coordinator.kafka.apis import ApiKey
    from proto.errors import NotCoordinatorError
    requests = txn_requests(FakeTxn(fail=NotCoordinatorError("[NOT_COORDINATOR] moved")))
    handler, request = requests[ApiKey.ADD_PARTITIONS_TO_TXN](0)
    answer = handler(request, 0)
    assert {p.partition_error_code for t in answer.results_by_topic_v3_and_below
            for p in t.results_by_partition} == {16}
    for key in (ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN):
        handler, request = requests[key](0)
        assert handler(request, 0).error_code == 16
    handler, request = requests[ApiKey.TXN_OFFSET_COMMIT](3)
    assert {p.error_code for t in handler(request, 3).topics for p in t.partitions} == {16}


def group_requests() -> dict:
    """The group APIs (group_apis.py) on a real GroupCoordinator over an in-memory shard."""
    import itertools

    from kafka.protocol.admin import (
        DeleteGroupsRequest,
        DescribeGroupsRequest,
        ListGroupsRequest,
    )
    from kafka.protocol.consumer import (
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        OffsetCommitRequest,
        OffsetDeleteRequest,
        OffsetFetchRequest,
        SyncGroupRequest,
    )

    from coordinator.group import GroupCoordinator
    from coordinator.kafka.apis import ApiKey
    from coordinator.kafka.group_apis import GroupApis
    from partitions.model import AppendResult
    from proto.records import iter_batches
    from tests.fakes import node_io

    class Log:
        next_offset = 0

        def append(self, records: bytes, *, origin: object = None, wait_durable: bool = True) -> AppendResult:
            base = self.next_offset
            self.next_offset += sum(b.header.last_offset_delta + 1 for b in iter_batches(records))
            return AppendResult(base, self.next_offset - 1)

        def make_durable(self, end_offset: int) -> None:  # memory: durable once appended
            pass

        def batches(self):
            return iter(())

    ids = itertools.count()
    groups = GroupCoordinator(1, io=node_io(), initial_rebalance_delay_ms=0, run_timers=False,
                              new_member_id=lambda client, instance: f"m-{next(ids)}")
    groups.load_shard(0, Log())
    apis = GroupApis(groups)
    J = JoinGroupRequest.JoinGroupRequestProtocol
    OT = OffsetCommitRequest.OffsetCommitRequestTopic
    FT = OffsetFetchRequest.OffsetFetchRequestTopic
    FG = OffsetFetchRequest.OffsetFetchRequestGroup

    def join(v: int) -> tuple:
        request = JoinGroupRequest(version=v, group_id=f"j{v}", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                   member_id="m-x" if v >= 4 else "", group_instance_id=None, protocol_type="consumer",
                                   protocols=[J(name="range", metadata=b"")])
        request.with_header(correlation_id=1, client_id="c")
        return apis.join_group, request
    return {
        ApiKey.JOIN_GROUP: join,
        ApiKey.SYNC_GROUP: lambda v: (apis.sync_group, SyncGroupRequest(
            version=v, group_id="j3", generation_id=1, member_id="m-0", assignments=[])),
        ApiKey.HEARTBEAT: lambda v: (apis.heartbeat, HeartbeatRequest(version=v, group_id="g", generation_id=1,
                                                                      member_id="m")),
        ApiKey.LEAVE_GROUP: lambda v: (apis.leave_group, LeaveGroupRequest(
            version=v, group_id="g", member_id="m",
            members=[LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None)])),
        ApiKey.OFFSET_COMMIT: lambda v: (apis.offset_commit, OffsetCommitRequest(
            version=v, group_id="o", generation_id_or_member_epoch=-1, member_id="", topics=[OT(
                name="t", partitions=[OT.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                                      committed_metadata=None)])])),
        ApiKey.OFFSET_FETCH: lambda v: (apis.offset_fetch, OffsetFetchRequest(
            version=v, group_id="o", topics=[FT(name="t", partition_indexes=[0, 1])],
            groups=[FG(group_id="o", topics=[FG.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])],
            require_stable=True)),
        ApiKey.DESCRIBE_GROUPS: lambda v: (apis.describe_groups, DescribeGroupsRequest(
            version=v, groups=["j3", "o", "nope"], include_authorized_operations=False)),
        ApiKey.LIST_GROUPS: lambda v: (apis.list_groups, ListGroupsRequest(version=v, states_filter=[],
                                                                           types_filter=[])),
        ApiKey.DELETE_GROUPS: lambda v: (apis.delete_groups, DeleteGroupsRequest(version=v,
                                                                                 groups_names=["o", "x"])),
        ApiKey.OFFSET_DELETE: lambda v: (apis.offset_delete, OffsetDeleteRequest(
            version=v, group_id="o", topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(name="t", partitions=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)])])),
    }


def admin_requests() -> dict:
    """The admin APIs (admin_apis.py), from their own test module's stand-ins."""
    from tests.unit.coordinator.kafka.test_admin_handlers import admin_requests as build
    return build()


def test_a_write_outside_the_transaction_is_invalid_txn_state_below_produce_v12():
    """The node says TRANSACTION_ABORTABLE (transactions V2); Kafka clients of Produce < 12 hear INVALID_TXN_STATE."""
    class Unverified(FakePartitions):
        def produce(self, req):
            return pb.ProduceResponse(partitions=[pb.PartitionProduceResult(
                topic=p.topic, partition=p.partition, error_code=120, base_offset=-1,
                error_message="[TRANSACTION_ABORTABLE] not in the transaction") for p in req.partitions])
    response = PartitionApis(Unverified()).produce(produce_request(acks=-1), 9)
    downgrade(response, ApiKey.PRODUCE, 9)  # as the dispatcher does with every response
    codes = {p.error_code for t in response.responses for p in t.partition_responses}
    assert codes == {48}
