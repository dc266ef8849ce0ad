"""The classic consumer-group APIs on the Kafka port: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, answered by the same GroupCoordinator as gRPC.

Kafka fields in, the coordinator's calls, Kafka fields out, at the request's version; JoinGroup and SyncGroup
are answered once the group rebalances, holding the connection's later requests back (as Kafka keeps the
channel muted) but no thread. Topic ids are
not served: OffsetCommit and OffsetFetch stop at v9.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from coordinator.group import GroupCoordinator
from coordinator.group.classic import JoinOutcome, JoinRequest, SyncOutcome
from coordinator.kafka.apis import ApiKey
from coordinator.kafka.dispatch import CLIENT_HOST, DeferredHandler, Handler
from coordinator.later import answered, then
from proto import txnsim_pb2 as pb
from proto.errors import GroupIdNotFoundError, KafkaError, code_of
from proto.structs import TopicPartition

#: DescribeGroups v3+: "authorized operations not asked for" (kafka-python encodes None as -2^31)
_NO_OPERATIONS = None


def _code(call: Callable[[], Any]) -> tuple[Any, int]:
    """(result, 0), or (None, the error's code) when the coordinator raised."""
    try:
        return call(), 0
    except KafkaError as exc:
        return None, code_of(exc)


def offset_entry(topic: str, partition: int, offset: int, metadata: str | None, leader_epoch: int) -> pb.OffsetEntry:
    """A committed offset as the group coordinator takes it; a leader epoch below 0 is none (Kafka's -1)."""
    entry = pb.OffsetEntry(topic=topic, partition=partition, offset=offset, metadata=metadata or "")
    if leader_epoch >= 0:
        entry.leader_epoch = leader_epoch
    return entry


class GroupApis:
    def __init__(self, groups: GroupCoordinator) -> None:
        self._groups = groups

    def handlers(self) -> dict[ApiKey, Handler]:
        return {
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.OFFSET_DELETE: self.offset_delete,
        }

    # ------------------------------------------------------------ OffsetDelete (47)

    def offset_delete(self, request: OffsetDeleteRequest, version: int) -> OffsetDeleteResponse:
        wanted = [TopicPartition(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        codes, code = _code(lambda: self._groups.delete_offsets(request.group_id, wanted))
        T = OffsetDeleteResponse.OffsetDeleteResponseTopic
        return OffsetDeleteResponse(version=version, error_code=code, throttle_time_ms=0, topics=[] if code else [
            T(name=t.name, partitions=[T.OffsetDeleteResponsePartition(
                partition_index=p.partition_index, error_code=codes[TopicPartition(t.name, p.partition_index)])
                for p in t.partitions])
            for t in request.topics])

    # ------------------------------------------------------------ JoinGroup (11), SyncGroup (14)

    def deferred_handlers(self) -> dict[ApiKey, DeferredHandler]:
        """JoinGroup and SyncGroup wait for the rebalance: answered later, holding no thread meanwhile."""
        return {ApiKey.JOIN_GROUP: self.join_group_later, ApiKey.SYNC_GROUP: self.sync_group_later}

    def join_group(self, request: JoinGroupRequest, version: int) -> JoinGroupResponse:
        return self.join_group_later(request, version).result()

    def join_group_later(self, request: JoinGroupRequest, version: int) -> Future[JoinGroupResponse]:
        instance_id = request.group_instance_id if version >= 5 else None
        rebalance_timeout = request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
        client_id = (request.header.client_id if request.header is not None else None) or ""
        join = JoinRequest(request.member_id or "", instance_id, client_id, CLIENT_HOST.get(), request.session_timeout_ms,
                           rebalance_timeout, request.protocol_type or "",
                           tuple((p.name, bytes(p.metadata)) for p in request.protocols),
                           require_known_member_id=version >= 4)
        try:
            outcome = self._groups.join_future(request.group_id, join)
        except KafkaError as exc:
            outcome = answered(JoinOutcome(code_of(exc), member_id=request.member_id or ""))
        return then(outcome, lambda joined: self._join_response(joined, version))

    def _join_response(self, outcome: JoinOutcome, version: int) -> JoinGroupResponse:
        M = JoinGroupResponse.JoinGroupResponseMember
        return JoinGroupResponse(
            version=version, throttle_time_ms=0, error_code=outcome.error_code,
            generation_id=outcome.generation_id if not outcome.error_code else -1,
            protocol_type=outcome.protocol_type,
            protocol_name=outcome.protocol_name if version >= 7 else outcome.protocol_name or "",
            leader=outcome.leader_id, skip_assignment=outcome.skip_assignment, member_id=outcome.member_id,
            members=[M(member_id=m, group_instance_id=i, metadata=meta) for m, i, meta in outcome.members])

    def sync_group(self, request: SyncGroupRequest, version: int) -> SyncGroupResponse:
        return self.sync_group_later(request, version).result()

    def sync_group_later(self, request: SyncGroupRequest, version: int) -> Future[SyncGroupResponse]:
        instance_id = request.group_instance_id if version >= 3 else None
        protocol_type = request.protocol_type if version >= 5 else None
        protocol_name = request.protocol_name if version >= 5 else None
        assignments = {a.member_id: bytes(a.assignment) for a in request.assignments or ()}
        try:
            outcome = self._groups.sync_future(request.group_id, request.member_id, instance_id,
                                               request.generation_id, protocol_type, protocol_name, assignments)
        except KafkaError as exc:
            return answered(SyncGroupResponse(version=version, throttle_time_ms=0, error_code=code_of(exc),
                                              assignment=b""))
        return then(outcome, lambda synced: self._sync_response(synced, version))

    def _sync_response(self, outcome: SyncOutcome, version: int) -> SyncGroupResponse:
        return SyncGroupResponse(version=version, throttle_time_ms=0, error_code=outcome.error_code,
                                 protocol_type=outcome.protocol_type, protocol_name=outcome.protocol_name,
                                 assignment=outcome.assignment if not outcome.error_code else b"")

    # ------------------------------------------------------------ Heartbeat (12), LeaveGroup (13)

    def heartbeat(self, request: HeartbeatRequest, version: int) -> HeartbeatResponse:
        instance_id = request.group_instance_id if version >= 3 else None
        _, code = _code(lambda: self._groups.heartbeat_member(request.group_id, request.member_id, instance_id,
                                                             request.generation_id))
        return HeartbeatResponse(version=version, throttle_time_ms=0, error_code=code)

    def leave_group(self, request: LeaveGroupRequest, version: int) -> LeaveGroupResponse:
        if version < 3:
            errors, code = _code(lambda: self._groups.leave(request.group_id, [(request.member_id, None)]))
            if errors is not None and errors[0] is not None:
                code = code_of(errors[0])
            return LeaveGroupResponse(version=version, throttle_time_ms=0, error_code=code)
        leaving = [(m.member_id or "", m.group_instance_id) for m in request.members]
        errors, code = _code(lambda: self._groups.leave(request.group_id, leaving))
        R = LeaveGroupResponse.MemberResponse
        members = [] if errors is None else [
            R(member_id=m, group_instance_id=i, error_code=code_of(e) if e is not None else 0)
            for (m, i), e in zip(leaving, errors)]
        return LeaveGroupResponse(version=version, throttle_time_ms=0, error_code=code, members=members)

    # ------------------------------------------------------------ OffsetCommit (8), OffsetFetch (9)

    def offset_commit(self, request: OffsetCommitRequest, version: int) -> OffsetCommitResponse:
        offsets = [offset_entry(t.name, p.partition_index, p.committed_offset, p.committed_metadata,
                                p.committed_leader_epoch if version >= 6 else -1)
                   for t in request.topics for p in t.partitions]
        answer, code = _code(lambda: self._groups.offset_commit(pb.OffsetCommitRequest(
            group_id=request.group_id, generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id or "", offsets=offsets,
            group_instance_id=(request.group_instance_id if version >= 7 else None) or "")))
        errors = {(r.topic, r.partition): r.error_code for r in answer.results} if answer is not None else {}
        T = OffsetCommitResponse.OffsetCommitResponseTopic
        P = T.OffsetCommitResponsePartition
        return OffsetCommitResponse(version=version, throttle_time_ms=0, topics=[
            T(name=t.name, partitions=[P(partition_index=p.partition_index,
                                         error_code=errors.get((t.name, p.partition_index), code))
                                       for p in t.partitions])
            for t in request.topics])

    def offset_fetch(self, request: OffsetFetchRequest, version: int) -> OffsetFetchResponse:
        require_stable = bool(request.require_stable) if version >= 7 else False
        if version >= 8:
            G = OffsetFetchResponse.OffsetFetchResponseGroup
            groups = []
            for g in request.groups:
                topics, code = self._fetch(g.group_id, g.topics, require_stable)
                T = G.OffsetFetchResponseTopics
                P = T.OffsetFetchResponsePartitions
                groups.append(G(group_id=g.group_id, error_code=code, topics=[
                    T(name=name, partitions=[P(partition_index=p, committed_offset=o, committed_leader_epoch=le,
                                               metadata=m, error_code=e) for p, o, m, e, le in parts])
                    for name, parts in topics.items()]))
            return OffsetFetchResponse(version=version, throttle_time_ms=0, groups=groups)
        topics, code = self._fetch(request.group_id, request.topics, require_stable)
        T = OffsetFetchResponse.OffsetFetchResponseTopic
        P = T.OffsetFetchResponsePartition
        if code and version < 2:  # no top-level error before v2: every partition carries it
            topics = {t.name: [(p, -1, "", code, -1) for p in t.partition_indexes] for t in request.topics or ()}
        return OffsetFetchResponse(version=version, throttle_time_ms=0, error_code=code, topics=[
            T(name=name, partitions=[P(partition_index=p, committed_offset=o, committed_leader_epoch=le,
                                       metadata=m, error_code=e) for p, o, m, e, le in parts])
            for name, parts in topics.items()])

    def _fetch(self, group_id: str, topics: Any, require_stable: bool
               ) -> tuple[dict[str, list[tuple[int, int, str, int, int]]], int]:
        """{topic: [(partition, offset, metadata, error, leader epoch)]} and the group's error code; topics None
        means all."""
        wanted = [pb.TopicPartitionRef(topic=t.name, partition=p)
                  for t in topics or () for p in t.partition_indexes]
        answer, code = _code(lambda: self._groups.offset_fetch(pb.OffsetFetchRequest(
            group_id=group_id, partitions=wanted, require_stable=require_stable)))
        found: dict[str, list[tuple[int, int, str, int, int]]] = {}
        if answer is None:
            return found, code
        if topics is not None and not wanted:
            return found, 0  # an empty list names no partition (null asks for all)
        for r in answer.results:
            found.setdefault(r.topic, []).append((r.partition, r.offset, r.metadata, r.error_code, r.leader_epoch))
        return found, 0

    # ------------------------------------------------------------ DescribeGroups (15), ListGroups (16), DeleteGroups (42)

    def describe_groups(self, request: DescribeGroupsRequest, version: int) -> DescribeGroupsResponse:
        answer = self._groups.describe_groups(pb.DescribeGroupsRequest(group_ids=list(request.groups)))
        G = DescribeGroupsResponse.DescribedGroup
        M = G.DescribedGroupMember

        def error_code(g: pb.DescribedGroup) -> int:
            """KIP-1043: v6 says GROUP_ID_NOT_FOUND; before, an unknown group is only Dead."""
            return 0 if g.error_code == GroupIdNotFoundError.errno and version < 6 else g.error_code
        return DescribeGroupsResponse(version=version, throttle_time_ms=0, groups=[
            G(error_code=error_code(g), error_message=(g.error_message or None) if error_code(g) else None,
              group_id=g.group_id,
              group_state=g.state, protocol_type=g.protocol_type, protocol_data=g.protocol,
              authorized_operations=_NO_OPERATIONS, members=[
                  M(member_id=m.member_id, group_instance_id=m.group_instance_id or None, client_id=m.client_id,
                    client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                  for m in g.members])
            for g in answer.groups])

    def list_groups(self, request: ListGroupsRequest, version: int) -> ListGroupsResponse:
        answer = self._groups.list_groups(pb.ListGroupsRequest(
            states_filter=list(request.states_filter or ()) if version >= 4 else [],
            types_filter=list(request.types_filter or ()) if version >= 5 else []))
        L = ListGroupsResponse.ListedGroup
        return ListGroupsResponse(version=version, throttle_time_ms=0, error_code=0, groups=[
            L(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type="classic")
            for g in answer.groups])

    def delete_groups(self, request: DeleteGroupsRequest, version: int) -> DeleteGroupsResponse:
        answer = self._groups.delete_groups(pb.DeleteGroupsRequest(group_ids=list(request.groups_names)))
        R = DeleteGroupsResponse.DeletableGroupResult
        return DeleteGroupsResponse(version=version, throttle_time_ms=0, results=[
            R(group_id=r.group_id, error_code=r.error_code) for r in answer.results])
