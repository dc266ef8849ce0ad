"""Client side of batch transactions (txnsim's extension; docs/spark-exactly-once.md).

A `BatchParticipant` is a transactional producer whose transaction is not its own: it joins
the batch transaction `transactional_id` for one batch id (JoinBatchTxn gives it a fresh
producer id), sends, flushes, and stops there. Whoever drives the batch (Spark's driver)
decides with `end_batch_transaction`, naming the participants whose output commits; the
rest are aborted. Participants never call EndTxn.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from client.cluster import TRANSACTION, ClusterClient
from client.transport import Deadline, call, retrying
from producer.producer import Producer
from producer.transaction_manager import TransactionState
from proto import txnsim_pb2 as pb
from proto.errors import IllegalStateError, needs_rediscovery
from proto.structs import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    repeated_commit: bool  # the batch had been committed before: this call changed nothing
    completed: bool        # markers written: read_committed consumers see the outcome now


class BatchParticipant(Producer):
    """Producer(transactional_id=<batch transaction id>, ...), then join(), send(), finish(), close()."""

    _aborts_on_close = False  # the driver decides; an unnamed participant is aborted by the coordinator
    _implicit_add = False  # a batch registers each participant's partitions itself (JoinBatchTxn's producer id)

    def join(self, batch_id: int, *, task: int = 0, attempt: int = 0) -> bool:
        """Join batch `batch_id` and begin its transaction. False: the batch committed earlier
        (a replay), so this participant must write nothing."""
        self._ensure_open("join")
        tm = self._tm
        tm.begin_init()
        request = pb.JoinBatchTxnRequest(
            batch_txn_id=tm.transactional_id, batch_id=batch_id, task=task, attempt=attempt,
            transaction_timeout_ms=self.config.transaction_timeout_ms)
        response = self._requests.join_batch(request, Deadline(self._max_block_s))
        if response.already_committed:
            log.info("%s: batch %d committed before; task %d attempt %d writes nothing", tm.describe(),
                     batch_id, task, attempt)
            return False
        tm.complete_init(response.producer_id, response.producer_epoch)
        tm.begin_transaction()
        return True

    def finish(self, timeout: float | None = None) -> frozenset[TopicPartition]:
        """Wait until everything sent is written and registered; returns the partitions written.
        Raises the first send error: the driver must then not name this participant."""
        self._ensure_open("finish")
        deadline = time.monotonic() + (self._max_block_s if timeout is None else timeout)
        self._flush(deadline, "finish")
        self._tm.ensure_usable("finish")
        if self._tm.state is TransactionState.ABORTABLE_ERROR:
            raise self._tm.abortable_error_copy("finish")
        self._sender.await_partition_registration(deadline)
        return self._tm.transaction_partitions

    def commit_transaction(self) -> None:
        raise IllegalStateError("cannot commit_transaction: a batch participant's batch is ended by "
                                "end_batch_transaction, by whoever drives the batch")

    def abort_transaction(self) -> None:
        raise IllegalStateError("cannot abort_transaction: a batch participant's batch is ended by "
                                "end_batch_transaction, by whoever drives the batch")


def end_batch_transaction(cluster: ClusterClient, batch_txn_id: str, batch_id: int, *, committed: bool,
                          winners: Iterable[int], timeout_s: float = 60.0, wait_s: float = 10.0,
                          **retry: Any) -> BatchOutcome:
    """Commit (naming the winning participants' producer ids) or abort batch `batch_id`.

    Idempotent: a repeated commit of a committed batch returns repeated_commit=True; an abort of
    a committed batch changes nothing. Retries retriable errors (the coordinator moving) until
    `timeout_s`; waits up to `wait_s` for the markers, so that the batch is usually visible on return.
    """
    request = pb.EndBatchTxnRequest(batch_txn_id=batch_txn_id, batch_id=batch_id, committed=committed,
                                    winners=sorted(set(winners)), wait_ms=int(wait_s * 1000))
    deadline = Deadline(timeout_s)

    def before_retry(exc: BaseException) -> None:
        if needs_rediscovery(exc):
            cluster.invalidate_coordinator(TRANSACTION, batch_txn_id)
        log.info("EndBatchTxn of batch %d of %r failed, retrying: %s", batch_id, batch_txn_id, exc)

    for attempt in retrying(deadline.remaining(), before_retry=before_retry, **retry):
        with attempt:
            address = cluster.coordinator_address(TRANSACTION, batch_txn_id, deadline)
            response = call(cluster.stubs(address).transactions.EndBatchTxn, request,
                            min(max(deadline.remaining(), 0.05), wait_s + 5.0))
            return BatchOutcome(repeated_commit=response.repeated_commit, completed=response.completed)
    raise AssertionError("unreachable: tenacity either returns or raises")
