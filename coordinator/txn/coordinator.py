"""The transaction coordinator's driver: the sans-I/O core (core.py) carried out over a node's I/O
(coordinator/runtime/io.py), the same code in a node process and in the simulator.

Every protocol decision is the core's; this driver only carries out its effects. A request is handed to
the core under one lock; the entries the core asks for are appended to the shard's log and made durable
through the I/O (in a node process that is the calling thread, the log group-commits concurrent fsyncs;
in the simulator a simulated fsync), and the core's Reply goes to the request's callback. Marker sends and
producer-id reservations run apart from the caller (`io.soon`), timers on the I/O's timers. Effects that
follow from a write done in the caller's thread are carried out after the effects already queued, as one
queue per thread, so the order is the same whether the I/O answers at once or later.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from itertools import count
from typing import Any, Protocol, cast

from coordinator.observers import NO_OBSERVER, TransactionObserver
from coordinator.runtime.io import Failures, NodeIO, Outcome, wait_for
from coordinator.txn import state_log
from coordinator.txn.core import (
    Effect,
    Reply,
    ReserveProducerIds,
    SendMarkers,
    ShardState,
    StartTimer,
    TimerKey,
    TxnCoordinatorCore,
    Value,
    WriteEntry,
)
from coordinator.txn.metadata import Owed
from partitions import PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, NotCoordinatorError, UnknownServerError
from proto.planted_bugs import PlantedBug
from proto.structs import TransactionState

log = logging.getLogger(__name__)


class MarkerSender(Protocol):
    """What the driver needs of the marker writer (markers.MarkerWriter): one send of owed markers, whose
    outcome comes back through `done` (called once, from any thread, and must not block)."""

    def send_async(self, owed: Iterable[Owed], *, coordinator_epoch: int,
                   done: Callable[[frozenset[Owed]], object]) -> None: ...


class ProducerIdBlocks(Protocol):
    """Where blocks of producer ids come from (coordinator/producer_ids.py; the simulator's counter)."""

    def reserve_block(self) -> tuple[int, int]: ...


class TransactionCoordinator:
    """The node's transaction coordinator: the gRPC and Kafka front doors call these methods."""

    def __init__(self, *, io: NodeIO, txn_shards: int, offsets_shards: int, transaction_max_timeout_ms: int,
                 transactional_id_expiration_ms: int, allocator: ProducerIdBlocks,
                 markers: MarkerSender, partitions_for: Callable[[str], int | None],
                 snapshot_interval_records: int = 1000,
                 assigned_here: Callable[[int], bool] = lambda shard: False,
                 observer: TransactionObserver = NO_OBSERVER, planted_bug: PlantedBug | None = None) -> None:
        self.core = TxnCoordinatorCore(
            txn_shards=txn_shards, offsets_shards=offsets_shards,
            transaction_max_timeout_ms=transaction_max_timeout_ms,
            transactional_id_expiration_ms=transactional_id_expiration_ms, partitions_for=partitions_for,
            assigned_here=assigned_here, planted_bug=planted_bug)
        self.txn_shards = txn_shards
        self._io = io
        self._allocator = allocator
        self._markers = markers
        self._lock = threading.Lock()
        self._logs: dict[int, PartitionLog] = {}
        self._answers: dict[int, Callable[[Outcome], None]] = {}
        self._closed = False
        self._tickets = count(1)
        #: the effects being carried out on this thread (see _run)
        self._queue = threading.local()
        self._snapshot_interval = snapshot_interval_records
        self._writes_since_snapshot: dict[int, int] = {}
        self._snapshotting: set[int] = set()
        self._observer = observer
        #: writes of timeout aborts in flight, counted once durable
        self._timeout_writes: set[int] = set()
        #: transactional id -> when its EndTxn(commit) arrived (monotonic s), until its CompleteCommit
        self._commits_since: dict[str, float] = {}

    # ------------------------------------------------------------ shard ownership

    def shard_of(self, transactional_id: str) -> int:
        return self.core.shard_of(transactional_id)

    def begin_loading(self, shard: int, shard_log: PartitionLog) -> None:
        with self._lock:
            self._logs[shard] = shard_log
            effects = self.core.begin_loading(shard, shard_log.leader_epoch)
        self._run(effects)

    def load_shard(self, shard: int, shard_log: PartitionLog) -> tuple[int, int]:
        """Replay the shard's log, serve it, then finish every transaction left in Prepare*; returns how many
        ids it holds and how many log records were replayed."""
        if self._logs.get(shard) is not shard_log:
            self.begin_loading(shard, shard_log)
        entries, replayed = state_log.load(shard_log)
        log.info("shard %d loaded at coordinator epoch %d: %d ids, %d log records replayed",
                 shard, shard_log.leader_epoch, len(entries), replayed)
        with self._lock:
            effects = self.core.loaded(shard, shard_log.leader_epoch, entries, self._io.now_ms())
        self._run(effects)
        return len(entries), replayed

    def unload_shard(self, shard: int) -> None:
        with self._lock:
            self._logs.pop(shard, None)
            effects = self.core.unload(shard)
            for tid in [t for t in self._commits_since if self.core.shard_of(t) == shard]:
                del self._commits_since[tid]  # its next owner completes it: no latency is measured
        self._run(effects)

    def owned_shards(self) -> list[ShardState]:
        with self._lock:
            return self.core.owned_shards()

    def open_transactions(self) -> dict[str, int]:
        """How many ids of the owned shards are in each state of an open transaction (the metrics' gauge)."""
        counts = dict.fromkeys(("Ongoing", "PrepareCommit", "PrepareAbort"), 0)
        with self._lock:
            for shard in self.core.owned_shards():
                for value in shard.entries.values():
                    if value.state.value in counts:
                        counts[value.state.value] += 1
        return counts

    def close(self) -> None:
        """Stop. Calls still waiting (held for the previous markers or a write, for producer ids, for a batch's
        outcome) hear NOT_COORDINATOR now: the timers that would have answered them stop with the node, and a
        request thread blocked for ever would hold up its exit. Their clients retry at the next owner."""
        with self._lock:
            self._closed = True
            waiting, self._answers = self._answers, {}
        for answer in waiting.values():
            answer(_stopping())

    # ------------------------------------------------------------ RPCs

    def init_producer_id(self, req: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
        return cast(pb.InitProducerIdResponse, self._call(req))

    def add_partitions(self, req: pb.AddPartitionsToTxnRequest) -> pb.AddPartitionsToTxnResponse:
        return cast(pb.AddPartitionsToTxnResponse, self._call(req))

    def add_offsets(self, req: pb.AddOffsetsToTxnRequest) -> pb.AddOffsetsToTxnResponse:
        return cast(pb.AddOffsetsToTxnResponse, self._call(req))

    def end_txn(self, req: pb.EndTxnRequest, *, transaction_version: int = 2) -> pb.EndTxnResponse:
        """Prepare the commit or abort durably and start phase two (see TxnCoordinatorCore._end_txn for
        what the client's transaction version changes)."""
        received = time.monotonic()
        if req.committed:
            with self._lock:
                self._commits_since[req.transactional_id] = received
        try:
            response = cast(pb.EndTxnResponse, self._call(req, transaction_version))
        except BaseException:
            with self._lock:
                self._commits_since.pop(req.transactional_id, None)
            raise
        self._observer.end_txn_answered(req.committed, time.monotonic() - received)
        return response

    def join_batch(self, req: pb.JoinBatchTxnRequest) -> pb.JoinBatchTxnResponse:
        return cast(pb.JoinBatchTxnResponse, self._call(req))

    def end_batch(self, req: pb.EndBatchTxnRequest) -> pb.EndBatchTxnResponse:
        return cast(pb.EndBatchTxnResponse, self._call(req))

    def list_transactions(self, req: pb.ListTransactionsRequest) -> pb.ListTransactionsResponse:
        with self._lock:
            answer = self.core.list_transactions(req)
            logs = dict(self._logs)
        # after the read (see PartitionLog.check_still_leader): a node woken from a stall lists only the shards
        # no later owner has claimed; the new owner lists the others
        shards = {self.core.shard_of(t.transactional_id) for t in answer.transactions}
        taken = {shard for shard in shards if _taken_over(logs.get(shard))}
        if taken:
            kept = [t for t in answer.transactions if self.core.shard_of(t.transactional_id) not in taken]
            del answer.transactions[:]
            answer.transactions.extend(kept)
        return answer

    def describe_transactions(self, req: pb.DescribeTransactionsRequest,
                              node_id: int) -> pb.DescribeTransactionsResponse:
        with self._lock:
            answer = self.core.describe_transactions(req, node_id)
            logs = dict(self._logs)
        for i, description in enumerate(answer.transactions):  # after the read: see PartitionLog.check_still_leader
            tid = description.transactional_id
            shard_log = logs.get(self.core.shard_of(tid))
            if description.error_code == 0 and _taken_over(shard_log):
                answer.transactions[i].CopyFrom(pb.TransactionDescription(
                    transactional_id=tid, error_code=NotCoordinatorError.errno,
                    error_message=f"[NOT_COORDINATOR] the shard of {tid!r} was taken over by another node; "
                                  "find the coordinator again"))
        return answer

    # ------------------------------------------------------------ periodic work

    def abort_timed_out_transactions(self) -> int:
        """Fence and abort every Ongoing transaction past its timeout; returns how many aborts began."""
        with self._lock:
            effects = self.core.abort_timed_out(self._io.now_ms())
            self._timeout_writes.update(e.write_id for e in effects if isinstance(e, WriteEntry))
        self._run(effects)
        return sum(isinstance(e, WriteEntry) for e in effects)

    def expire_transactional_ids(self) -> int:
        """Tombstone ids idle longer than transactional_id_expiration_ms; returns how many were written."""
        with self._lock:
            effects = self.core.expire_transactional_ids(self._io.now_ms())
        self._run(effects)
        return sum(isinstance(e, WriteEntry) for e in effects)

    # ------------------------------------------------------------ carrying out effects

    def request(self, request: Any, done: Callable[[Outcome], None], transaction_version: int = 2) -> None:
        """Hand a request to the core; `done` gets its response or KafkaError, now or once it is decided."""
        ticket = next(self._tickets)
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                self._answers[ticket] = done
                effects = self.core.request(ticket, request, self._io.now_ms(),
                                            transaction_version=transaction_version)
        if closed:
            done(_stopping())
            return
        self._run(effects)

    def _call(self, request: Any, transaction_version: int = 2) -> Any:
        """A request answered on the caller's thread (the front doors'): blocks until the core replies."""
        if getattr(self._queue, "effects", None) is not None:  # its effects would queue behind this very wait
            raise RuntimeError("a blocking call from the coordinator's own effects would wait for ever")
        return wait_for(lambda done: self.request(request, done, transaction_version))

    def _run(self, effects: list[Effect]) -> None:
        """Carry out effects in order. One queue per thread: effects that follow from an entry made durable
        on this thread (the I/O may call back at once) go after the effects already queued."""
        queue: deque[Effect] | None = getattr(self._queue, "effects", None)
        if queue is not None:
            queue.extend(effects)
            return
        queue = self._queue.effects = deque(effects)
        try:
            while queue:
                effect = queue.popleft()
                if isinstance(effect, Reply):
                    self._answer(effect)
                elif isinstance(effect, WriteEntry):
                    self._write(effect)
                elif isinstance(effect, SendMarkers):
                    self._io.soon(functools.partial(self._send_markers, effect), "send markers")
                elif isinstance(effect, StartTimer):
                    self._io.after(max(0, effect.at_ms - self._io.now_ms()), functools.partial(self._fire, effect.key),
                                   f"txn timer {effect.key[0]}")
                elif isinstance(effect, ReserveProducerIds):
                    self._io.soon(self._reserve_producer_ids, "reserve producer ids")
        finally:
            self._queue.effects = None

    def _answer(self, reply: Reply) -> None:
        with self._lock:
            answer = self._answers.pop(reply.ticket, None)
        if answer is not None:
            answer(reply.error if reply.error is not None else reply.response)

    def _write(self, effect: WriteEntry) -> None:
        """Append the entry, then make it durable through the I/O; the core hears the outcome after that."""
        shard_log = self._logs.get(effect.shard)
        if shard_log is None or shard_log.leader_epoch != effect.coordinator_epoch:
            self._written(effect, None, NotCoordinatorError(
                f"[NOT_COORDINATOR] shard {effect.shard} is no longer this node's"))
            return
        try:
            end = state_log.append_entry(shard_log, effect.transactional_id, effect.value, effect.timestamp_ms,
                                         passing=effect.passing, wait_durable=False)
        except KafkaError as exc:
            self._written(effect, shard_log, exc)
            return
        except OSError as exc:  # an I/O failure the log did not name (a lost disk): the client retries elsewhere
            log.warning("writing %r to shard %d failed: %s", effect.transactional_id, effect.shard, exc)
            self._written(effect, shard_log, UnknownServerError(f"[UNKNOWN_SERVER_ERROR] {exc}"))
            return
        except Exception as exc:  # a node bug: say so; the client retries elsewhere
            log.exception("writing %r to shard %d failed", effect.transactional_id, effect.shard)
            self._written(effect, shard_log, UnknownServerError(f"[UNKNOWN_SERVER_ERROR] {exc}"))
            return

        def durable(failures: Failures) -> None:
            self._written(effect, shard_log, failures.get(shard_log))
        self._io.durable({shard_log: end}, durable)

    def _written(self, effect: WriteEntry, shard_log: PartitionLog | None, error: KafkaError | None) -> None:
        with self._lock:
            previous = self._state_of(effect.shard, effect.transactional_id)
            effects = self.core.entry_written(effect.write_id, error, self._io.now_ms())
            installed = error is None and self.core.owns(effect.shard, effect.coordinator_epoch)
            timed_out = effect.write_id in self._timeout_writes
            self._timeout_writes.discard(effect.write_id)
        if installed:
            for value in (*effect.passing, effect.value):
                self._observe(previous, value, timed_out)
                previous = None if value is None else value.state
        if error is None and shard_log is not None:
            self._count_write(effect.shard, shard_log, 1 + len(effect.passing))
        self._run(effects)

    def _state_of(self, shard: int, transactional_id: str) -> TransactionState | None:
        """The installed state of an id (caller holds the lock)."""
        for state in self.core.owned_shards():
            if state.shard == shard:
                value = state.entries.get(transactional_id)
                return None if value is None else value.state
        return None

    def _observe(self, previous: TransactionState | None, value: Value | None, timed_out: bool) -> None:
        """Report a durable, installed change of one id to the observer (the node's metrics)."""
        if value is None:
            return
        state = value.state
        if state is TransactionState.ONGOING and previous is not TransactionState.ONGOING:
            self._observer.transaction_started()
        elif state is TransactionState.PREPARE_ABORT and timed_out:
            self._observer.transaction_timed_out()
        elif state in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT):
            committed = state is TransactionState.COMPLETE_COMMIT
            self._observer.transaction_completed(committed)
            with self._lock:
                since = self._commits_since.pop(value.transactional_id, None)
            if committed and since is not None:
                self._observer.commit_completed(time.monotonic() - since)

    def _send_markers(self, effect: SendMarkers) -> None:
        """Owe the markers (this node's own may be written in this thread); `_markers_answered` runs apart from
        whoever saw the last answer."""
        def done(acked: frozenset[Owed]) -> None:
            self._io.soon(lambda: self._markers_answered(effect, acked), "markers answered")
        try:
            self._markers.send_async(effect.owed, coordinator_epoch=effect.coordinator_epoch, done=done)
        except Exception:  # a bug must not silently strand a transaction: say so, and retry after the backoff
            log.exception("sending markers for %r failed", effect.transactional_id)
            self._markers_answered(effect, frozenset())

    def _markers_answered(self, effect: SendMarkers, acked: frozenset[Owed]) -> None:
        with self._lock:
            effects = self.core.markers_written(effect.send_id, acked, self._io.now_ms())
        if any(isinstance(e, StartTimer) and e.key[0] == "markers" for e in effects):
            self._observer.markers_resent(len(set(effect.owed) - acked))
        self._run(effects)

    def _reserve_producer_ids(self) -> None:
        try:
            first, end = self._allocator.reserve_block()
        except Exception as exc:  # the ids directory is unwritable: the waiting calls hear it
            log.exception("reserving producer ids failed")
            with self._lock:
                effects = self.core.producer_ids_failed(UnknownServerError(str(exc)), self._io.now_ms())
        else:
            with self._lock:
                effects = self.core.producer_ids_reserved(first, end, self._io.now_ms())
        self._run(effects)

    def _fire(self, key: TimerKey) -> None:
        with self._lock:
            effects = self.core.timer_fired(key, self._io.now_ms())
        self._run(effects)

    # ------------------------------------------------------------ snapshots

    def _count_write(self, shard: int, shard_log: PartitionLog, records: int) -> None:
        """Every snapshot interval, snapshot the shard apart from the caller (one snapshot of a shard at a time)."""
        with self._lock:
            written = self._writes_since_snapshot.get(shard, 0) + records
            due = written >= self._snapshot_interval and shard not in self._snapshotting and not self._closed
            self._writes_since_snapshot[shard] = 0 if due else written
            if due:
                self._snapshotting.add(shard)
        if due:
            self._io.soon(lambda: self._snapshot(shard, shard_log), f"snapshot of shard {shard}")

    def _snapshot(self, shard: int, shard_log: PartitionLog) -> None:
        """Snapshot the shard from its durable log and drop the segments the previous snapshot covers."""
        try:
            image = state_log.take_snapshot(shard_log)
            log.info("shard %d: snapshot of %d ids up to offset %d", shard, len(image.values), image.next_offset)
            self._observer.shard_snapshotted(shard_log.topic, shard, image.next_offset, shard_log.log_start_offset)
        except KafkaError as exc:  # the shard moved away meanwhile: the next owner snapshots
            log.info("shard %d: snapshot skipped: %s", shard, exc)
        except OSError as exc:  # the log keeps everything; the next interval tries again
            log.warning("shard %d: snapshot failed: %s", shard, exc)
        except Exception:  # a bug: say so, the log still keeps everything
            log.exception("shard %d: snapshot failed", shard)
        finally:
            with self._lock:
                self._snapshotting.discard(shard)


def _stopping() -> NotCoordinatorError:
    """What calls hear from a closed coordinator: held ones at close, new ones after."""
    return NotCoordinatorError("[NOT_COORDINATOR] this node is stopping; retry at the shard's next owner")


def _taken_over(shard_log: PartitionLog | None) -> bool:
    """Whether the shard's log is gone from this node or claimed by a later owner (checked after a read,
    see PartitionLog.check_still_leader)."""
    return shard_log is None or shard_log.fenced
