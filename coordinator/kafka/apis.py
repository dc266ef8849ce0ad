"""Which Kafka APIs and versions a node serves: the one table ApiVersions advertises and dispatch obeys.

Invariant: a version is advertised only if it is served, except Produce 0-2, which Kafka 4 also
advertises and refuses (KAFKA-18659: librdkafka misjudges a broker whose Produce range starts above 0).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)


class ApiKey(IntEnum):
    """Kafka's API keys txnsim knows; only those in SERVED are advertised and answered."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


class WireError(IntEnum):
    """Codes only the Kafka listener answers (txnsim's logic raises the others, proto/errors.py)."""

    NONE = 0
    LEADER_NOT_AVAILABLE = 5
    INVALID_REQUIRED_ACKS = 21
    UNSUPPORTED_VERSION = 35
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_REQUEST = 42
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_REGULAR_EXPRESSION = 128


@dataclass(frozen=True, slots=True)
class ServedApi:
    key: ApiKey
    request: type
    response: type
    #: the range advertised in ApiVersions
    min_version: int
    max_version: int
    #: the lowest version actually answered (above min_version only for Produce, see the module docstring)
    lowest_served: int

    def serves(self, version: int) -> bool:
        return self.lowest_served <= version <= self.max_version

    def advertises(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def _api(key: ApiKey, request: type, response: type, versions: tuple[int, int], lowest_served: int | None = None
         ) -> ServedApi:
    return ServedApi(key, request, response, versions[0], versions[1],
                     versions[0] if lowest_served is None else lowest_served)


#: Topic ids are not served: Fetch stops at 12 and Metadata at 9 (the versions before topic ids), so every
#: request names its topics. Produce 3-10 and Fetch 4-12 make librdkafka use v2 record batches.
SERVED: dict[int, ServedApi] = {api.key: api for api in (
    _api(ApiKey.PRODUCE, ProduceRequest, ProduceResponse, (0, 10), lowest_served=3),
    _api(ApiKey.FETCH, FetchRequest, FetchResponse, (4, 12)),
    _api(ApiKey.LIST_OFFSETS, ListOffsetsRequest, ListOffsetsResponse, (1, 7)),
    _api(ApiKey.METADATA, MetadataRequest, MetadataResponse, (0, 9)),
    _api(ApiKey.FIND_COORDINATOR, FindCoordinatorRequest, FindCoordinatorResponse, (0, 5)),
    _api(ApiKey.API_VERSIONS, ApiVersionsRequest, ApiVersionsResponse, (0, 4)),
    _api(ApiKey.INIT_PRODUCER_ID, InitProducerIdRequest, InitProducerIdResponse, (0, 5)),
    # transactions V1 as Kafka clients speak them; AddPartitionsToTxn 4-5 is the brokers' batched (verify) form,
    # EndTxn/TxnOffsetCommit v5 are transactions V2 (with Produce v12, not served)
    _api(ApiKey.ADD_PARTITIONS_TO_TXN, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, (0, 5)),
    _api(ApiKey.ADD_OFFSETS_TO_TXN, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, (0, 4)),
    _api(ApiKey.END_TXN, EndTxnRequest, EndTxnResponse, (0, 4)),
    _api(ApiKey.TXN_OFFSET_COMMIT, TxnOffsetCommitRequest, TxnOffsetCommitResponse, (0, 4)),
    # the classic group protocol (group_apis.py); OffsetCommit/OffsetFetch stop before topic ids (v10)
    _api(ApiKey.JOIN_GROUP, JoinGroupRequest, JoinGroupResponse, (0, 9)),
    _api(ApiKey.SYNC_GROUP, SyncGroupRequest, SyncGroupResponse, (0, 5)),
    _api(ApiKey.HEARTBEAT, HeartbeatRequest, HeartbeatResponse, (0, 4)),
    _api(ApiKey.LEAVE_GROUP, LeaveGroupRequest, LeaveGroupResponse, (0, 5)),
    _api(ApiKey.OFFSET_COMMIT, OffsetCommitRequest, OffsetCommitResponse, (2, 9)),
    _api(ApiKey.OFFSET_FETCH, OffsetFetchRequest, OffsetFetchResponse, (1, 9)),
    _api(ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest, DescribeGroupsResponse, (0, 6)),
    _api(ApiKey.LIST_GROUPS, ListGroupsRequest, ListGroupsResponse, (0, 5)),
    _api(ApiKey.DELETE_GROUPS, DeleteGroupsRequest, DeleteGroupsResponse, (0, 2)),
    # admin (admin_apis.py): CreateTopics v7 answers topic ids and DeleteTopics v6 takes them, so both stop before
    _api(ApiKey.CREATE_TOPICS, CreateTopicsRequest, CreateTopicsResponse, (2, 6)),
    _api(ApiKey.DELETE_TOPICS, DeleteTopicsRequest, DeleteTopicsResponse, (1, 5)),
    _api(ApiKey.CREATE_PARTITIONS, CreatePartitionsRequest, CreatePartitionsResponse, (0, 3)),
    _api(ApiKey.DELETE_RECORDS, DeleteRecordsRequest, DeleteRecordsResponse, (0, 2)),
    _api(ApiKey.DESCRIBE_CONFIGS, DescribeConfigsRequest, DescribeConfigsResponse, (0, 4)),
    _api(ApiKey.ALTER_CONFIGS, AlterConfigsRequest, AlterConfigsResponse, (0, 2)),
    _api(ApiKey.INCREMENTAL_ALTER_CONFIGS, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, (0, 1)),
    _api(ApiKey.OFFSET_DELETE, OffsetDeleteRequest, OffsetDeleteResponse, (0, 0)),
    _api(ApiKey.DESCRIBE_PRODUCERS, DescribeProducersRequest, DescribeProducersResponse, (0, 0)),
    _api(ApiKey.DESCRIBE_TRANSACTIONS, DescribeTransactionsRequest, DescribeTransactionsResponse, (0, 0)),
    _api(ApiKey.LIST_TRANSACTIONS, ListTransactionsRequest, ListTransactionsResponse, (0, 2)),
)}


def api_versions_response(version: int, error_code: int = 0) -> ApiVersionsResponse:
    """The advertised table; with an error the body is v0, so any client can read which versions to retry with."""
    body_version = 0 if error_code else version
    return ApiVersionsResponse(
        version=body_version, error_code=error_code, throttle_time_ms=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=int(api.key), min_version=api.min_version,
                                                 max_version=api.max_version)
                  for api in sorted(SERVED.values(), key=lambda a: a.key)])
