"""A simulated node: the shipping node's drivers over simulated I/O (sim_io.py).

The transaction coordinator (coordinator/txn/), its MarkerWriter, the partition leader (PartitionServer:
produce, verification, markers, fetch, describe), the group coordinator (coordinator/group/) and the
half-message coordinator (coordinator/rocketmq/) are the node's own, over SimIO; the partition logs are the
node's PartitionLogs and LogManager on the cluster's simulated disk (the real node's data directory is
shared too, and fenced by leader-epoch claims in it). A request is a simulated envelope, its answer a
reply. The simulator's own: the wiring of the reconcile loop, and the producers' check-back streams
(check_streams.py), which stand for gRPC streams.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.group import GroupCoordinator
from coordinator.group.membership import join_request, join_response, sync_response
from coordinator.local_calls import serve_locally
from coordinator.partition_service import PartitionServer
from coordinator.reconcile import ShardCounts, ShardReconciler
from coordinator.rocketmq.coordinator import HalfMessageCoordinator
from coordinator.txn.coordinator import TransactionCoordinator
from coordinator.txn.markers import MarkerWriter
from coordinator.verification import TransactionVerifier
from partitions import LogConfig, LogManager, PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import (
    KafkaError,
    UnknownServerError,
    code_of,
)
from proto.structs import (
    TRANSACTION_STATE_TOPIC,
)
from txnsim.simulate.cluster.check_streams import SimCheckStreams
from txnsim.simulate.cluster.shape import (
    CHECK_IMMUNITY_MS,
    CHECK_INTERVAL_MS,
    CHECK_MAX,
    GROUP_INITIAL_REBALANCE_DELAY_MS,
    GROUP_MAX_SESSION_TIMEOUT_MS,
    GROUP_MIN_SESSION_TIMEOUT_MS,
    HALF_SHARDS,
    OFFSETS_SHARDS,
)
from txnsim.simulate.cluster.sim_io import SimIO, TraceObserver
from txnsim.simulate.network import Envelope

if TYPE_CHECKING:
    from txnsim.simulate.cluster.roles import NodeCluster

#: where the simulated disk keeps the cluster's data directory (never touched on the real disk)
DATA_ROOT = Path("/sim/data")
#: small segments, so runs roll them: sealed segments are loaded from their saved index on a take-over, and
#: producer-state snapshots are written and loaded, as on a node that has run for a while
SEGMENT_BYTES = 4096
#: a coordinator shard is snapshotted every this many records written to it (a node's default is 1,000): small,
#: so that runs write snapshots, drop the segments below each one's fallback, and load from them on a take-over
SNAPSHOT_INTERVAL_RECORDS = 40
#: requests a node sends to another node wait this long for an answer
NODE_REQUEST_TIMEOUT_MS = 500
#: how soon a node tries again to take a shard another node has not let go of yet
RECONCILE_RETRY_MS = 50
#: how often each node looks for transactions past their timeout (Kafka's default is 10 s; runs are short)
ABORT_CHECK_INTERVAL_MS = 500
#: how long an end waits for the copy its commit owes before it answers (a node waits 5 s; a simulated
#: producer's request times out after 1 s)
EFFECT_WAIT_MS = 300

_TXN_REQUESTS: dict[type, type] = {
    pb.InitProducerIdRequest: pb.InitProducerIdResponse,
    pb.AddPartitionsToTxnRequest: pb.AddPartitionsToTxnResponse,
    pb.AddOffsetsToTxnRequest: pb.AddOffsetsToTxnResponse,
    pb.EndTxnRequest: pb.EndTxnResponse,
    pb.JoinBatchTxnRequest: pb.JoinBatchTxnResponse,
    pb.EndBatchTxnRequest: pb.EndBatchTxnResponse,
}
_GROUP_REQUESTS = (pb.JoinGroupRequest, pb.SyncGroupRequest, pb.HeartbeatRequest, pb.LeaveGroupRequest,
                   pb.TxnOffsetCommitRequest, pb.OffsetFetchRequest)


class SimNode:
    """One node: `receive` takes its envelopes; everything else runs from its own timers."""

    def __init__(self, name: str, node_id: int, model: NodeCluster) -> None:
        self.name = name
        self.node_id = node_id
        self.model = model
        self.net = model.network
        self.start()

    # ------------------------------------------------------------ life

    def start(self) -> None:
        """A fresh process: nothing in memory, everything from the disk (a restart after a crash too)."""
        m = self.model
        self.logs = LogManager(DATA_ROOT, LogConfig(segment_bytes=SEGMENT_BYTES, planted_bug=m.planted),
                               node_id=self.node_id, storage=m.disk,
                               now_ms=self.now)
        self.logs.release_earlier_lives()
        extra_fsync_ms = getattr(getattr(self, "io", None), "extra_fsync_ms", 0)  # a slow disk stays slow
        self.io = SimIO(self.name, self.node_id, m)
        self.io.extra_fsync_ms = extra_fsync_ms
        self.io.serve_locally(self._serve_locally)
        observer = TraceObserver(self.name, m)
        self.markers = MarkerWriter(io=self.io, owner_of=lambda tp: self.owner(tp.topic, tp.partition),
                                    request_timeout_ms=NODE_REQUEST_TIMEOUT_MS)
        self.txn = TransactionCoordinator(
            io=self.io, txn_shards=m.control.txn_shards, offsets_shards=OFFSETS_SHARDS, transaction_max_timeout_ms=60_000,
            transactional_id_expiration_ms=3_600_000, allocator=_ProducerIdBlocks(m), markers=self.markers,
            partitions_for=m.control.partitions_for, snapshot_interval_records=SNAPSHOT_INTERVAL_RECORDS,
            assigned_here=lambda shard: self.owner(TRANSACTION_STATE_TOPIC, shard) == self.node_id,
            observer=observer, planted_bug=m.planted)
        self.verifier = TransactionVerifier(io=self.io, owner_of=self.owner, txn_shards=m.control.txn_shards)
        self.partitions = PartitionServer(
            io=self.io, logs=self.logs, membership=self, topics=_Topics(m), offsets_shards=OFFSETS_SHARDS,
            txn_shards=m.control.txn_shards, half_shards=HALF_SHARDS, verify=self.verifier.verify,
            on_offsets_marker=self._offsets_marker, observer=observer)
        self.groups = GroupCoordinator(
            OFFSETS_SHARDS, io=self.io, min_session_timeout_ms=GROUP_MIN_SESSION_TIMEOUT_MS,
            max_session_timeout_ms=GROUP_MAX_SESSION_TIMEOUT_MS, partitions_for=m.control.partitions_for,
            snapshot_interval_records=SNAPSHOT_INTERVAL_RECORDS,
            initial_rebalance_delay_ms=GROUP_INITIAL_REBALANCE_DELAY_MS, new_member_id=m.control.new_member_id,
            observer=observer, add_to_transaction=self.verifier.verify, planted_bug=m.planted)
        self.streams = SimCheckStreams(self.name, m)
        self.half = HalfMessageCoordinator(
            io=self.io, half_shards=HALF_SHARDS, check_interval_ms=CHECK_INTERVAL_MS, check_max=CHECK_MAX,
            half_message_timeout_ms=CHECK_IMMUNITY_MS, default_storage="rocketmq",
            allocate_producer_id=m.control.half_producer_id, topics=_Topics(m), owner_of=self.owner, markers=self.markers,
            producers=self.streams, peers=lambda: sorted(self.view), request_timeout_ms=NODE_REQUEST_TIMEOUT_MS,
            effect_wait_ms=EFFECT_WAIT_MS, observer=observer, planted_bug=m.planted)
        self.view: frozenset[int] = frozenset()
        self.shards = ShardReconciler(
            node_id=self.node_id, logs=self.logs, owner_of=self.owner,
            counts=ShardCounts(m.control.txn_shards, OFFSETS_SHARDS, HALF_SHARDS), txn=self.txn, groups=self.groups,
            half=self.half, acquire=self._acquire, released=self._released,
            loaded=lambda topic, shard, what, _epoch: m.recorder.note(self.name, f"{topic}-{shard} loaded: {what}"))
        self.retrying = False
        self.reconcile()
        self.net.set_timer(self.name, ABORT_CHECK_INTERVAL_MS, self._abort_timed_out, label="abort-check")

    def now(self) -> int:
        return self.net.now(self.name)

    def owner(self, topic: str, partition: int) -> int:
        """The owner of a log as this node last saw the cluster (a paused node's view is stale)."""
        return self.model.control.placement.owner(topic, partition, self.view)

    def may_cut_off(self, node_id: int) -> bool:
        return self.model.control.may_cut_off(node_id)

    def reconcile(self) -> None:
        """Let go of what moved away or was fenced meanwhile, then take the shards the placement now gives
        this node (the node's own driver, coordinator/reconcile.py)."""
        self.view = self.model.control.live_view
        if self.shards.run("reconcile") and not self.retrying:
            # held by a node still letting go of it: try again shortly, as the node's next tick does
            self.retrying = True
            self.net.set_timer(self.name, RECONCILE_RETRY_MS, self._retry_reconcile, label="reconcile")

    def _retry_reconcile(self) -> None:
        self.retrying = False
        self.reconcile()

    def _acquire(self, topic: str, partition: int, reason: str) -> PartitionLog | None:
        try:
            log = self.logs.open_as_leader(topic, partition, self.model.control.may_cut_off)
        except KafkaError as error:
            self.model.recorder.note(self.name, f"{topic}-{partition} not taken: {type(error).__name__}")
            return None
        self.model.recorder.ownership_changed(self.name, topic, partition, log.leader_epoch)
        return log

    def _released(self, log: PartitionLog, action: str, reason: str) -> None:
        self.model.recorder.note(self.name, f"{action} {log.topic}-{log.partition} epoch {log.leader_epoch}")

    # ------------------------------------------------------------ requests

    def receive(self, env: Envelope) -> None:
        message = env.message
        reply = functools.partial(self._reply, env)
        if type(message) in _TXN_REQUESTS:
            self.txn.request(message, reply)
        elif isinstance(message, pb.ProduceRequest):
            self.partitions.produce_async(message, reply)
        elif isinstance(message, pb.WriteTxnMarkersRequest):
            self.partitions.write_txn_markers_async(message, reply)
        elif isinstance(message, pb.FetchRequest):
            try:
                self.partitions.fetch_future(message).add_done_callback(lambda f: reply(f.exception() or f.result()))
            except KafkaError as exc:
                reply(exc)
        elif isinstance(message, _GROUP_REQUESTS):
            self._group_request(env, message, reply)
        elif isinstance(message, pb.SendHalfMessageRequest):
            self.half.send_async(message, reply)
        elif isinstance(message, pb.EndHalfTransactionRequest):
            self.half.end_async(message, reply)
        elif isinstance(message, pb.CheckBackRequest):  # the producer's stream is (still) open here
            self.streams.opened(message.producer_group, env.src)
            self.net.reply(env, message)
        elif isinstance(message, (pb.VerifyHalfWriteRequest, pb.DeliverCheckRequest, pb.DescribeProducersRequest)):
            self._serve_locally(message, reply)

    def _group_request(self, env: Envelope, message: Any, reply: Callable[[object], None]) -> None:
        """A group request, as the node's servicers hand it to its group coordinator; what the model checks
        (who was given which partitions, whose heartbeat was heard) is noted from the answers."""
        groups = self.groups
        try:
            if isinstance(message, pb.JoinGroupRequest):
                _when_answered(groups.join_future(message.group_id, join_request(message)), reply, join_response)
            elif isinstance(message, pb.SyncGroupRequest):
                def synced(outcome: Any) -> object:
                    if outcome.error_code == 0:
                        self.model.recorder.assigned(message.group_id, message.generation_id, outcome.assignment, env,
                                            self.name, self.now())
                    return sync_response(message.group_id, outcome)
                _when_answered(groups.sync_future(
                    message.group_id, message.member_id, message.group_instance_id or None, message.generation_id,
                    message.protocol_type or None, message.protocol_name or None,
                    {a.member_id: a.assignment for a in message.assignments}), reply, synced)
            elif isinstance(message, pb.HeartbeatRequest):
                answer = groups.heartbeat(message)
                self.model.recorder.member_heard(message.group_id, env.src, self.name, self.now())
                reply(answer)
            elif isinstance(message, pb.LeaveGroupRequest):
                reply(groups.leave_group(message))
            elif isinstance(message, pb.TxnOffsetCommitRequest):
                groups.txn_offset_commit_async(message, reply)
            else:
                reply(groups.offset_fetch(message))
        except KafkaError as exc:
            reply(exc)

    # ------------------------------------------------------------ answers, local calls

    @property
    def fsync_ms(self) -> int:
        return self.io.fsync_ms

    def _reply(self, env: Envelope, outcome: object) -> None:
        """A driver's outcome as the gRPC servicer answers it: the response, or its error code and message."""
        if isinstance(outcome, BaseException):
            error = outcome if isinstance(outcome, KafkaError) else UnknownServerError(
                f"[UNKNOWN_SERVER_ERROR] {type(outcome).__name__}: {outcome}")
            outcome = _response_type(env.message)(error_code=code_of(error), error_message=str(error))
        self.net.reply(env, outcome)

    def _serve_locally(self, request: Any, done: Callable[[object], None]) -> None:
        """A call this node makes of itself, answered as the node process answers it."""
        serve_locally(request, done, node_id=self.node_id, partitions=self.partitions, txn=self.txn, half=self.half)

    def _offsets_marker(self, shard: int, producer_id: int, committed: bool, offset: int) -> None:
        self.groups.complete_transaction(shard, producer_id, committed, offset)

    def _abort_timed_out(self) -> None:
        self.txn.abort_timed_out_transactions()
        self.net.set_timer(self.name, ABORT_CHECK_INTERVAL_MS, self._abort_timed_out, label="abort-check")


class _ProducerIdBlocks:
    """The cluster's durable counter of producer-id blocks (the node's is a directory of block files)."""

    def __init__(self, model: NodeCluster) -> None:
        self._model = model

    def reserve_block(self) -> tuple[int, int]:
        return self._model.control.reserve_producer_ids()


class _Topics:
    """The simulated cluster's topics: fixed, with no settings of their own."""

    def __init__(self, model: NodeCluster) -> None:
        self._model = model

    def partitions(self, topic: str) -> int | None:
        return self._model.control.partitions_for(topic)

    def configs(self, topic: str) -> dict[str, str]:
        return {"half.message.storage": self._model.control.half_storage(topic).value}

    def configs_view(self, topic: str) -> Mapping[str, str]:
        return {}


def _when_answered(future: Future[Any], reply: Callable[[object], None], convert: Callable[[Any], object]) -> None:
    """Reply with the converted outcome of a held request (JoinGroup, SyncGroup) once the driver answers it."""
    future.add_done_callback(lambda done: reply(done.exception() or convert(done.result())))


def _response_type(request: object) -> type:
    """The response message of a request message, by its name (FooRequest -> FooResponse)."""
    return getattr(pb, type(request).__name__.removesuffix("Request") + "Response")  # type: ignore[no-any-return]
