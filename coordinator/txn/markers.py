"""Phase two of a commit: COMMIT/ABORT markers to every partition of a transaction, in parallel.

Partitions are grouped by owning node, one WriteTxnMarkers request per node, all nodes at
once; markers owed to a node while a request to it is out go together in its next request, whatever
transaction owes them (marker_channels.py). A partition that fails
retriably is retried (after re-resolving its owner) until it acknowledges or this
coordinator stops owning the shard. Markers are idempotent at the partition, so a resend
after failover is harmless.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import count

from client.transport import NodeChannels, call
from coordinator.observers import NO_OBSERVER, MarkerObserver
from coordinator.placement import NO_OWNER
from coordinator.txn.marker_channels import MarkerBatch, MarkerChannels, MarkersDone
from coordinator.txn.metadata import Marker, Owed
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


class MarkerWriter:
    """Carries out MarkerChannels' batches: a remote node's on a pool thread (a blocking gRPC call costs a third
    of what starting a gRPC future does), this node's own in the thread that owed them, each channel's next
    batch in the thread that saw the previous one answered."""

    def __init__(self, *, local_node_id: int, owner_of: Callable[[TopicPartition], int],
                 address_of: Callable[[int], str],
                 write_locally: Callable[[pb.WriteTxnMarkersRequest], pb.WriteTxnMarkersResponse],
                 channels: NodeChannels, request_timeout_s: float = 5.0,
                 observer: MarkerObserver = NO_OBSERVER) -> None:
        self._local = local_node_id
        self._observer = observer
        self._owner_of = owner_of
        self._address_of = address_of
        self._write_locally = write_locally
        self._channels = channels
        self._timeout_s = request_timeout_s
        # a remote node's channel holds a thread while its queue lasts: one each for clusters of up to 64 nodes
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="markers")
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._queues = MarkerChannels()
        self._done: dict[int, Callable[[frozenset[Owed]], object]] = {}
        self._send_ids = count(1)

    def write(self, markers: list[Marker], *, coordinator_epoch: int, still_valid: Callable[[], bool]) -> bool:
        """Block until every partition acknowledged its marker; False if ownership was lost first.
        (The RocketMQ half shards use this; the transaction coordinator's core retries with timers.)"""
        remaining: set[Owed] = {(marker, tp) for marker in markers for tp in marker.partitions}
        backoff = 0.02
        while remaining:
            if self._stopped.is_set() or not still_valid():
                return False
            remaining -= self.send(remaining, coordinator_epoch=coordinator_epoch)
            if remaining:
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 0.5)
        return True

    def send(self, owed: Iterable[Owed], *, coordinator_epoch: int) -> set[Owed]:
        """Send each owed marker once and wait; returns those acknowledged (or superseded by a newer marker)."""
        answer: Future[frozenset[Owed]] = Future()
        self.send_async(owed, coordinator_epoch=coordinator_epoch, done=answer.set_result)
        return set(answer.result())

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
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _carry_out(self, batches: list[MarkerBatch], finished: list[MarkersDone]) -> None:
        self._finish(finished)
        local = None
        for batch in batches:
            if batch.node == self._local:
                local = batch
            else:
                self._hand_off(batch)
        if local is not None:  # written while the remote requests travel
            self._deliver(local, inline=True)

    def _hand_off(self, batch: MarkerBatch) -> None:
        try:
            self._pool.submit(self._deliver, batch)
        except RuntimeError:  # closed meanwhile: close() finished every send
            pass

    def _deliver(self, batch: MarkerBatch, inline: bool = False) -> None:
        """Send a batch, then each next batch for the same node, until its queue is empty. A caller's own
        thread (`inline`) sends one batch and leaves the next to the pool: it has its own work to go back to."""
        next_batch: MarkerBatch | None = batch
        while next_batch is not None:
            acked: set[Owed] = set()
            try:
                acked = self._send_batch(next_batch)
            finally:  # whatever happened, the channel is answered, or it would stay busy for ever
                with self._lock:
                    batches, finished = self._queues.answered(next_batch.batch_id, acked)
                self._finish(finished)
            next_batch = batches[0] if batches else None
            if next_batch is not None and inline:
                self._hand_off(next_batch)
                return

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

    def _send_batch(self, batch: MarkerBatch) -> set[Owed]:
        owed = batch.owed
        try:
            if batch.node == NO_OWNER:
                log.info("markers for %d partition(s) wait: no live node owns them", len(owed))
                return set()
            self._observer.marker_request_sent(len({marker.producer_id for marker, _tp in owed}))
            if batch.node == self._local:
                response = self._write_locally(batch.request())
            else:
                stubs = self._channels.stubs(self._address_of(batch.node))
                response = call(stubs.partitions.WriteTxnMarkers, batch.request(), self._timeout_s, check=False)
            return acknowledged(owed, response)
        except KafkaError as exc:
            log.info("markers for %d partition(s) to node %d failed, will retry: %s", len(owed), batch.node, exc)
        except Exception:  # a bug must not silently strand a transaction: say so; its coordinator retries
            log.exception("markers for %d partition(s) to node %d failed", len(owed), batch.node)
        return set()


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
