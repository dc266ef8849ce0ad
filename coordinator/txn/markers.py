"""Phase two of a commit: COMMIT/ABORT markers to every partition of a transaction, in parallel.

Partitions are grouped by owning node, one WriteTxnMarkers request per node, all nodes at
once (a batch transaction's many producers share those requests); a partition that fails
retriably is retried (after re-resolving its owner) until it acknowledges or this
coordinator stops owning the shard. Markers are idempotent at the partition, so a resend
after failover is harmless.
"""
from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from client.transport import NodeChannels, call
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
    def __init__(self, *, local_node_id: int, owner_of: Callable[[TopicPartition], int],
                 address_of: Callable[[int], str],
                 write_locally: Callable[[pb.WriteTxnMarkersRequest], pb.WriteTxnMarkersResponse],
                 channels: NodeChannels, request_timeout_s: float = 5.0) -> None:
        self._local = local_node_id
        self._owner_of = owner_of
        self._address_of = address_of
        self._write_locally = write_locally
        self._channels = channels
        self._timeout_s = request_timeout_s
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="markers")
        self._stopped = threading.Event()

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
        """Send each owed marker once, one request per owning node, all nodes at once; returns those
        acknowledged (or superseded by a newer marker).

        The remote requests go first, each on a pool thread (a blocking gRPC call costs a third of
        what starting a gRPC future does), then this node's own markers are written in this thread
        while the others travel."""
        by_node: dict[int, list[Owed]] = defaultdict(list)
        for item in owed:
            by_node[self._owner_of(item[1])].append(item)
        local = by_node.pop(self._local, None)
        futures = [self._pool.submit(self._send, node, coordinator_epoch, items) for node, items in by_node.items()]
        acked = self._send(self._local, coordinator_epoch, local) if local else set()
        for future in futures:
            acked |= future.result()
        return acked

    def close(self) -> None:
        self._stopped.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _send(self, node: int, coordinator_epoch: int, owed: list[Owed]) -> set[Owed]:
        request = marker_request(owed, coordinator_epoch)
        try:
            if node == self._local:
                response = self._write_locally(request)
            else:
                stubs = self._channels.stubs(self._address_of(node))
                response = call(stubs.partitions.WriteTxnMarkers, request, self._timeout_s, check=False)
        except KafkaError as exc:
            log.info("markers for %d partition(s) to node %d failed, will retry: %s", len(owed), node, exc)
            return set()
        return acknowledged(owed, response)


def marker_request(owed: Iterable[Owed], coordinator_epoch: int) -> pb.WriteTxnMarkersRequest:
    """One WriteTxnMarkers request for markers owed to one node's partitions (shared with the simulator)."""
    by_marker: dict[Marker, list[TopicPartition]] = defaultdict(list)
    for marker, tp in owed:
        by_marker[marker].append(tp)
    return pb.WriteTxnMarkersRequest(markers=[pb.TxnMarker(
        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch, committed=marker.committed,
        coordinator_epoch=coordinator_epoch, transaction_version=marker.transaction_version,
        partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in sorted(tps)])
        for marker, tps in by_marker.items()])


def acknowledged(owed: Iterable[Owed], response: pb.WriteTxnMarkersResponse) -> set[Owed]:
    """The owed markers the response acknowledged, or answered with a newer marker (§4.8): done."""
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
