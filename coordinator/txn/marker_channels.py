"""Markers to each node travel together: one WriteTxnMarkers in flight per destination node, and every
marker owed to that node meanwhile, by any transaction of any shard, goes in the next request (Kafka's
TransactionMarkerChannelManager keeps a queue per broker the same way).

Without this, 100 transactions completing at once cost 100 requests to each node and 100 fsyncs of each
log they touch; with it, a node receives one request per round trip and makes each of its logs durable
once for all of them (PartitionServer.write_txn_markers). A lone transaction pays nothing extra: an idle
channel sends at once.

Plain state, no I/O: the node's MarkerWriter and the simulator's node carry out the batches it returns,
and report each batch's answer back with `answered`.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import count

from coordinator.txn.metadata import Marker, Owed
from proto import txnsim_pb2 as pb
from proto.structs import TopicPartition

#: markers (one per partition) in one request at most: a request stays well under gRPC's 4 MiB
MAX_MARKERS_PER_REQUEST = 2000


@dataclass(frozen=True, slots=True)
class MarkerBatch:
    """One WriteTxnMarkers request to carry out now: `items` are (owed marker, coordinator epoch)."""

    batch_id: int
    node: int
    items: tuple[tuple[Owed, int], ...]

    @property
    def owed(self) -> list[Owed]:
        return [owed for owed, _epoch in self.items]

    def request(self) -> pb.WriteTxnMarkersRequest:
        return marker_request(self.items)


@dataclass(frozen=True, slots=True)
class MarkersDone:
    """Every node of send `send_id` has answered: `acked` are its markers acknowledged (or superseded)."""

    send_id: int
    acked: frozenset[Owed]


@dataclass(slots=True)
class _Send:
    unanswered: int  # owed markers whose batch has not been answered yet
    acked: set[Owed] = field(default_factory=set)


@dataclass(slots=True)
class _Channel:
    queue: deque[tuple[int, Owed, int]] = field(default_factory=deque)  # (send id, owed, coordinator epoch)
    busy: bool = False  # a batch is in flight


#: what the channels ask of their driver: batches to send now, sends now complete
Step = tuple[list[MarkerBatch], list[MarkersDone]]


class MarkerChannels:
    """Per destination node, at most one batch in flight; what is owed meanwhile waits for the next."""

    def __init__(self) -> None:
        self._channels: dict[int, _Channel] = {}
        self._sends: dict[int, _Send] = {}
        #: batch id -> (its node, the send each of its items belongs to)
        self._batches: dict[int, tuple[int, list[tuple[int, Owed]]]] = {}
        self._batch_ids = count(1)

    def send(self, send_id: int, owed: Iterable[Owed], coordinator_epoch: int,
             owner_of: Callable[[TopicPartition], int]) -> Step:
        """Owe each marker to its partition's owner now; returns the batches for nodes that were idle."""
        if send_id in self._sends:
            raise ValueError(f"marker send {send_id} is already under way")
        by_node: dict[int, list[Owed]] = {}
        for item in owed:
            by_node.setdefault(owner_of(item[1]), []).append(item)
        unanswered = sum(map(len, by_node.values()))
        if not unanswered:
            return [], [MarkersDone(send_id, frozenset())]
        self._sends[send_id] = _Send(unanswered)
        batches = []
        for node, items in by_node.items():
            channel = self._channels.setdefault(node, _Channel())
            channel.queue.extend((send_id, item, coordinator_epoch) for item in items)
            batch = self._next_batch(node, channel)
            if batch is not None:
                batches.append(batch)
        return batches, []

    def answered(self, batch_id: int, acked: set[Owed]) -> Step:
        """A batch was answered (`acked`: its markers the node acknowledged or found superseded; empty if the
        request failed). Returns the node's next batch, if anything waits for it, and the sends now complete."""
        entry = self._batches.pop(batch_id, None)
        if entry is None:  # abandoned meanwhile
            return [], []
        node, items = entry
        done = []
        for send_id, item in items:
            send = self._sends[send_id]
            if item in acked:
                send.acked.add(item)
            send.unanswered -= 1
            if send.unanswered == 0:
                del self._sends[send_id]
                done.append(MarkersDone(send_id, frozenset(send.acked)))
        channel = self._channels[node]
        channel.busy = False
        batch = self._next_batch(node, channel)
        return ([batch] if batch is not None else []), done

    def abandon(self) -> list[MarkersDone]:
        """The driver stops: every unfinished send is done with what was acknowledged so far."""
        done = [MarkersDone(send_id, frozenset(send.acked)) for send_id, send in self._sends.items()]
        self._sends.clear()
        self._channels.clear()
        self._batches.clear()
        return done

    def _next_batch(self, node: int, channel: _Channel) -> MarkerBatch | None:
        """Take what waits for an idle node: one marker per producer id (a response names markers by producer
        id alone, so two markers of one producer go in separate requests), at most MAX_MARKERS_PER_REQUEST."""
        if channel.busy or not channel.queue:
            return None
        taken: list[tuple[int, Owed, int]] = []
        left: deque[tuple[int, Owed, int]] = deque()
        marker_of: dict[int, tuple[Marker, int]] = {}
        for entry in channel.queue:
            _send, (marker, _tp), epoch = entry
            if len(taken) < MAX_MARKERS_PER_REQUEST and marker_of.setdefault(
                    marker.producer_id, (marker, epoch)) == (marker, epoch):
                taken.append(entry)
            else:
                left.append(entry)
        channel.queue = left
        channel.busy = True
        batch_id = next(self._batch_ids)
        self._batches[batch_id] = (node, [(send_id, owed) for send_id, owed, _epoch in taken])
        return MarkerBatch(batch_id, node, tuple((owed, epoch) for _send, owed, epoch in taken))


def marker_request(items: Iterable[tuple[Owed, int]]) -> pb.WriteTxnMarkersRequest:
    """One WriteTxnMarkers request for markers owed to one node's partitions, each with the coordinator epoch
    of the shard that owes it (shared with the simulator)."""
    by_marker: dict[tuple[Marker, int], set[TopicPartition]] = {}
    for (marker, tp), epoch in items:
        by_marker.setdefault((marker, epoch), set()).add(tp)
    return pb.WriteTxnMarkersRequest(markers=[pb.TxnMarker(
        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch, committed=marker.committed,
        coordinator_epoch=epoch, transaction_version=marker.transaction_version,
        partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in sorted(tps)])
        for (marker, epoch), tps in by_marker.items()])
