"""The node's marker writer keeps each channel moving: a failing write or a callback's bug is logged, and the
markers queued behind it still go."""
from __future__ import annotations

import threading
from concurrent.futures import Future

from coordinator.txn.markers import MarkerWriter
from coordinator.txn.metadata import Marker
from proto import txnsim_pb2 as pb
from proto.structs import TopicPartition
from tests.fakes import node_io

TP = TopicPartition("t", 0)


def owed(producer_id: int):
    return [(Marker(producer_id, 1, True, frozenset({TP})), TP)]


class SlowLocalWrites:
    """This node's partition server: acknowledges every marker, the first write held until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.requests: list[pb.WriteTxnMarkersRequest] = []

    def __call__(self, request: pb.WriteTxnMarkersRequest) -> pb.WriteTxnMarkersResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            assert self.release.wait(5), "the test never released the first write"
        return pb.WriteTxnMarkersResponse(markers=[pb.TxnMarkerResult(
            producer_id=m.producer_id, partitions=[pb.PartitionError(topic=p.topic, partition=p.partition)
                                                   for p in m.partitions]) for m in request.markers])


def writer(writes) -> MarkerWriter:
    io = node_io()
    io.serve_locally(lambda request, done: done(writes(request)))
    return MarkerWriter(io=io, owner_of=lambda tp: 0)


def test_a_callback_that_raises_does_not_stop_the_markers_queued_behind_it():
    writes = SlowLocalWrites()
    markers = writer(writes)
    done: list[tuple[int, frozenset]] = []
    answered = threading.Event()

    def raising(acked):
        raise RuntimeError("a bug in the first caller's callback")

    def record(producer_id):
        def callback(acked):
            done.append((producer_id, acked))
            if len(done) == 2:
                answered.set()
        return callback

    first = threading.Thread(target=markers.send_async, args=(owed(1),),
                             kwargs=dict(coordinator_epoch=0, done=raising))
    first.start()  # its write is held: the channel to this node is busy
    while not writes.requests:
        first.join(0.01)
    markers.send_async(owed(2), coordinator_epoch=0, done=record(2))
    markers.send_async(owed(3), coordinator_epoch=0, done=record(3))
    writes.release.set()
    first.join(5)
    assert answered.wait(5), "the markers queued behind the raising callback were never answered"
    assert {pid for pid, acked in done if acked} == {2, 3}
    assert len(writes.requests) == 2, "the two queued sends did not share the next request"
    markers.close()


def test_a_send_answers_with_what_the_node_acknowledged():
    writes = SlowLocalWrites()
    writes.release.set()
    markers = writer(writes)
    answer: Future[frozenset] = Future()
    markers.send_async(owed(7), coordinator_epoch=3, done=answer.set_result)
    assert answer.result(timeout=5) == set(owed(7))
    assert writes.requests[0].markers[0].coordinator_epoch == 3
    markers.close()
