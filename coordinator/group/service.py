"""The GroupCoordinator gRPC service: decode, delegate to GroupCoordinator, encode.

Thin by design: every KafkaError becomes the response's error_code/error_message and any
other exception UNKNOWN_SERVER_ERROR (logged), so no handler ever ends in a gRPC error.
"""
from __future__ import annotations

from typing import Any

from coordinator.group.coordinator import GroupCoordinator
from coordinator.rpc import answer
from proto import txnsim_pb2 as pb
from proto import txnsim_pb2_grpc as rpc


class GroupService(rpc.GroupCoordinatorServicer):
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self._coordinator = coordinator

    def JoinGroup(self, request: pb.JoinGroupRequest, context: Any) -> pb.JoinGroupResponse:
        return answer(self._coordinator.join_group, request, pb.JoinGroupResponse)

    def SyncGroup(self, request: pb.SyncGroupRequest, context: Any) -> pb.SyncGroupResponse:
        return answer(self._coordinator.sync_group, request, pb.SyncGroupResponse)

    def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        return answer(self._coordinator.heartbeat, request, pb.HeartbeatResponse)

    def LeaveGroup(self, request: pb.LeaveGroupRequest, context: Any) -> pb.LeaveGroupResponse:
        return answer(self._coordinator.leave_group, request, pb.LeaveGroupResponse)

    def OffsetCommit(self, request: pb.OffsetCommitRequest, context: Any) -> pb.OffsetCommitResponse:
        return answer(self._coordinator.offset_commit, request, pb.OffsetCommitResponse)

    def OffsetFetch(self, request: pb.OffsetFetchRequest, context: Any) -> pb.OffsetFetchResponse:
        return answer(self._coordinator.offset_fetch, request, pb.OffsetFetchResponse)

    def TxnOffsetCommit(self, request: pb.TxnOffsetCommitRequest, context: Any) -> pb.TxnOffsetCommitResponse:
        return answer(self._coordinator.txn_offset_commit, request, pb.TxnOffsetCommitResponse)

    def DescribeGroups(self, request: pb.DescribeGroupsRequest, context: Any) -> pb.DescribeGroupsResponse:
        return answer(self._coordinator.describe_groups, request, pb.DescribeGroupsResponse)

    def ListGroups(self, request: pb.ListGroupsRequest, context: Any) -> pb.ListGroupsResponse:
        return answer(self._coordinator.list_groups, request, pb.ListGroupsResponse)

    def DeleteGroups(self, request: pb.DeleteGroupsRequest, context: Any) -> pb.DeleteGroupsResponse:
        return answer(self._coordinator.delete_groups, request, pb.DeleteGroupsResponse)
