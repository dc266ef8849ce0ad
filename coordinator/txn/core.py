"""The transaction coordinator's protocol, without I/O: Kafka's transactions (V2 for txnsim's producer,
V1 for Kafka clients on the wire port) and txnsim's batch transactions, for the shards one node owns.

The core is a plain object in the manner of h11: every input (a request, the outcome of a write or of a
marker send it asked for, a timer, an ownership change) comes with the current time and returns the
effects to carry out: write this value to a shard's log, send these markers, start this timer, answer
this request, reserve more producer ids. It never blocks, sleeps, reads a clock or touches a file, so
the real node (coordinator.py: threads, gRPC, files, the wall clock) and the simulator
(txnsim/simulate: one thread, simulated time) drive the same decisions.

Invariants: at most one write per transactional id in flight (others get CONCURRENT_TRANSACTIONS, or
wait for it where Kafka's clients would only back off and retry); a value is installed only once its
write is durable and only if the shard's coordinator epoch is unchanged; Prepare* is durable before
EndTxn is answered, markers go out after, and Complete* is written only when every partition
acknowledged its marker. Each request gets exactly one Reply.
"""
from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import count
from typing import Any, TypeVar

from coordinator.runtime.shard_status import ShardStatus, still_loading
from coordinator.txn import batches
from coordinator.txn.batch_metadata import BatchTxn
from coordinator.txn.metadata import MAX_CLIENT_EPOCH, NO_EPOCH, NO_PRODUCER_ID, Marker, Owed, TxnMetadata
from proto import txnsim_pb2 as pb
from proto.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    code_of,
)
from proto.hashing import partition_for
from proto.planted_bugs import PlantedBug
from proto.structs import CONSUMER_OFFSETS_TOPIC, MAX_TRANSACTIONAL_ID_LENGTH, TopicPartition, TransactionState

S = TransactionState
log = logging.getLogger(__name__)
Value = TxnMetadata | BatchTxn
V = TypeVar("V", TxnMetadata, BatchTxn)
TimerKey = tuple[Any, ...]

#: how long a new transaction's AddPartitions waits for the previous one's markers before it is answered
#: CONCURRENT_TRANSACTIONS (markers are retried until acknowledged; a partition owner down takes longer)
PREVIOUS_END_HOLD_MS = 1000
#: how long a batch request waits for another write of the same batch (its tasks join at the same moment)
BATCH_QUEUE_WAIT_MS = 2000
#: how long a request waits for producer ids to be reserved before COORDINATOR_NOT_AVAILABLE
PRODUCER_IDS_WAIT_MS = 5000
#: reserve the next block of producer ids when fewer than this many are left
PRODUCER_IDS_LOW_WATER = 100
#: marker resends back off from the first to the last delay, doubling
MARKER_BACKOFF_MS = (20, 500)
_KIND_NAMES = {TxnMetadata: "a transactional id", BatchTxn: "a batch transaction id (txnsim extension)"}


# ------------------------------------------------------------ effects


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to the request with this ticket: a response, or a Kafka error."""

    ticket: int
    response: Any = None
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class WriteEntry:
    """Append `value` (None: a tombstone) for `transactional_id` to the shard's log, durably, then call
    `entry_written(write_id, error, now)`. `passing` are values the id goes through on the way, written
    just before `value` in the same batch, so all of them are durable or none (a Complete* followed by
    the next transaction's Ongoing: one fsync instead of two)."""

    write_id: int
    shard: int
    coordinator_epoch: int
    transactional_id: str
    value: Value | None
    timestamp_ms: int
    passing: tuple[Value, ...] = ()


@dataclass(frozen=True, slots=True)
class SendMarkers:
    """Send each owed marker once to the owner of its partition, then call
    `markers_written(send_id, acknowledged, now)` with those acknowledged (or superseded)."""

    send_id: int
    shard: int
    coordinator_epoch: int
    transactional_id: str
    owed: tuple[Owed, ...]


@dataclass(frozen=True, slots=True)
class StartTimer:
    """Call `timer_fired(key, now)` at `at_ms` (a timer firing late or needlessly is harmless)."""

    at_ms: int
    key: TimerKey


@dataclass(frozen=True, slots=True)
class ReserveProducerIds:
    """Reserve a block of producer ids durably, then call `producer_ids_reserved(first, end)`."""


Effect = Reply | WriteEntry | SendMarkers | StartTimer | ReserveProducerIds


# ------------------------------------------------------------ state


@dataclass(slots=True)
class _Call:
    """A request being answered; it may wait (blocked on an id, or on producer ids) and be retried."""

    ticket: int
    request: Any
    version: int = 2
    deadline: int | None = None  # set when it first waits; kept across re-waits
    may_wait: bool = True
    adapt: Callable[[Any], Any] | None = None  # maps the inner response (AddOffsets rides on AddPartitions)


@dataclass(slots=True)
class _Completion:
    """Phase two of one Prepare*: the markers still owed, then the Complete* write."""

    prepared: Value
    owed: set[Owed]
    sending: bool = False
    attempts: int = 0
    #: EndBatchTxn calls waiting for the outcome: (ticket, answer(completed))
    waiters: list[tuple[int, Callable[[bool], Any]]] = field(default_factory=list)


@dataclass(slots=True)
class ShardState:
    """The in-memory cache of one owned __transaction_state partition."""

    shard: int
    coordinator_epoch: int
    status: ShardStatus = ShardStatus.LOADING
    #: transactional ids and batch transaction ids (txnsim's extension) share the shard's keys
    entries: dict[str, Value] = field(default_factory=dict)
    #: the target state of the write in flight per id
    pending: dict[str, TransactionState] = field(default_factory=dict)
    completing: dict[str, _Completion] = field(default_factory=dict)
    #: requests waiting for an id's write or phase two to finish
    blocked: dict[str, list[_Call]] = field(default_factory=dict)
    #: id -> (its transaction's start stamp, this clock's time when it first read as the future): see
    #: `_timeout_start`
    future_starts: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(slots=True)
class _Write:
    shard: ShardState
    transactional_id: str
    value: Value | None
    on_success: Callable[[int], list[Effect]]
    on_failure: Callable[[KafkaError, int], list[Effect]]


#: a held AddPartitionsToTxn call and the partitions it asks for
_HeldAdd = tuple[_Call, list[TopicPartition]]


class _Wait(Exception):
    """Raised by a handler to park its call until the id settles (or the deadline passes)."""

    def __init__(self, shard: ShardState, tid: str, hold_ms: int) -> None:
        self.shard, self.tid, self.hold_ms = shard, tid, hold_ms


class _NeedProducerIds(Exception):
    """Raised when no reserved producer id is left; the call waits for the next block."""


class TxnCoordinatorCore:
    """The transaction coordinator of one node, as a sans-I/O state machine (module docstring)."""

    def __init__(self, *, txn_shards: int, offsets_shards: int, transaction_max_timeout_ms: int,
                 transactional_id_expiration_ms: int, partitions_for: Callable[[str], int | None],
                 assigned_here: Callable[[int], bool] = lambda shard: False, planted_bug: PlantedBug | None = None) -> None:
        self.txn_shards = txn_shards
        #: the simulator's planted bug (NO_EPOCH_BUMP, COMMIT_EVERY_ATTEMPT), switching off one protection; never set by a node
        self._planted_bug = planted_bug
        self.offsets_shards = offsets_shards
        self.max_timeout_ms = transaction_max_timeout_ms
        self.expiration_ms = transactional_id_expiration_ms
        self._partitions_for = partitions_for
        #: whether the placement gives `shard` to this node (then a request arriving before the
        #: takeover registered it hears COORDINATOR_LOAD_IN_PROGRESS, not NOT_COORDINATOR)
        self._assigned_here = assigned_here
        self._shards: dict[int, ShardState] = {}
        self._ids = count(1)
        self._writes: dict[int, _Write] = {}
        self._sends: dict[int, tuple[ShardState, str, _Completion]] = {}
        self._waiting_calls: dict[int, tuple[ShardState | None, str, _Call]] = {}  # ticket -> where it waits
        self._producer_ids: deque[range] = deque()
        self._ids_requested = False
        self._pid_waiters: list[_Call] = []

    # ------------------------------------------------------------ ownership

    def shard_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.txn_shards)

    def begin_loading(self, shard: int, coordinator_epoch: int) -> list[Effect]:
        """The shard is this node's from now on, at `coordinator_epoch`; requests hear LOAD_IN_PROGRESS."""
        effects = self.unload(shard) if shard in self._shards else []
        self._shards[shard] = ShardState(shard, coordinator_epoch)
        return effects

    def loaded(self, shard: int, coordinator_epoch: int, entries: dict[str, Value], now: int) -> list[Effect]:
        """Serve the shard with the values its log replayed, and finish every transaction left in Prepare*."""
        state = self._shards.get(shard)
        if state is None or state.coordinator_epoch != coordinator_epoch:
            return []
        state.entries = dict(entries)
        state.status = ShardStatus.SERVING
        effects: list[Effect] = []
        for meta in sorted(entries.values(), key=lambda m: m.transactional_id):
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info("shard %d: resending %s markers for %r after load", shard, meta.state, meta.transactional_id)
                effects += self._start_completion(state, meta, now)
        return effects

    def unload(self, shard: int) -> list[Effect]:
        """The shard moved away: calls waiting on it hear NOT_COORDINATOR; phase two stops here (the new
        owner finishes it after its load); writes in flight fail when they land."""
        state = self._shards.pop(shard, None)
        if state is None:
            return []
        effects: list[Effect] = []
        for tid, calls in sorted(state.blocked.items()):
            for call in calls:
                self._waiting_calls.pop(call.ticket, None)
                effects.append(Reply(call.ticket, error=NotCoordinatorError(
                    f"[NOT_COORDINATOR] this node gave up shard {shard} of {tid!r}")))
        state.blocked.clear()  # answered: a write still landing on this shard must not retry them
        for completion in state.completing.values():
            effects += [Reply(ticket, answer(False)) for ticket, answer in completion.waiters]
        return effects

    def owned_shards(self) -> list[ShardState]:
        return list(self._shards.values())

    def waiting_calls(self) -> int:
        """How many requests are held until an id's write or phase two lands, or producer ids are reserved."""
        return len(self._waiting_calls)

    def owns(self, shard: int, coordinator_epoch: int) -> bool:
        state = self._shards.get(shard)
        return state is not None and state.coordinator_epoch == coordinator_epoch

    # ------------------------------------------------------------ producer ids

    def producer_ids_reserved(self, first: int, end: int, now: int) -> list[Effect]:
        """A block of ids [first, end) is reserved for this node: serve the calls waiting for one."""
        self._ids_requested = False
        if end > first:
            self._producer_ids.append(range(first, end))
        waiting, self._pid_waiters = self._pid_waiters, []
        effects: list[Effect] = []
        for call in waiting:
            self._waiting_calls.pop(call.ticket, None)
            effects += self._dispatch(call, now)
        return effects

    def producer_ids_failed(self, error: KafkaError, now: int) -> list[Effect]:
        """Reserving ids failed: the waiting calls hear COORDINATOR_NOT_AVAILABLE (their clients retry)."""
        self._ids_requested = False
        waiting, self._pid_waiters = self._pid_waiters, []
        for call in waiting:
            self._waiting_calls.pop(call.ticket, None)
        return [Reply(call.ticket, error=CoordinatorNotAvailableError(
            f"[COORDINATOR_NOT_AVAILABLE] could not reserve producer ids: {error}")) for call in waiting]

    def _take_producer_id(self) -> int:
        while self._producer_ids and not self._producer_ids[0]:
            self._producer_ids.popleft()
        if not self._producer_ids:
            raise _NeedProducerIds()
        block = self._producer_ids[0]
        self._producer_ids[0] = block[1:]
        return block[0]

    def _producer_ids_left(self) -> int:
        return sum(len(block) for block in self._producer_ids)

    # ------------------------------------------------------------ requests

    def request(self, ticket: int, request: Any, now: int, *, transaction_version: int = 2) -> list[Effect]:
        """Take a request (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, JoinBatchTxn,
        EndBatchTxn); its answer is a Reply with this ticket, among the effects now or later."""
        return self._dispatch(_Call(ticket, request, transaction_version), now)

    def _dispatch(self, call: _Call, now: int) -> list[Effect]:
        handler = self._handlers.get(type(call.request))
        effects: list[Effect] = []
        try:
            if handler is None:
                raise InvalidRequestError(f"[INVALID_REQUEST] {type(call.request).__name__} is not a coordinator request")
            effects = handler(self, call, now)
        except _Wait as wait:
            effects = self._park(call, wait, now)
        except _NeedProducerIds:
            effects = self._park_for_producer_ids(call, now)
        except KafkaError as exc:
            effects = [Reply(call.ticket, error=exc)]
        if not self._ids_requested and self._producer_ids_left() < PRODUCER_IDS_LOW_WATER:
            self._ids_requested = True
            effects.append(ReserveProducerIds())
        return effects

    def _answer_adds(self, adds: list[_HeldAdd]) -> list[Effect]:
        return [self._reply(call, _partition_results(wanted, {}, 0)) for call, wanted in adds]

    def _reply(self, call: _Call, response: Any) -> Reply:
        return Reply(call.ticket, call.adapt(response) if call.adapt is not None else response)

    def _init_producer_id(self, call: _Call, now: int) -> list[Effect]:
        req: pb.InitProducerIdRequest = call.request
        if not req.HasField("transactional_id"):
            return [self._reply(call, pb.InitProducerIdResponse(producer_id=self._take_producer_id(),
                                                                producer_epoch=0))]
        tid = req.transactional_id
        self._validate_id(tid)
        self._validate_timeout(req.transaction_timeout_ms)
        shard = self._owned(tid)
        self._check_not_pending(shard, tid)
        current = self._entry(shard, tid, TxnMetadata)
        if current is None:
            new = TxnMetadata(tid, self._take_producer_id(), 0, req.transaction_timeout_ms, S.EMPTY,
                              last_update_time_ms=now)
        elif current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise ConcurrentTransactionsError(
                f"[CONCURRENT_TRANSACTIONS] {tid!r} is completing its last transaction ({current.state}); retry")
        elif current.state == S.ONGOING:
            # A new instance fences the old one: abort its transaction at a bumped epoch; the
            # client retries and then gets its own epoch (§4 InitProducerId, Ongoing).
            fence = self._fenced_abort(current, now)
            retry = ConcurrentTransactionsError(
                f"[CONCURRENT_TRANSACTIONS] aborting the open transaction of {tid!r} left by a fenced producer; retry")
            return self._write(shard, fence, now, lambda t: [Reply(call.ticket, error=retry)]
                               + self._start_completion(shard, fence, t), self._fail_call(call))
        else:
            new = self._bump_for_init(current, req, now)
            if new is current:  # a recognised retry: nothing to write
                return [self._reply(call, pb.InitProducerIdResponse(producer_id=new.producer_id,
                                                                    producer_epoch=new.producer_epoch))]
        answer = pb.InitProducerIdResponse(producer_id=new.producer_id, producer_epoch=new.producer_epoch)
        return self._write(shard, new, now, lambda t: [self._reply(call, answer)], self._fail_call(call))

    def _add_partitions(self, call: _Call, now: int) -> list[Effect]:
        req: pb.AddPartitionsToTxnRequest = call.request
        tid = req.transactional_id
        self._validate_id(tid)
        if not req.partitions:
            raise InvalidRequestError("[INVALID_REQUEST] AddPartitionsToTxn names no partition")
        wanted = [TopicPartition(p.topic, p.partition) for p in req.partitions]
        invalid = [tp for tp in wanted if not self._partition_exists(tp)]
        if invalid:
            return [self._reply(call, _partition_results(
                wanted, {tp: UnknownTopicOrPartitionError.errno for tp in invalid}, OperationNotAttemptedError.errno))]
        shard = self._owned(tid)
        existing = shard.entries.get(tid)
        if isinstance(existing, BatchTxn):
            if req.verify_only:
                errors, other = batches.verify(existing, req, wanted)
                return [self._reply(call, _partition_results(wanted, errors, other))]
            return self._add_batch_partitions(call, shard, req, wanted, now)
        if req.verify_only:
            return [self._reply(call, self._verify(shard, req, wanted))]
        self._check_producer(shard, tid, req.producer_id, req.producer_epoch)
        if call.may_wait and not self._settled(shard, tid):
            # the previous transaction's markers take about a millisecond: hold the first AddPartitions of
            # the next one instead of answering CONCURRENT_TRANSACTIONS, which clients back off 20 ms from
            raise _Wait(shard, tid, PREVIOUS_END_HOLD_MS)
        current = self._check_producer(shard, tid, req.producer_id, req.producer_epoch)
        self._check_not_pending(shard, tid)
        new = _with_partitions(current, wanted, now)
        answer = _partition_results(wanted, {}, 0)
        if new is current:
            return [self._reply(call, answer)]
        return self._write(shard, new, now, lambda t: [self._reply(call, answer)], self._fail_call(call))

    def _add_batch_partitions(self, call: _Call, shard: ShardState, req: pb.AddPartitionsToTxnRequest,
                              wanted: list[TopicPartition], now: int) -> list[Effect]:
        current = self._batch_when_settled(call, shard, req.transactional_id)
        assert current is not None
        new = batches.add_partitions(current, req, wanted, now)
        answer = _partition_results(wanted, {}, 0)
        if new is None:
            return [self._reply(call, answer)]
        return self._write(shard, new, now, lambda t: [self._reply(call, answer)], self._fail_call(call))

    def _add_offsets(self, call: _Call, now: int) -> list[Effect]:
        req: pb.AddOffsetsToTxnRequest = call.request
        if not req.group_id:
            raise InvalidRequestError("[INVALID_REQUEST] AddOffsetsToTxn needs a group id")
        offsets_partition = partition_for(req.group_id, self.offsets_shards)

        def adapt(response: pb.AddPartitionsToTxnResponse) -> pb.AddOffsetsToTxnResponse:
            for result in response.results:
                if result.error_code:
                    return pb.AddOffsetsToTxnResponse(error_code=result.error_code, error_message=result.error_message)
            return pb.AddOffsetsToTxnResponse()

        inner = pb.AddPartitionsToTxnRequest(
            transactional_id=req.transactional_id, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
            partitions=[pb.TopicPartitionRef(topic=CONSUMER_OFFSETS_TOPIC, partition=offsets_partition)])
        return self._dispatch(_Call(call.ticket, inner, call.version, call.deadline, call.may_wait, adapt), now)

    def _end_txn(self, call: _Call, now: int) -> list[Effect]:
        """Prepare the commit or abort, durably, then start phase two.

        The version is the client's: 2 (txnsim's producer, KIP-890) bumps the epoch at every end; 1 (Kafka
        clients, EndTxn < v5) keeps it, so the epoch moves only with InitProducerId, a fence or a timeout
        abort, and a retry is recognised by the same epoch finding the outcome already decided.
        """
        req: pb.EndTxnRequest = call.request
        version = call.version
        tid = req.transactional_id
        self._validate_id(tid)
        shard = self._owned(tid)
        outcome = "commit" if req.committed else "abort"
        current = self._entry(shard, tid, TxnMetadata)
        if current is None:
            raise InvalidProducerIdMappingError(
                f"[INVALID_PRODUCER_ID_MAPPING] {tid!r} is unknown; call init_transactions() first")
        if version >= 2:
            # Transactions V2: a retry finds the epoch already bumped by the EndTxn it repeats (§4.7, §12.12).
            retry = self._recognise_end_txn_retry(current, req)
            if retry is not None:
                return [self._reply(call, retry)]
        self._check_producer(shard, tid, req.producer_id, req.producer_epoch)
        self._check_not_pending(shard, tid)
        if version < 2:  # V1: a retry comes at the same epoch
            decided = _end_already_decided(current, req.committed)
            if decided is not None:
                return [self._reply(call, decided)]
        if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise ConcurrentTransactionsError(f"[CONCURRENT_TRANSACTIONS] {tid!r} is already ending; retry")
        if current.state != S.ONGOING and (req.committed or version < 2):
            raise InvalidTxnStateError(
                f"[INVALID_TXN_STATE] cannot {outcome} {tid!r}: it has no ongoing transaction "
                f"(state {current.state})")
        target = S.PREPARE_COMMIT if req.committed else S.PREPARE_ABORT
        if version >= 2:
            prepared = self._prepare_end(current, target, now)
        else:
            prepared = current.transit(target, now, ended_by_fence=False, transaction_version=1)
        pid, new_epoch = _client_identity(prepared)
        answer = pb.EndTxnResponse(producer_id=pid, producer_epoch=new_epoch)

        def prepared_durably(t: int) -> list[Effect]:
            log.debug("%s: %s prepared at epoch %d (transactions V%d)", tid, outcome, prepared.producer_epoch, version)
            return [self._reply(call, answer)] + self._start_completion(shard, prepared, t)

        return self._write(shard, prepared, now, prepared_durably, self._fail_call(call))

    def _join_batch(self, call: _Call, now: int) -> list[Effect]:
        req: pb.JoinBatchTxnRequest = call.request
        tid = req.batch_txn_id
        self._validate_id(tid)
        if req.batch_id < 0:
            raise InvalidRequestError(f"[INVALID_REQUEST] batch id {req.batch_id} is negative")
        self._validate_timeout(req.transaction_timeout_ms)
        shard = self._owned(tid)
        current = self._batch_when_settled(call, shard, tid)
        plan = batches.plan_join(current, req, now, self._take_producer_id)
        if plan.already_committed:
            return [self._reply(call, pb.JoinBatchTxnResponse(already_committed=True))]
        if plan.abandoned is not None:
            abandoned = plan.abandoned
            log.info("%s: aborting batch %d, abandoned for batch %d", tid, abandoned.batch_id, req.batch_id)
            retry = ConcurrentTransactionsError(
                f"[CONCURRENT_TRANSACTIONS] aborting the abandoned batch {abandoned.batch_id} of {tid!r}; retry")
            return self._write(shard, abandoned, now, lambda t: [Reply(call.ticket, error=retry)]
                               + self._start_completion(shard, abandoned, t), self._fail_call(call))
        assert plan.joined is not None and plan.participant is not None
        joined = plan.participant
        answer = pb.JoinBatchTxnResponse(producer_id=joined.producer_id, producer_epoch=joined.producer_epoch)
        return self._write(shard, plan.joined, now, lambda t: [self._reply(call, answer)], self._fail_call(call))

    def _end_batch(self, call: _Call, now: int) -> list[Effect]:
        req: pb.EndBatchTxnRequest = call.request
        tid = req.batch_txn_id
        self._validate_id(tid)
        shard = self._owned(tid)
        current = self._batch_when_settled(call, shard, tid)
        if self._planted_bug is PlantedBug.COMMIT_EVERY_ATTEMPT and req.committed and current is not None:
            req = pb.EndBatchTxnRequest(batch_txn_id=req.batch_txn_id, batch_id=req.batch_id, committed=True,
                                        winners=[p.producer_id for p in current.participants], wait_ms=req.wait_ms)
        plan = batches.plan_end(current, req, now)

        def answer(completed: bool) -> pb.EndBatchTxnResponse:
            return pb.EndBatchTxnResponse(repeated_commit=plan.repeated and req.committed, completed=completed)

        if plan.decided is None:
            if not req.committed and plan.repeated:
                log.info("%s: abort of batch %d ignored: it committed", tid, req.batch_id)
            completion = shard.completing.get(tid) if plan.await_commit else None
            if completion is None or req.wait_ms <= 0:
                return [self._reply(call, answer(completion is None))]
            return self._await_completion(call, completion, answer, now)
        decided = plan.decided
        log.info("%s: batch %d %s with %d of %d participants", tid, req.batch_id,
                 "prepared to commit" if req.committed else "prepared to abort", len(decided.winners),
                 len(decided.participants))

        def decided_durably(t: int) -> list[Effect]:
            effects = self._start_completion(shard, decided, t)
            completion = shard.completing.get(tid)
            if completion is None or completion.prepared is not decided:  # completed at once (nothing to mark)
                return effects + [self._reply(call, answer(True))]
            if req.wait_ms <= 0:
                return effects + [self._reply(call, answer(False))]
            return effects + self._await_completion(call, completion, answer, t)

        return self._write(shard, decided, now, decided_durably, self._fail_call(call))

    _handlers: dict[type, Callable[[TxnCoordinatorCore, _Call, int], list[Effect]]] = {
        pb.InitProducerIdRequest: _init_producer_id,
        pb.AddPartitionsToTxnRequest: _add_partitions,
        pb.AddOffsetsToTxnRequest: _add_offsets,
        pb.EndTxnRequest: _end_txn,
        pb.JoinBatchTxnRequest: _join_batch,
        pb.EndBatchTxnRequest: _end_batch,
    }

    # ------------------------------------------------------------ queries (no effects)

    def list_transactions(self, req: pb.ListTransactionsRequest) -> pb.ListTransactionsResponse:
        states = set(req.state_filters)
        pids = set(req.producer_id_filters)
        listings: list[pb.TransactionListing] = []
        for shard in self._shards.values():
            for meta in shard.entries.values():
                pid = meta.producer_id if isinstance(meta, TxnMetadata) else -1
                if (states and meta.state.value not in states) or (pids and pid not in pids):
                    continue
                listings.append(pb.TransactionListing(transactional_id=meta.transactional_id,
                                                      producer_id=pid, state=meta.state.value))
        listings.sort(key=lambda listing: listing.transactional_id)
        return pb.ListTransactionsResponse(transactions=listings)

    def describe_transactions(self, req: pb.DescribeTransactionsRequest,
                              node_id: int) -> pb.DescribeTransactionsResponse:
        out = []
        for tid in req.transactional_ids:
            try:
                shard = self._owned(tid)
                meta = shard.entries.get(tid)
                if meta is None:
                    raise TransactionalIdNotFoundError(
                        f"[TRANSACTIONAL_ID_NOT_FOUND] transactional id {tid!r} is unknown")
                out.append(pb.TransactionDescription(
                    transactional_id=tid, state=meta.state.value,
                    producer_id=meta.producer_id if isinstance(meta, TxnMetadata) else -1,
                    producer_epoch=meta.producer_epoch if isinstance(meta, TxnMetadata) else -1,
                    timeout_ms=meta.timeout_ms, start_time_ms=meta.start_time_ms,
                    last_update_time_ms=meta.last_update_time_ms, coordinator_id=node_id,
                    partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)
                                for tp in sorted(meta.partitions)]))
            except KafkaError as exc:
                out.append(pb.TransactionDescription(transactional_id=tid, error_code=code_of(exc),
                                                     error_message=str(exc)))
        return pb.DescribeTransactionsResponse(transactions=out)

    # ------------------------------------------------------------ outcomes of effects

    def entry_written(self, write_id: int, error: KafkaError | None, now: int) -> list[Effect]:
        """The write `write_id` is durable (error None) or failed; install it if the shard is still ours."""
        write = self._writes.pop(write_id, None)
        if write is None:
            return []
        shard, tid = write.shard, write.transactional_id
        shard.pending.pop(tid, None)
        owner = self._shards.get(shard.shard) is shard
        if error is not None:
            if getattr(error, "invalid_metadata", False) or isinstance(error, KafkaStorageError):
                failure: KafkaError = NotCoordinatorError(f"[NOT_COORDINATOR] lost the shard of {tid!r} while writing")
            else:
                failure = CoordinatorNotAvailableError(f"[COORDINATOR_NOT_AVAILABLE] could not log {tid!r}: {error}")
            effects = write.on_failure(failure, now)
        elif not owner:
            effects = write.on_failure(NotCoordinatorError(
                f"[NOT_COORDINATOR] the shard of {tid!r} moved during the write"), now)
        else:
            if write.value is None:
                shard.entries.pop(tid, None)
            else:
                shard.entries[tid] = write.value
            effects = write.on_success(now)
        return effects + self._wake(shard, tid, now)

    def markers_written(self, send_id: int, acknowledged: Iterable[Owed], now: int) -> list[Effect]:
        """One send of markers came back: those acknowledged are done; the rest go again after a backoff."""
        sent = self._sends.pop(send_id, None)
        if sent is None:
            return []
        shard, tid, completion = sent
        completion.sending = False
        if self._shards.get(shard.shard) is not shard or shard.completing.get(tid) is not completion:
            return []  # the shard moved: its new owner finishes phase two after its load
        completion.owed -= set(acknowledged)
        if completion.owed:
            completion.attempts += 1
            delay = min(MARKER_BACKOFF_MS[0] * 2 ** (completion.attempts - 1), MARKER_BACKOFF_MS[1])
            return [StartTimer(now + delay, ("markers", shard.shard, shard.coordinator_epoch, tid))]
        return self._write_complete(shard, completion, now)

    def timer_fired(self, key: TimerKey, now: int) -> list[Effect]:
        kind = key[0]
        if kind == "wait":
            return self._wait_expired(key[1], now)
        if kind in ("markers", "complete"):
            _, shard_id, coordinator_epoch, tid = key
            shard = self._shards.get(shard_id)
            if shard is None or shard.coordinator_epoch != coordinator_epoch:
                return []
            completion = shard.completing.get(tid)
            if completion is None or completion.sending or tid in shard.pending:
                return []
            return self._send_markers(shard, completion, now)
        if kind == "answer":
            return self._completion_wait_expired(key[1], now)
        return []

    # ------------------------------------------------------------ periodic work

    def abort_timed_out(self, now: int) -> list[Effect]:
        """Fence and abort every Ongoing transaction past its timeout."""
        effects: list[Effect] = []
        for shard in list(self._shards.values()):
            if shard.status is ShardStatus.LOADING:
                continue
            if shard.future_starts:  # forget ids whose transaction ended meanwhile
                for tid in [t for t in shard.future_starts
                            if (m := shard.entries.get(t)) is None or m.state != S.ONGOING]:
                    del shard.future_starts[tid]
            expired = [m for m in shard.entries.values()
                       if m.state == S.ONGOING and m.transactional_id not in shard.pending
                       and _timeout_start(shard, m, now) + m.timeout_ms < now]
            for meta in sorted(expired, key=lambda m: m.transactional_id):
                fence = batches.timed_out(meta, now) if isinstance(meta, BatchTxn) else self._fenced_abort(meta, now)
                log.info("aborting %r: open longer than its timeout (%d ms)", fence.transactional_id, fence.timeout_ms)

                effects += self._write(shard, fence, now, functools.partial(self._start_completion, shard, fence),
                                       functools.partial(_timeout_abort_failed, fence.transactional_id))
        return effects

    def expire_transactional_ids(self, now: int) -> list[Effect]:
        """Tombstone ids idle longer than transactional_id_expiration_ms (only when not in a transaction)."""
        effects: list[Effect] = []
        for shard in list(self._shards.values()):
            if shard.status is ShardStatus.LOADING:
                continue
            # batch transaction ids never expire: their last committed batch id must outlive any replay
            idle = [m for m in shard.entries.values()
                    if isinstance(m, TxnMetadata) and m.is_complete and m.transactional_id not in shard.pending
                    and m.last_update_time_ms + self.expiration_ms < now]
            for meta in sorted(idle, key=lambda m: m.transactional_id):
                meta.transit(S.DEAD, now)  # checks the table; Dead is never installed
                effects += self._write_tombstone(shard, meta, now)
        return effects

    # ------------------------------------------------------------ writes and phase two

    def _write(self, shard: ShardState, value: Value, now: int, on_success: Callable[[int], list[Effect]],
               on_failure: Callable[[KafkaError, int], list[Effect]]) -> list[Effect]:
        return self._write_value(shard, value.transactional_id, value, value.state, now, on_success, on_failure)

    def _write_tombstone(self, shard: ShardState, meta: TxnMetadata, now: int) -> list[Effect]:
        """Remove an idle id: no other write of it can land meanwhile (it is pending), so the tombstone
        deletes exactly the value it was judged on."""
        return self._write_value(shard, meta.transactional_id, None, S.DEAD, now, lambda t: [], lambda error, t: [])

    def _write_value(self, shard: ShardState, tid: str, value: Value | None, target: TransactionState, now: int,
                     on_success: Callable[[int], list[Effect]],
                     on_failure: Callable[[KafkaError, int], list[Effect]],
                     passing: tuple[Value, ...] = ()) -> list[Effect]:
        shard.pending[tid] = target
        write_id = next(self._ids)
        self._writes[write_id] = _Write(shard, tid, value, on_success, on_failure)
        return [WriteEntry(write_id, shard.shard, shard.coordinator_epoch, tid, value, now, passing)]

    @staticmethod
    def _fail_call(call: _Call) -> Callable[[KafkaError, int], list[Effect]]:
        return lambda error, now: [Reply(call.ticket, error=error)]

    def _start_completion(self, shard: ShardState, prepared: Value, now: int) -> list[Effect]:
        if self._shards.get(shard.shard) is not shard:
            return []
        markers = batches.markers_for(prepared) if isinstance(prepared, BatchTxn) else [
            Marker(prepared.producer_id, prepared.producer_epoch, prepared.state == S.PREPARE_COMMIT,
                   prepared.partitions, 2 if prepared.transaction_version >= 2 else 1)]
        owed = {(marker, tp) for marker in markers for tp in marker.partitions}
        completion = _Completion(prepared, owed)
        shard.completing[prepared.transactional_id] = completion
        return self._send_markers(shard, completion, now)

    def _send_markers(self, shard: ShardState, completion: _Completion, now: int) -> list[Effect]:
        if not completion.owed:
            return self._write_complete(shard, completion, now)
        completion.sending = True
        send_id = next(self._ids)
        tid = completion.prepared.transactional_id
        self._sends[send_id] = (shard, tid, completion)
        owed = tuple(sorted(completion.owed, key=lambda o: (o[0].producer_id, o[1].topic, o[1].partition)))
        return [SendMarkers(send_id, shard.shard, shard.coordinator_epoch, tid, owed)]

    def _write_complete(self, shard: ShardState, completion: _Completion, now: int) -> list[Effect]:
        prepared = completion.prepared
        tid = prepared.transactional_id
        done = self._completed_value(prepared, now)

        def completed(t: int) -> list[Effect]:
            if shard.completing.get(tid) is completion:
                del shard.completing[tid]
            return [Reply(ticket, answer(True)) for ticket, answer in completion.waiters]

        def failed(error: KafkaError, t: int) -> list[Effect]:
            if isinstance(error, NotCoordinatorError) or self._shards.get(shard.shard) is not shard:
                return []  # the new owner completes it after its load
            completion.attempts += 1
            delay = min(MARKER_BACKOFF_MS[0] * 2 ** (completion.attempts - 1), MARKER_BACKOFF_MS[1])
            return [StartTimer(t + delay, ("complete", shard.shard, shard.coordinator_epoch, tid))]

        follower = self._next_transaction_start(shard, tid, done, now)
        if follower is None:
            return self._write(shard, done, now, completed, failed)
        adds, started = follower

        def both_durable(t: int) -> list[Effect]:
            return completed(t) + self._answer_adds(adds)

        def neither_durable(error: KafkaError, t: int) -> list[Effect]:
            for call, _wanted in adds:  # woken next, they wait again for the Complete* retry
                self._block(shard, tid, call)
            return failed(error, t)

        return self._write_value(shard, tid, started, started.state, now, both_durable, neither_durable,
                                 passing=(done,))

    def _next_transaction_start(self, shard: ShardState, tid: str, done: Value,
                                now: int) -> tuple[list[_HeldAdd], TxnMetadata] | None:
        """The calls held for this Complete* that start the next transaction (its first AddPartitionsToTxn
        calls, or AddOffsetsToTxn), with the Ongoing value they write; None if the first held call is
        anything else or would be refused (it then runs after Complete* lands, as before).

        Writing Complete* and that Ongoing in one batch saves a durable write on every transaction's path
        (the producer's next transaction waits for both) and changes nothing a reader of the log sees."""
        if not isinstance(done, TxnMetadata):
            return None
        return self._take_held_adds(shard, tid, done, now)

    def _take_held_adds(self, shard: ShardState, tid: str, base: TxnMetadata,
                        now: int) -> tuple[list[_HeldAdd], TxnMetadata] | None:
        """The leading run of held AddPartitionsToTxn calls (AddOffsetsToTxn's among them) that `base`
        accepts, taken off the waiting list, with the one value that adds all their partitions; None if
        the first held call is anything else or would be refused (it is then dispatched on its own).

        With the implicit add (KIP-890 part 2) every partition leader a transaction writes to adds its
        partitions at the same moment; one durable write answers them all, not one write each in turn."""
        calls = shard.blocked.get(tid)
        taken: list[_HeldAdd] = []
        value = base
        for call in calls or ():
            req = call.request
            if not isinstance(req, pb.AddPartitionsToTxnRequest) or req.verify_only or not req.partitions:
                break
            wanted = [TopicPartition(p.topic, p.partition) for p in req.partitions]
            if not all(self._partition_exists(tp) for tp in wanted):
                break
            try:
                value = _with_partitions(_producer_checked(value, tid, req.producer_id, req.producer_epoch),
                                         wanted, now)
            except KafkaError:
                break
            taken.append((call, wanted))
        if not calls or not taken:
            return None
        del calls[:len(taken)]
        if not calls:
            del shard.blocked[tid]
        for call, _wanted in taken:
            self._waiting_calls.pop(call.ticket, None)
        return taken, value

    def _completed_value(self, prepared: Value, now: int) -> Value:
        if isinstance(prepared, BatchTxn):
            return batches.completed(prepared, now)
        target = S.COMPLETE_COMMIT if prepared.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        changes: dict[str, Any] = {"partitions": frozenset(), "start_time_ms": -1}
        if prepared.next_producer_id != NO_PRODUCER_ID:
            changes.update(producer_id=prepared.next_producer_id, producer_epoch=0,
                           previous_producer_id=prepared.producer_id, next_producer_id=NO_PRODUCER_ID,
                           last_producer_epoch=NO_EPOCH)
        return prepared.transit(target, now, **changes)

    # ------------------------------------------------------------ waiting

    def _settled(self, shard: ShardState, tid: str) -> bool:
        current = shard.entries.get(tid)
        return tid not in shard.pending and not (
            isinstance(current, TxnMetadata) and current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT))

    def _batch_when_settled(self, call: _Call, shard: ShardState, tid: str) -> BatchTxn | None:
        """The batch's value once no other write of it is in flight (the call waits for that briefly)."""
        if tid in shard.pending:
            if call.may_wait:
                raise _Wait(shard, tid, BATCH_QUEUE_WAIT_MS)
            self._check_not_pending(shard, tid)
        return self._entry(shard, tid, BatchTxn)

    def _park(self, call: _Call, wait: _Wait, now: int) -> list[Effect]:
        self._block(wait.shard, wait.tid, call)
        if call.deadline is None:
            call.deadline = now + wait.hold_ms
            return [StartTimer(call.deadline, ("wait", call.ticket))]
        return []

    def _block(self, shard: ShardState, tid: str, call: _Call) -> None:
        shard.blocked.setdefault(tid, []).append(call)
        self._waiting_calls[call.ticket] = (shard, tid, call)

    def _park_for_producer_ids(self, call: _Call, now: int) -> list[Effect]:
        self._pid_waiters.append(call)
        self._waiting_calls[call.ticket] = (None, "", call)
        effects: list[Effect] = []
        if not self._ids_requested:
            self._ids_requested = True
            effects.append(ReserveProducerIds())
        if call.deadline is None:
            call.deadline = now + PRODUCER_IDS_WAIT_MS
            effects.append(StartTimer(call.deadline, ("wait", call.ticket)))
        return effects

    def _wake(self, shard: ShardState, tid: str, now: int) -> list[Effect]:
        """The id's write landed: retry the calls waiting on it (each may wait again, until its deadline);
        the adds at the head of the queue go together, in one write."""
        effects: list[Effect] = []
        current = shard.entries.get(tid)
        if isinstance(current, TxnMetadata) and self._settled(shard, tid):
            held = self._take_held_adds(shard, tid, current, now)
            if held is not None:
                adds, value = held
                if value is current:
                    effects += self._answer_adds(adds)
                else:
                    effects += self._write(shard, value, now, lambda t: self._answer_adds(adds),
                                           lambda error, t: [Reply(call.ticket, error=error) for call, _ in adds])
        calls = shard.blocked.pop(tid, [])
        for call in calls:
            self._waiting_calls.pop(call.ticket, None)
            effects += self._dispatch(call, now)
        return effects

    def _wait_expired(self, ticket: int, now: int) -> list[Effect]:
        waiting = self._waiting_calls.pop(ticket, None)
        if waiting is None:
            return []
        shard, tid, call = waiting
        if shard is None:
            self._pid_waiters.remove(call)
            return [Reply(ticket, error=CoordinatorNotAvailableError(
                "[COORDINATOR_NOT_AVAILABLE] no producer id could be reserved in time; retry"))]
        shard.blocked[tid].remove(call)
        if not shard.blocked[tid]:
            del shard.blocked[tid]
        call.may_wait = False  # answer now with what the state says (CONCURRENT_TRANSACTIONS, usually)
        return self._dispatch(call, now)

    def _await_completion(self, call: _Call, completion: _Completion, answer: Callable[[bool], Any],
                          now: int) -> list[Effect]:
        completion.waiters.append((call.ticket, answer))
        req: pb.EndBatchTxnRequest = call.request
        return [StartTimer(now + max(req.wait_ms, 0), ("answer", call.ticket))]

    def _completion_wait_expired(self, ticket: int, now: int) -> list[Effect]:
        for shard in self._shards.values():
            for completion in shard.completing.values():
                for waiter in completion.waiters:
                    if waiter[0] == ticket:
                        completion.waiters.remove(waiter)
                        return [Reply(ticket, waiter[1](False))]
        return []

    # ------------------------------------------------------------ transitions

    def _bump_for_init(self, current: TxnMetadata, req: pb.InitProducerIdRequest, now: int) -> TxnMetadata:
        if req.producer_id >= 0:  # KIP-360: the caller names the pid/epoch it has
            if req.producer_id == current.producer_id and req.producer_epoch == current.last_producer_epoch:
                return current  # a retry of the bump that already happened
            if req.producer_id != current.producer_id or req.producer_epoch != current.producer_epoch:
                raise ProducerFencedError(
                    f"[PRODUCER_FENCED] {current.transactional_id!r} has producer {current.producer_id} epoch "
                    f"{current.producer_epoch}, not {req.producer_id}/{req.producer_epoch}")
        if current.producer_epoch >= MAX_CLIENT_EPOCH:
            return current.transit(S.EMPTY, now, producer_id=self._take_producer_id(), producer_epoch=0,
                                   previous_producer_id=current.producer_id, next_producer_id=NO_PRODUCER_ID,
                                   timeout_ms=req.transaction_timeout_ms, partitions=frozenset(),
                                   start_time_ms=-1, last_producer_epoch=NO_EPOCH, ended_by_fence=False)
        return current.transit(S.EMPTY, now, producer_epoch=current.producer_epoch + 1, ended_by_fence=False,
                               last_producer_epoch=current.producer_epoch, timeout_ms=req.transaction_timeout_ms,
                               partitions=frozenset(), start_time_ms=-1)

    @staticmethod
    def _fenced_abort(current: TxnMetadata, now: int) -> TxnMetadata:
        """PrepareEpochFence (never persisted) then PrepareAbort at the bumped epoch."""
        fence = current.transit(S.PREPARE_EPOCH_FENCE, now, producer_epoch=current.producer_epoch + 1,
                                last_producer_epoch=current.producer_epoch, ended_by_fence=True,
                                transaction_version=2)
        return fence.transit(S.PREPARE_ABORT, now)

    def _prepare_end(self, current: TxnMetadata, target: TransactionState, now: int) -> TxnMetadata:
        """Transactions V2: every end bumps the epoch; on overflow the next pid takes over at Complete*."""
        if self._planted_bug is PlantedBug.NO_EPOCH_BUMP:
            return current.transit(target, now, ended_by_fence=False, transaction_version=1)
        if current.producer_epoch + 1 >= MAX_CLIENT_EPOCH:
            return current.transit(target, now, producer_epoch=current.producer_epoch + 1,
                                   last_producer_epoch=current.producer_epoch, ended_by_fence=False,
                                   next_producer_id=self._take_producer_id(), transaction_version=2)
        return current.transit(target, now, producer_epoch=current.producer_epoch + 1,
                               last_producer_epoch=current.producer_epoch, ended_by_fence=False,
                               transaction_version=2)

    @staticmethod
    def _recognise_end_txn_retry(current: TxnMetadata, req: pb.EndTxnRequest) -> pb.EndTxnResponse | None:
        if current.ended_by_fence:
            return None  # the bump was a fence: the caller is the fenced producer, not a retry
        bumped_from_request = (
            (req.producer_id == current.producer_id and current.producer_epoch == req.producer_epoch + 1)
            or (req.producer_id == current.previous_producer_id and current.producer_epoch == 0
                and current.next_producer_id == NO_PRODUCER_ID))
        if not bumped_from_request:
            return None
        return _end_already_decided(current, req.committed)

    # ------------------------------------------------------------ checks

    def _owned(self, tid: str) -> ShardState:
        shard_id = self.shard_of(tid)
        shard = self._shards.get(shard_id)
        if shard is None:
            if self._assigned_here(shard_id):
                raise CoordinatorLoadInProgressError(
                    f"[COORDINATOR_LOAD_IN_PROGRESS] this node is taking shard {shard_id} of {tid!r} over; retry")
            raise NotCoordinatorError(f"[NOT_COORDINATOR] this node does not own shard {shard_id} of {tid!r}")
        if shard.status is ShardStatus.LOADING:
            raise still_loading(f"shard {shard_id}")
        return shard

    @staticmethod
    def _entry(shard: ShardState, tid: str, kind: type[V]) -> V | None:
        """The value of `tid` if it is of `kind` (or absent); transactional ids and batch
        transaction ids share the shard's keys, and one is never used as the other."""
        current = shard.entries.get(tid)
        if current is not None and not isinstance(current, kind):
            raise InvalidRequestError(
                f"[INVALID_REQUEST] {tid!r} is {_KIND_NAMES[type(current)]}, not {_KIND_NAMES[kind]}")
        return current

    @staticmethod
    def _check_not_pending(shard: ShardState, tid: str) -> None:
        if tid in shard.pending:
            raise ConcurrentTransactionsError(
                f"[CONCURRENT_TRANSACTIONS] {tid!r} has a transition to {shard.pending[tid]} in flight; retry")

    @staticmethod
    def _check_producer(shard: ShardState, tid: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        return _producer_checked(shard.entries.get(tid), tid, producer_id, producer_epoch)

    @staticmethod
    def _verify(shard: ShardState, req: pb.AddPartitionsToTxnRequest,
                wanted: list[TopicPartition]) -> pb.AddPartitionsToTxnResponse:
        """KIP-890 part 1: a partition leader asks whether the partition is in this txn."""
        current = shard.entries.get(req.transactional_id)
        if not isinstance(current, TxnMetadata) or current.producer_id != req.producer_id:
            code = InvalidProducerIdMappingError.errno
            return _partition_results(wanted, {tp: code for tp in wanted}, code)
        if current.producer_epoch != req.producer_epoch:
            code = InvalidProducerEpochError.errno
            return _partition_results(wanted, {tp: code for tp in wanted}, code)
        missing = {tp: TransactionAbortableError.errno for tp in wanted
                   if current.state != S.ONGOING or tp not in current.partitions}
        return _partition_results(wanted, missing, 0)

    def _partition_exists(self, tp: TopicPartition) -> bool:
        if tp.topic == CONSUMER_OFFSETS_TOPIC:
            return 0 <= tp.partition < self.offsets_shards
        partitions = self._partitions_for(tp.topic)
        return partitions is not None and 0 <= tp.partition < partitions

    def _validate_timeout(self, timeout_ms: int) -> None:
        if not 1 <= timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"[INVALID_TRANSACTION_TIMEOUT] transaction timeout {timeout_ms} ms is outside "
                f"1..{self.max_timeout_ms} ms (transaction_max_timeout_ms)")

    @staticmethod
    def _validate_id(tid: str) -> None:
        if not tid:
            raise InvalidRequestError("[INVALID_REQUEST] the transactional id is empty")
        if len(tid) > MAX_TRANSACTIONAL_ID_LENGTH:
            raise InvalidRequestError(
                f"[INVALID_REQUEST] the transactional id is {len(tid)} characters; the limit is "
                f"{MAX_TRANSACTIONAL_ID_LENGTH}")


def _timeout_abort_failed(tid: str, error: KafkaError, now: int) -> list[Effect]:
    log.warning("timeout abort of %r failed, will retry: %s", tid, error)
    return []


def _producer_checked(current: Value | None, tid: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
    """`current` if the caller's producer id and epoch are its own; otherwise the error Kafka answers."""
    if not isinstance(current, TxnMetadata) or current.producer_id != producer_id:
        raise InvalidProducerIdMappingError(
            f"[INVALID_PRODUCER_ID_MAPPING] producer id {producer_id} does not belong to {tid!r}; "
            "call init_transactions() first")
    if current.producer_epoch != producer_epoch:
        raise ProducerFencedError(
            f"[PRODUCER_FENCED] transactional id {tid!r} was fenced by a newer producer "
            f"(epoch {current.producer_epoch} > {producer_epoch}); create a new Producer")
    return current


def _with_partitions(current: TxnMetadata, wanted: list[TopicPartition], now: int) -> TxnMetadata:
    """The value after AddPartitionsToTxn of `wanted`: `current` itself if they are all in its ongoing
    transaction, else Ongoing with them added (a new transaction starts now)."""
    if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        raise ConcurrentTransactionsError(
            f"[CONCURRENT_TRANSACTIONS] {current.transactional_id!r} is still completing its previous "
            "transaction; retry")
    if current.state == S.ONGOING and set(wanted) <= current.partitions:
        return current
    start = current.start_time_ms if current.state == S.ONGOING else now
    return current.transit(S.ONGOING, now, partitions=current.partitions | set(wanted), start_time_ms=start)


def _client_identity(meta: TxnMetadata) -> tuple[int, int]:
    """The pid/epoch the client uses next: the rotated pid at epoch 0 if one is reserved."""
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.next_producer_id, 0
    return meta.producer_id, meta.producer_epoch


def _end_already_decided(current: TxnMetadata, committed: bool) -> pb.EndTxnResponse | None:
    """The answer to an EndTxn retried after its outcome was decided: NONE once that outcome is complete, as
    Kafka answers; None if `current` holds no decision. Raises CONCURRENT_TRANSACTIONS while the same outcome
    is still completing and INVALID_TXN_STATE if the other one was decided."""
    same_outcome_done = S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT
    same_outcome_pending = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
    if current.state == same_outcome_done:
        return pb.EndTxnResponse(producer_id=current.producer_id, producer_epoch=current.producer_epoch)
    if current.state == same_outcome_pending:
        raise ConcurrentTransactionsError(
            f"[CONCURRENT_TRANSACTIONS] the {same_outcome_pending} of {current.transactional_id!r} is completing")
    if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        raise InvalidTxnStateError(
            f"[INVALID_TXN_STATE] {current.transactional_id!r} already ended with {current.state}")
    return None


def _partition_results(wanted: list[TopicPartition], errors: dict[TopicPartition, int],
                       other_code: int) -> pb.AddPartitionsToTxnResponse:
    results = []
    for tp in wanted:
        code = errors.get(tp, other_code if errors else 0)
        results.append(pb.PartitionError(topic=tp.topic, partition=tp.partition, error_code=code))
    return pb.AddPartitionsToTxnResponse(results=results)


def _timeout_start(shard: ShardState, meta: Value, now: int) -> int:
    """When `meta`'s transaction started, for its timeout. A start stamped later than this clock reads (by the
    node that owned the shard before, or by this one before its clock stepped back) counts from when this
    coordinator first saw it so: a clock behind by a minute would otherwise hold the LSO of every partition of
    the transaction a minute past its timeout. Kafka trusts the stamp; a skewed clock is a fault txnsim's
    simulator injects."""
    start = meta.start_time_ms
    seen = shard.future_starts.get(meta.transactional_id)
    if seen is not None and seen[0] == start:
        return seen[1]  # even once this clock has passed the stamp
    if start <= now:
        return start
    shard.future_starts[meta.transactional_id] = (start, now)
    return now
