"""The transactional producer's coordinator RPCs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit and EndTxn, each with its retry policy and one branch per kind of error.

Blocking calls run in the caller's thread, retried with tenacity (client.transport.retrying)
until the caller's deadline (max_block_ms); AddPartitionsToTxn is sent by the sender thread,
which only builds the request and hands the answer to `handle_add_partitions` here. Every
error lands in the TransactionManager through error_policy before it is raised.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from tenacity import RetryCallState

from client.cluster import GROUP, TRANSACTION, ClusterClient
from client.transport import Deadline, Stubs, call, retrying
from producer.config import ProducerConfig
from producer.error_policy import Action, as_fatal, classify_coordinator_error
from producer.transaction_manager import TransactionManager
from proto import txnsim_pb2 as pb
from proto.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    KafkaError,
    KafkaTimeoutError,
    OperationNotAttemptedError,
    UnknownProducerIdError,
    for_code,
    needs_rediscovery,
    raise_for,
)
from proto.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")

#: CONCURRENT_TRANSACTIONS right after a commit means the coordinator is still writing the last
#: transaction's markers, which takes a few milliseconds: poll quickly (2, 4, 8, 16, 20 ms; Kafka
#: uses a flat 20 ms for AddPartitions) before falling back to the retry_backoff_ms schedule
QUICK_RETRIES = 6
EXPECTED_WHILE_COMPLETING = (ConcurrentTransactionsError, CoordinatorLoadInProgressError)


def completing_backoff_s(attempt: int) -> float | None:
    """The quick poll's delay before retry `attempt` (1-based), or None once it is used up."""
    return min(0.002 * 2 ** (attempt - 1), 0.02) if attempt <= QUICK_RETRIES else None


def _quick_while_completing(wait: Callable[[RetryCallState], float]) -> Callable[[RetryCallState], float]:
    def quick_or_exponential(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        quick = completing_backoff_s(state.attempt_number)
        if isinstance(error, ConcurrentTransactionsError) and quick is not None:
            return quick
        return wait(state)
    return quick_or_exponential


class CoordinatorRequests:
    def __init__(self, config: ProducerConfig, cluster: ClusterClient, tm: TransactionManager) -> None:
        self._config = config
        self._cluster = cluster
        self._tm = tm
        self.request_timeout_s = config.request_timeout_ms / 1000

    @property
    def _tid(self) -> str:
        assert self._tm.transactional_id is not None
        return self._tm.transactional_id

    # ------------------------------------------------------------ the retry loop, in one place

    def _rpc_timeout(self, deadline: Deadline) -> float:
        return min(self.request_timeout_s, max(deadline.remaining(), 0.05))

    def _call(self, key_type: int, key: str, what: str, invoke: Callable[[Stubs, float], T],
              deadline: Deadline) -> T:
        """Run `invoke` against the coordinator of `key`, retrying retriable errors until `deadline`."""
        def before_retry(exc: BaseException) -> None:
            if needs_rediscovery(exc):  # moved, unreachable or silent: ask any node who the coordinator is now
                self._cluster.invalidate_coordinator(key_type, key)
            level = logging.DEBUG if isinstance(exc, EXPECTED_WHILE_COMPLETING) else logging.WARNING
            log.log(level, "%s for %s failed, retrying: %s", what, self._tm.describe(), exc)

        policy = retrying(deadline.remaining(), initial_backoff_s=self._config.retry_backoff_ms / 1000,
                          max_backoff_s=self._config.retry_backoff_max_ms / 1000, before_retry=before_retry)
        try:
            for attempt in policy.copy(wait=_quick_while_completing(policy.wait)):
                with attempt:
                    address = self._cluster.coordinator_address(key_type, key, deadline)
                    return invoke(self._cluster.stubs(address), self._rpc_timeout(deadline))
        except KafkaError as exc:
            if exc.retriable:
                if needs_rediscovery(exc):
                    self._cluster.invalidate_coordinator(key_type, key)
                raise KafkaTimeoutError(
                    f"{what} for {self._tm.describe()} did not complete within max_block_ms="
                    f"{self._config.max_block_ms}; last error: {exc.message}") from exc
            raise
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _record(self, error: KafkaError) -> KafkaError:
        """Move the state machine for a non-retriable coordinator error; returns what to raise."""
        action = classify_coordinator_error(error)
        if action is Action.FATAL:
            fatal = as_fatal(error, self._tm.transactional_id, self._tm.producer_id_and_epoch.epoch)
            self._tm.set_fatal_error(fatal)
            return fatal
        if action is Action.ABORTABLE:
            if isinstance(error, (InvalidProducerIdMappingError, UnknownProducerIdError)):
                # the coordinator lost our producer id: only InitProducerId(pid, epoch) after the abort
                # gives a usable one (Kafka's abortableErrorIfPossible)
                self._tm.require_epoch_bump()
            self._tm.set_abortable_error(error)
        return error

    def _guarded(self, key_type: int, key: str, what: str, invoke: Callable[[Stubs, float], T],
                 deadline: Deadline) -> T:
        try:
            return self._call(key_type, key, what, invoke, deadline)
        except KafkaTimeoutError:
            raise  # indefinite: the state stays, and the same call may be retried
        except KafkaError as exc:
            raise self._record(exc) from None

    # ------------------------------------------------------------ InitProducerId

    def init_producer_id(self, deadline: Deadline) -> None:
        """Get this transactional id's producer id and a new epoch (fencing older instances)."""
        current = self._tm.producer_id_and_epoch
        request = pb.InitProducerIdRequest(transactional_id=self._tid,
                                           transaction_timeout_ms=self._config.transaction_timeout_ms,
                                           producer_id=current.producer_id, producer_epoch=current.epoch)
        response = self._guarded(TRANSACTION, self._tid, "InitProducerId",
                                 lambda s, t: call(s.transactions.InitProducerId, request, t), deadline)
        log.debug("%s: InitProducerId -> pid %s epoch %s", self._tm.describe(), response.producer_id,
                  response.producer_epoch)
        self._tm.complete_init(response.producer_id, response.producer_epoch)

    def join_batch(self, request: pb.JoinBatchTxnRequest, deadline: Deadline) -> pb.JoinBatchTxnResponse:
        """Batch transactions (txnsim extension): a fresh producer id in the batch's transaction."""
        response: pb.JoinBatchTxnResponse = self._guarded(
            TRANSACTION, self._tid, "JoinBatchTxn", lambda s, t: call(s.transactions.JoinBatchTxn, request, t),
            deadline)
        return response

    # ------------------------------------------------------------ AddPartitionsToTxn (sent by the sender)

    def add_partitions_request(self, partitions: Iterable[TopicPartition]) -> pb.AddPartitionsToTxnRequest:
        pid = self._tm.producer_id_and_epoch
        return pb.AddPartitionsToTxnRequest(
            transactional_id=self._tid, producer_id=pid.producer_id, producer_epoch=pid.epoch,
            partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in partitions])

    def coordinator_address(self, deadline: Deadline) -> str:
        return self._cluster.coordinator_address(TRANSACTION, self._tid, deadline)

    def handle_add_partitions(self, partitions: list[TopicPartition], response: pb.AddPartitionsToTxnResponse | None,
                              error: KafkaError | None) -> float | None:
        """Apply one AddPartitionsToTxn answer. None: done (or failed for good); otherwise the partitions
        still unregistered are asked for again, after the quick poll (-1) or the usual backoff (0)."""
        if error is None and response is not None and response.error_code:
            error = for_code(response.error_code, response.error_message)
        if error is not None:
            action = classify_coordinator_error(error)
            if action in (Action.RETRY, Action.REFRESH_AND_RETRY):
                if action is Action.REFRESH_AND_RETRY:
                    self._cluster.invalidate_coordinator(TRANSACTION, self._tid)
                self._tm.partitions_not_added(partitions)
                if isinstance(error, ConcurrentTransactionsError):
                    log.debug("AddPartitionsToTxn for %s: previous transaction still completing",
                              self._tm.describe())
                    return -1.0  # the sender polls quickly (completing_backoff_s)
                log.warning("AddPartitionsToTxn for %s failed, retrying: %s", self._tm.describe(), error)
                return 0.0
            self._tm.partitions_failed(partitions)
            self._record(error)
            return None
        assert response is not None
        results = {(r.topic, r.partition): r for r in response.results}
        added: list[TopicPartition] = []
        again: list[TopicPartition] = []
        failure: KafkaError | None = None
        for tp in partitions:
            result = results.get((tp.topic, tp.partition))
            if result is None or result.error_code == 0:
                added.append(tp)
                continue
            partition_error = for_code(result.error_code, result.error_message)
            if partition_error.retriable or isinstance(partition_error, OperationNotAttemptedError):
                again.append(tp)
            else:
                failure = failure or partition_error
                self._tm.partitions_failed([tp])
        self._tm.partitions_added(added)
        self._tm.partitions_not_added(again)
        if failure is not None:
            self._record(failure)
            return None
        if again:
            log.warning("AddPartitionsToTxn for %s: retrying %s", self._tm.describe(), again)
            return 0.0
        return None

    # ------------------------------------------------------------ offsets in the transaction (KIP-447)

    def add_offsets(self, group_id: str, deadline: Deadline) -> None:
        pid = self._tm.producer_id_and_epoch
        request = pb.AddOffsetsToTxnRequest(transactional_id=self._tid, producer_id=pid.producer_id,
                                            producer_epoch=pid.epoch, group_id=group_id)
        self._tm.offsets_registration_sent(group_id)
        self._guarded(TRANSACTION, self._tid, "AddOffsetsToTxn",
                      lambda s, t: call(s.transactions.AddOffsetsToTxn, request, t), deadline)
        self._tm.offsets_added(group_id)

    def txn_offset_commit(self, group: ConsumerGroupMetadata, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                          deadline: Deadline) -> None:
        pid = self._tm.producer_id_and_epoch
        request = pb.TxnOffsetCommitRequest(
            transactional_id=self._tid, group_id=group.group_id, producer_id=pid.producer_id,
            producer_epoch=pid.epoch, generation_id=group.generation_id, member_id=group.member_id,
            group_instance_id=group.group_instance_id or "",
            offsets=[pb.OffsetEntry(topic=tp.topic, partition=tp.partition, offset=om.offset, metadata=om.metadata)
                     for tp, om in sorted(offsets.items())],
            add_partitions=self._tm.implicit_add)
        if self._tm.implicit_add:  # the group coordinator adds the offsets partition: the txn must be ended
            self._tm.offsets_registration_sent(group.group_id)

        def invoke(stubs: Stubs, timeout: float) -> Any:
            response = call(stubs.groups.TxnOffsetCommit, request, timeout)
            for result in response.results:  # the first partition error decides (all share the cause)
                raise_for(result.error_code, f"{result.topic}-{result.partition}: {result.error_message}")
            return response

        self._guarded(GROUP, group.group_id, "TxnOffsetCommit", invoke, deadline)
        if self._tm.implicit_add:
            self._tm.offsets_added(group.group_id)

    # ------------------------------------------------------------ EndTxn

    def end_txn(self, committed: bool, deadline: Deadline) -> None:
        """Commit or abort at the coordinator; adopt the bumped pid/epoch it returns (Transactions V2)."""
        pid = self._tm.producer_id_and_epoch
        request = pb.EndTxnRequest(transactional_id=self._tid, producer_id=pid.producer_id,
                                   producer_epoch=pid.epoch, committed=committed)
        what = "EndTxn(commit)" if committed else "EndTxn(abort)"
        response = self._guarded(TRANSACTION, self._tid, what,
                                 lambda s, t: call(s.transactions.EndTxn, request, t), deadline)
        # proto3 leaves both at 0 when a (TV1) node sends no new epoch; a real bump never yields pid 0/epoch 0
        if response.producer_id >= 0 and response.producer_epoch >= 0 and (
                response.producer_id, response.producer_epoch) != (0, 0):
            self._tm.set_producer_id_and_epoch(response.producer_id, response.producer_epoch)
        log.debug("%s: %s done, pid %s epoch %s", self._tm.describe(), what, response.producer_id,
                  response.producer_epoch)
