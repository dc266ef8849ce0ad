"""Phase two of a commit: COMMIT/ABORT markers to every partition of a transaction, in parallel.

Partitions are grouped by owning node, one WriteTxnMarkers request per node, all nodes at
once; markers owed to a node while a request to it is out go together in its next request, whatever
transaction owes them (marker_channels.py). A partition that fails
retriably is retried (after re-resolving its owner) until it acknowledges or this
coordinator stops owning the shard. Markers are idempotent at the partition, so a resend
after failover is harmless.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from itertools import count

from coordinator.observers import NO_OBSERVER, MarkerObserver
from coordinator.placement import NO_OWNER
from coordinator.runtime.io import NodeIO, Outcome
from coordinator.txn.marker_channels import MarkerBatch, MarkerChannels, MarkersDone
from coordinator.txn.metadata import Owed
from proto import txnsim_pb2 as pb
from proto.errors import (
    ERRORS_BY_CODE,
    InvalidProducerEpochError,
    KafkaError,
    TransactionCoordinatorFencedError,
)
from proto.structs import TopicPartition

log = logging.getLogger(__name__)

#: a partition answering one of these already has a newer marker: nothing more to send (§4.8)
_DONE_CODES = {0, InvalidProducerEpochError.errno, TransactionCoordinatorFencedError.errno}
#: how long a node waits for another's answer to a WriteTxnMarkers
MARKER_REQUEST_TIMEOUT_MS = 5000


class MarkerWriter:
    """Carries out MarkerChannels' batches over the node's I/O: every remote node's apart from the caller and at
    once (`io.soon`), this node's own in the thread that owed them, while the remote requests travel."""

    def __init__(self, *, io: NodeIO, owner_of: Callable[[TopicPartition], int],
                 request_timeout_ms: int = MARKER_REQUEST_TIMEOUT_MS, observer: MarkerObserver = NO_OBSERVER) -> None:
        self._io = io
        self._local = io.node_id
        self._observer = observer
        self._owner_of = owner_of
        self._timeout_ms = request_timeout_ms
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._queues = MarkerChannels()
        self._done: dict[int, Callable[[frozenset[Owed]], object]] = {}
        self._send_ids = count(1)

    def send_async(self, owed: Iterable[Owed], *, coordinator_epoch: int,
                   done: Callable[[frozenset[Owed]], object]) -> None:
        """Owe each marker to its partition's owner; `done(acknowledged)` is called once every node has answered
        (from the thread that saw the last answer: it must not block; what it raises is logged). Markers owed to
        a node while a request to it is out go together in its next request. This node's own markers may be
        written in this thread before it returns (one request's worth)."""
        owed = list(owed)
        owners = {tp: self._owner_of(tp) for _marker, tp in owed}
        with self._lock:
            stopped = self._stopped.is_set()
            if not stopped:
                send_id = next(self._send_ids)
                self._done[send_id] = done
                batches, finished = self._queues.send(send_id, owed, coordinator_epoch, owners.__getitem__)
        if stopped:
            done(frozenset())
        else:
            self._carry_out(batches, finished)

    def close(self) -> None:
        with self._lock:
            self._stopped.set()
            finished = self._queues.abandon()
        self._finish(finished)

    def _carry_out(self, batches: list[MarkerBatch], finished: list[MarkersDone]) -> None:
        self._finish(finished)
        local = None
        for batch in batches:
            if batch.node == self._local:
                local = batch
            else:
                self._io.soon(functools.partial(self._send, batch), f"markers to node {batch.node}")
        if local is not None:  # written while the remote requests travel
            self._send(local)

    def _send(self, batch: MarkerBatch) -> None:
        """One batch to its node; its answer (or none) is reported to the channels, whose next batch for that node
        is sent from wherever the answer came."""
        if self._stopped.is_set():
            self._answered(batch, None)
            return
        if batch.node == NO_OWNER:
            log.info("markers for %d partition(s) wait: no live node owns them", len(batch.owed))
            self._answered(batch, None)
            return
        self._observer.marker_request_sent(len({marker.producer_id for marker, _tp in batch.owed}))
        try:
            self._io.call(batch.node, batch.request(), self._timeout_ms, lambda outcome: self._answered(batch, outcome))
        except Exception:  # a bug must not silently strand a transaction: say so; its coordinator retries
            log.exception("markers for %d partition(s) to node %d failed", len(batch.owed), batch.node)
            self._answered(batch, None)

    def _answered(self, batch: MarkerBatch, outcome: Outcome) -> None:
        acked: set[Owed] = set()
        if isinstance(outcome, pb.WriteTxnMarkersResponse):
            acked = acknowledged(batch.owed, outcome)
        elif isinstance(outcome, KafkaError):
            log.info("markers for %d partition(s) to node %d failed, will retry: %s", len(batch.owed), batch.node,
                     outcome)
        with self._lock:  # whatever happened, the channel is answered, or it would stay busy for ever
            batches, finished = self._queues.answered(batch.batch_id, acked)
        self._finish(finished)
        for next_batch in batches:  # the same node's next request, from wherever this answer came
            self._io.soon(functools.partial(self._send, next_batch), f"markers to node {next_batch.node}")

    def _finish(self, finished: list[MarkersDone]) -> None:
        for done in finished:
            with self._lock:
                callback = self._done.pop(done.send_id, None)
            if callback is None:
                continue
            try:
                callback(done.acked)
            except Exception:  # a callback's bug must not stop the channel or the other sends' callbacks
                log.exception("a marker send's callback failed")


def acknowledged(owed: Iterable[Owed], response: pb.WriteTxnMarkersResponse) -> set[Owed]:
    """The owed markers the response acknowledged, or answered with a newer marker (§4.8): done. A response names
    its markers by producer id alone, so `owed` holds one marker per producer id (MarkerChannels batches so)."""
    marker_of = {marker.producer_id: marker for marker, _tp in owed}
    acked: set[Owed] = set()
    for result in response.markers:
        marker = marker_of.get(result.producer_id)
        if marker is None:
            continue
        for p in result.partitions:
            tp = TopicPartition(p.topic, p.partition)
            if p.error_code in _DONE_CODES:
                if p.error_code:
                    log.info("marker for %s of producer %d superseded: %s", tp, marker.producer_id, p.error_message)
                acked.add((marker, tp))
            elif not ERRORS_BY_CODE.get(p.error_code, KafkaError).retriable:
                log.error("marker for %s of producer %d failed (%s); retrying", tp, marker.producer_id,
                          p.error_message)
    return acked
