"""A simulated node: the shipping node's drivers over simulated I/O (sim_io.py), and what is still its own.

The transaction coordinator is the node's own driver and core (coordinator/txn/coordinator.py, core.py) and
its markers go through the node's MarkerWriter, both over SimIO; the partition logs are the node's
PartitionLogs and LogManager on the cluster's simulated disk (the real node's data directory is shared too,
and fenced by leader-epoch claims in it); the leader's answer to a failed verification and the marker
acknowledgement rules are the node's functions. A request is a simulated envelope, its answer a reply.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.group import snapshots as group_snapshots
from coordinator.placement import NO_OWNER
from coordinator.reconcile import logs_to_release
from coordinator.rocketmq.log_format import shard_of_transactional_id
from coordinator.txn.coordinator import TransactionCoordinator
from coordinator.txn.markers import MarkerWriter
from coordinator.txn.metadata import Owed
from coordinator.verification import ADD_CALL_TIMEOUT_S, verification_error
from partitions import LogConfig, LogManager, PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import (
    KafkaError,
    NotLeaderOrFollowerError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    code_of,
)
from proto.structs import CONSUMER_OFFSETS_TOPIC, HALF_TOPIC, TRANSACTION_STATE_TOPIC, IsolationLevel, TopicPartition
from txnsim.simulate.cluster.groups import GROUP_REQUESTS, OFFSETS_SHARDS, SimGroupCoordinator, add_answer_code
from txnsim.simulate.cluster.halfmessages import HALF_REQUESTS, SimHalfMessages
from txnsim.simulate.cluster.sim_io import SimIO, TraceObserver
from txnsim.simulate.network import Envelope

if TYPE_CHECKING:
    from txnsim.simulate.cluster.model import ClusterModel

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

_RESPONSES: dict[type, type] = {
    pb.InitProducerIdRequest: pb.InitProducerIdResponse,
    pb.AddPartitionsToTxnRequest: pb.AddPartitionsToTxnResponse,
    pb.AddOffsetsToTxnRequest: pb.AddOffsetsToTxnResponse,
    pb.EndTxnRequest: pb.EndTxnResponse,
    pb.JoinBatchTxnRequest: pb.JoinBatchTxnResponse,
    pb.EndBatchTxnRequest: pb.EndBatchTxnResponse,
}


class SimNode:
    """One node: `receive` takes its envelopes; everything else runs from its own timers."""

    def __init__(self, name: str, node_id: int, model: ClusterModel) -> None:
        self.name = name
        self.node_id = node_id
        self.model = model
        self.net = model.network
        self.start()

    # ------------------------------------------------------------ life

    def start(self) -> None:
        """A fresh process: nothing in memory, everything from the disk (a restart after a crash too)."""
        m = self.model
        self.logs = LogManager(DATA_ROOT, LogConfig(segment_bytes=SEGMENT_BYTES, planted_bug=m.bug),
                               node_id=self.node_id, storage=m.disk,
                               now_ms=self.now)
        self.logs.release_earlier_lives()
        extra_fsync_ms = getattr(getattr(self, "io", None), "extra_fsync_ms", 0)  # a slow disk stays slow
        self.io = SimIO(self.name, self.node_id, m)
        self.io.extra_fsync_ms = extra_fsync_ms
        self.io.serve_locally(self._serve_locally)
        self.markers = MarkerWriter(io=self.io, owner_of=lambda tp: self.owner(tp.topic, tp.partition),
                                    request_timeout_ms=NODE_REQUEST_TIMEOUT_MS)
        self.txn = TransactionCoordinator(
            io=self.io, txn_shards=m.txn_shards, offsets_shards=OFFSETS_SHARDS, transaction_max_timeout_ms=60_000,
            transactional_id_expiration_ms=3_600_000, allocator=_ProducerIdBlocks(m), markers=self.markers,
            partitions_for=m.partitions_for, snapshot_interval_records=SNAPSHOT_INTERVAL_RECORDS,
            assigned_here=lambda shard: self.owner(TRANSACTION_STATE_TOPIC, shard) == self.node_id,
            observer=TraceObserver(self.name, m), planted_bug=m.bug)
        self.view: frozenset[int] = frozenset()
        self.txn_logs: dict[int, PartitionLog] = {}
        self.retrying = False
        #: (topic, shard) -> records written to the coordinator shard since its last snapshot was asked for
        self._since_snapshot: dict[tuple[str, int], int] = {}
        self.groups = SimGroupCoordinator(self)
        self.half = SimHalfMessages(self)
        self.reconcile()
        self.net.set_timer(self.name, ABORT_CHECK_INTERVAL_MS, self._abort_timed_out, label="abort-check")

    def now(self) -> int:
        return self.net.now(self.name)

    def owner(self, topic: str, partition: int) -> int:
        """The owner of a log as this node last saw the cluster (a paused node's view is stale)."""
        return self.model.placement.owner(topic, partition, self.view)

    def reconcile(self) -> None:
        """Let go of what moved away or was fenced meanwhile, then take the shards the placement now gives
        this node (the node's own rule, coordinator/reconcile.py)."""
        self.view = self.model.live_view
        for log, action in logs_to_release(self.logs.open_logs(), self.owner, self.node_id):
            if log.topic == TRANSACTION_STATE_TOPIC:
                self.txn.unload_shard(log.partition)
                self.txn_logs.pop(log.partition, None)
            self.logs.close(log.topic, log.partition)
            self.model.note(self.name, f"{action} {log.topic}-{log.partition} epoch {log.leader_epoch}")
        groups_taken = self.groups.reconcile() & self.half.reconcile()
        missing = [shard for shard in range(self.model.txn_shards)
                   if self.owner(TRANSACTION_STATE_TOPIC, shard) == self.node_id and shard not in self.txn_logs]
        taken = all([self._take_shard(shard) for shard in missing]) and groups_taken
        if not taken and not self.retrying:
            # held by a node still letting go of it: try again shortly, as the node's next tick does
            self.retrying = True
            self.net.set_timer(self.name, RECONCILE_RETRY_MS, self._retry_reconcile, label="reconcile")

    def _retry_reconcile(self) -> None:
        self.retrying = False
        self.reconcile()

    def _take_shard(self, shard: int) -> bool:
        try:
            log = self.logs.open_as_leader(TRANSACTION_STATE_TOPIC, shard, self.model.may_cut_off)
        except KafkaError as error:
            self.model.note(self.name, f"shard {shard} not taken: {type(error).__name__}")
            return False
        self.txn_logs[shard] = log
        ids, replayed = self.txn.load_shard(shard, log)
        self.model.ownership_changed(self.name, TRANSACTION_STATE_TOPIC, shard, log.leader_epoch)
        self.model.note(self.name, f"shard {shard} loaded: {ids} ids, {replayed} records replayed from "
                                   f"offset {log.log_start_offset} or its snapshot")
        return True

    # ------------------------------------------------------------ requests

    def receive(self, env: Envelope) -> None:
        message = env.message
        if type(message) in _RESPONSES:
            self.txn.request(message, lambda outcome: self._reply(env, outcome))
        elif isinstance(message, pb.ProduceRequest):
            self._produce(env, message)
        elif isinstance(message, pb.WriteTxnMarkersRequest):
            self._write_markers(message, functools.partial(self.net.reply, env))
        elif isinstance(message, pb.FetchRequest):
            self.net.reply(env, self._fetch(message))
        elif isinstance(message, GROUP_REQUESTS):
            self.groups.receive(env)
        elif isinstance(message, HALF_REQUESTS):
            self.half.receive(env)
        elif isinstance(message, pb.DescribeProducersRequest):
            self.net.reply(env, self._describe_producers(message))

    def _owned_log(self, topic: str, partition: int) -> PartitionLog:
        count = self.model.partitions_for(topic)
        if count is None or not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] {topic}-{partition} does not exist")
        owner = self.owner(topic, partition)
        if owner != self.node_id:
            raise NotLeaderOrFollowerError(
                f"[NOT_LEADER_OR_FOLLOWER] node {self.node_id} does not own {topic}-{partition}; node {owner} does")
        log = self.logs.get(topic, partition)
        if log is None:
            log = self.logs.open_as_leader(topic, partition, self.model.may_cut_off)
            self.model.ownership_changed(self.name, topic, partition, log.leader_epoch)
        return log

    def _produce(self, env: Envelope, req: pb.ProduceRequest) -> None:
        """One partition per request (the simulated producer sends so); a first transactional write is
        verified with its coordinator before it is appended (KIP-890 part 1), or added to its transaction
        there when the request asks for the implicit add (part 2)."""
        part = req.partitions[0]
        tp = TopicPartition(part.topic, part.partition)
        result = pb.PartitionProduceResult(topic=part.topic, partition=part.partition, base_offset=-1)

        def answer(error: KafkaError | None = None) -> None:
            if error is not None:
                result.error_code, result.error_message = code_of(error), str(error)
            self.net.reply(env, pb.ProduceResponse(partitions=[result]))

        def append(verified: frozenset[int]) -> None:
            try:
                log = self._owned_log(tp.topic, tp.partition)
                appended = log.append(part.records, verified_producer_ids=verified, wait_durable=False)
            except KafkaError as error:
                return answer(error)
            self.model.appended(self.name, log, appended.base_offset, appended.last_offset)

            def durable() -> None:  # the fsync's time has passed: now it happens (a power loss before it loses
                try:                # the write, unacknowledged), then the answer
                    log.make_durable(appended.last_offset + 1)
                except KafkaError as error:
                    return None if acked_early else answer(error)
                self.model.appended(self.name, log, appended.base_offset, appended.last_offset)
                if not acked_early:
                    result.base_offset = appended.base_offset  # an error answer carries -1, as Kafka's does
                    answer()

            acked_early = self.model.bug == "ack-before-fsync"
            if acked_early:  # the planted bug: acknowledged before the fsync
                result.base_offset = appended.base_offset
                answer()
            self.net.set_timer(self.name, self.fsync_ms, durable, label="fsync")

        try:
            unverified = self._owned_log(tp.topic, tp.partition).needs_txn_verification(part.records)
        except KafkaError as error:
            return answer(error)
        if not unverified:
            return append(frozenset())
        (producer_id, producer_epoch), = unverified[:1]
        half_shard = shard_of_transactional_id(req.transactional_id)
        check: Any
        if half_shard is not None:  # a RocketMQ message stored in place: its half shard knows it
            coordinator = self.owner(HALF_TOPIC, half_shard)
            check = pb.VerifyHalfWriteRequest(shard=half_shard, producer_id=producer_id, topic=tp.topic,
                                              partition=tp.partition)
        else:
            coordinator = self.owner(TRANSACTION_STATE_TOPIC, self.txn.shard_of(req.transactional_id))
            check = pb.AddPartitionsToTxnRequest(
                transactional_id=req.transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
                verify_only=not req.add_partitions,  # transactions V2's implicit add asks to add it
                partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)])
        if coordinator == NO_OWNER:
            return answer(verification_error(15, req.transactional_id, tp, producer_id, producer_epoch))

        def verified(response: object) -> None:
            if isinstance(response, pb.VerifyHalfWriteResponse):
                code = response.error_code
            else:
                code = add_answer_code(response)
            error = verification_error(code, req.transactional_id, tp, producer_id, producer_epoch)
            if error is not None:
                return answer(error)
            append(frozenset({producer_id}))

        self.net.call(self.name, f"n{coordinator}", check, int(ADD_CALL_TIMEOUT_S * 1000), verified)

    def _write_markers(self, req: pb.WriteTxnMarkersRequest, answer: Callable[[object], None]) -> None:
        """Append every marker now; when the fsync's time has passed make them durable, apply the offsets
        markers to the groups (as the node does once a marker is on disk), and answer."""
        out: list[pb.TxnMarkerResult] = []
        written: list[tuple[pb.PartitionError, PartitionLog, int, pb.TxnMarker]] = []
        for marker in req.markers:
            result = pb.TxnMarkerResult(producer_id=marker.producer_id)
            for part in marker.partitions:
                # add() returns the response's own element (append() would copy it): durable() may set its error
                error = result.partitions.add(topic=part.topic, partition=part.partition)
                try:
                    log = self._marker_log(part.topic, part.partition)
                    appended = log.append_marker(
                        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                        committed=marker.committed, coordinator_epoch=marker.coordinator_epoch,
                        transaction_version=marker.transaction_version, wait_durable=False)
                    self.model.appended(self.name, log, appended.base_offset, appended.last_offset)
                    written.append((error, log, appended.base_offset, marker))
                except KafkaError as exc:
                    error.error_code, error.error_message = code_of(exc), str(exc)
            out.append(result)

        def durable() -> None:
            for error, log, offset, marker in written:
                try:
                    log.make_durable(offset + 1)
                except KafkaError as exc:
                    error.error_code, error.error_message = code_of(exc), str(exc)
                    continue
                self.model.appended(self.name, log, offset, offset)
                if error.topic == CONSUMER_OFFSETS_TOPIC:
                    self.groups.complete_transaction(error.partition, marker.producer_id, marker.committed, offset)
            answer(pb.WriteTxnMarkersResponse(markers=out))

        if written:
            self.net.set_timer(self.name, self.fsync_ms, durable, label="fsync")
        else:
            answer(pb.WriteTxnMarkersResponse(markers=out))

    def _marker_log(self, topic: str, partition: int) -> PartitionLog:
        """A data partition's log, or an offsets shard's as the group coordinator holds it."""
        if topic != CONSUMER_OFFSETS_TOPIC:
            return self._owned_log(topic, partition)
        log = self.groups.log_of(partition)
        if log is None:
            raise NotLeaderOrFollowerError(f"[NOT_LEADER_OR_FOLLOWER] node {self.node_id} does not hold "
                                           f"{topic}-{partition}")
        return log

    def _fetch(self, req: pb.FetchRequest) -> pb.FetchResponse:
        isolation = IsolationLevel(req.isolation_level)
        results = []
        for part in req.partitions:
            result = pb.FetchPartitionResult(topic=part.topic, partition=part.partition)
            try:
                log = self._owned_log(part.topic, part.partition)
                data = log.read(part.fetch_offset, 64 * 1024, isolation)
                log.check_still_leader()  # after the read, as the real node
                result.records = data.records
                result.high_watermark = data.high_watermark
                result.last_stable_offset = data.last_stable_offset
                result.aborted_transactions.extend(
                    pb.AbortedTransaction(producer_id=pid, first_offset=first)
                    for pid, first in data.aborted_transactions)
            except KafkaError as exc:
                result.error_code, result.error_message = code_of(exc), str(exc)
            results.append(result)
        return pb.FetchResponse(partitions=results)

    def _describe_producers(self, req: pb.DescribeProducersRequest) -> pb.DescribeProducersResponse:
        """What a partition knows of its producers (a half shard asks where its copies stopped)."""
        out = []
        for part in req.partitions:
            result = pb.PartitionProducers(topic=part.topic, partition=part.partition)
            try:
                log = self._owned_log(part.topic, part.partition)
                producers = log.producer_snapshots()
                log.check_still_leader()  # after the read, as the real node
                for p in producers:
                    result.active_producers.append(pb.ProducerStateInfo(
                        producer_id=p.producer_id, producer_epoch=p.producer_epoch, last_sequence=p.last_sequence))
            except KafkaError as exc:
                result.error_code, result.error_message = code_of(exc), str(exc)
            out.append(result)
        return pb.DescribeProducersResponse(partitions=out)

    # ------------------------------------------------------------ answers, local calls, group snapshots

    @property
    def fsync_ms(self) -> int:
        return self.io.fsync_ms

    def _reply(self, env: Envelope, outcome: object) -> None:
        """A driver's outcome as the gRPC servicer answers it: the response, or its error code and message."""
        if isinstance(outcome, KafkaError):
            outcome = _RESPONSES[type(env.message)](error_code=code_of(outcome), error_message=str(outcome))
        self.net.reply(env, outcome)

    def _serve_locally(self, request: Any, done: Callable[[object], None]) -> None:
        """A call this node makes of itself (markers to its own partitions), as the node process answers it."""
        if isinstance(request, pb.WriteTxnMarkersRequest):
            self._write_markers(request, done)
        else:
            done(UnknownServerError(f"[UNKNOWN_SERVER_ERROR] {self.name} cannot call itself with "
                                    f"{type(request).__name__}"))

    def count_shard_write(self, log: PartitionLog) -> None:
        """A record of an offsets shard is durable; every snapshot interval the shard is snapshotted from its
        durable log, a moment later (the node does it in the background), as the real coordinators do."""
        key = (log.topic, log.partition)
        written = self._since_snapshot.get(key, 0) + 1
        if written >= SNAPSHOT_INTERVAL_RECORDS:
            written = 0
            self.net.set_timer(self.name, 0, self._snapshot, log, label="snapshot")
        self._since_snapshot[key] = written

    def _snapshot(self, log: PartitionLog) -> None:
        try:
            next_offset = group_snapshots.take_snapshot(log, log.partition).next_offset
        except KafkaError as error:  # the shard moved away or was fenced meanwhile: the next owner snapshots
            self.model.note(self.name, f"snapshot of {log.topic}-{log.partition} skipped: {type(error).__name__}")
            return
        except OSError as error:  # the simulated disk lost power under it; the log keeps everything
            self.model.note(self.name, f"snapshot of {log.topic}-{log.partition} failed: {error.strerror}")
            return
        self.model.note(self.name, f"snapshot of {log.topic}-{log.partition} up to offset {next_offset}, log from "
                                   f"{log.log_start_offset}")

    def send_markers(self, owed: Iterable[Owed], coordinator_epoch: int,
                     done: Callable[[frozenset[Owed]], None]) -> None:
        """The node's MarkerWriter.send_async (the simulated half shards send theirs through it)."""
        self.markers.send_async(owed, coordinator_epoch=coordinator_epoch, done=done)

    def _abort_timed_out(self) -> None:
        self.txn.abort_timed_out_transactions()
        self.net.set_timer(self.name, ABORT_CHECK_INTERVAL_MS, self._abort_timed_out, label="abort-check")


class _ProducerIdBlocks:
    """The cluster's durable counter of producer-id blocks (the node's is a directory of block files)."""

    def __init__(self, model: ClusterModel) -> None:
        self._model = model

    def reserve_block(self) -> tuple[int, int]:
        return self._model.reserve_producer_ids()
