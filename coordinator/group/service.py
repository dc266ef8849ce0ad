"""The GroupCoordinator gRPC service: decode, delegate to GroupCoordinator, encode.

Thin by design: every KafkaError becomes the response's error_code/error_message and any
other exception UNKNOWN_SERVER_ERROR (logged), so no handler ever ends in a gRPC error.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from coordinator.group.coordinator import GroupCoordinator
from proto import txnsim_pb2 as pb
from proto import txnsim_pb2_grpc as rpc
from proto.errors import KafkaError, UnknownServerError, code_of

log = logging.getLogger(__name__)
R = TypeVar("R")


class GroupService(rpc.GroupCoordinatorServicer):
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self._coordinator = coordinator

    def JoinGroup(self, request: pb.JoinGroupRequest, context: Any) -> pb.JoinGroupResponse:
        return _answer(self._coordinator.join_group, request, pb.JoinGroupResponse)

    def SyncGroup(self, request: pb.SyncGroupRequest, context: Any) -> pb.SyncGroupResponse:
        return _answer(self._coordinator.sync_group, request, pb.SyncGroupResponse)

    def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        return _answer(self._coordinator.heartbeat, request, pb.HeartbeatResponse)

    def LeaveGroup(self, request: pb.LeaveGroupRequest, context: Any) -> pb.LeaveGroupResponse:
        return _answer(self._coordinator.leave_group, request, pb.LeaveGroupResponse)

    def OffsetCommit(self, request: pb.OffsetCommitRequest, context: Any) -> pb.OffsetCommitResponse:
        return _answer(self._coordinator.offset_commit, request, pb.OffsetCommitResponse)

    def OffsetFetch(self, request: pb.OffsetFetchRequest, context: Any) -> pb.OffsetFetchResponse:
        return _answer(self._coordinator.offset_fetch, request, pb.OffsetFetchResponse)

    def TxnOffsetCommit(self, request: pb.TxnOffsetCommitRequest, context: Any) -> pb.TxnOffsetCommitResponse:
        return _answer(self._coordinator.txn_offset_commit, request, pb.TxnOffsetCommitResponse)

    def DescribeGroups(self, request: pb.DescribeGroupsRequest, context: Any) -> pb.DescribeGroupsResponse:
        return _answer(self._coordinator.describe_groups, request, pb.DescribeGroupsResponse)

    def ListGroups(self, request: pb.ListGroupsRequest, context: Any) -> pb.ListGroupsResponse:
        return _answer(self._coordinator.list_groups, request, pb.ListGroupsResponse)

    def DeleteGroups(self, request: pb.DeleteGroupsRequest, context: Any) -> pb.DeleteGroupsResponse:
        return _answer(self._coordinator.delete_groups, request, pb.DeleteGroupsResponse)


def _answer(handler: Callable[[Any], R], request: Any, response_type: Callable[..., R]) -> R:
    try:
        return handler(request)
    except KafkaError as exc:
        return response_type(error_code=code_of(exc), error_message=_wire_message(exc))
    except Exception as exc:  # a coordinator bug: answer, log it, keep serving
        log.exception("%s failed", getattr(handler, "__name__", handler))
        return response_type(error_code=UnknownServerError.errno,
                             error_message=f"[UNKNOWN_SERVER_ERROR] {type(exc).__name__}: {exc}")


def _wire_message(exc: KafkaError) -> str:
    """The message without its "[NAME] " prefix: the client's for_code() puts that back."""
    text = str(exc)
    prefix = f"[{getattr(exc, 'name', '')}] "
    return text.removeprefix(prefix)
