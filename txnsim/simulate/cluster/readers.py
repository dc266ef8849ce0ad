"""Simulated consumers of every partition of the input topic, fetching from each partition's owner in turn.

The read_committed reader hands what it polls to the chaos History (so the run ends with `txnsim chaos`'s
anomaly names) and reports a fetch that says a partition ends before where an earlier one said it ended
(`no-stale-read`). The read_uncommitted reader sees every record below the high watermark, those of aborted
and undecided transactions included; the model holds it to what a high watermark promises: every record it
was handed is in the log at the same offset, with the same value, after the run settles
(`uncommitted-read-durable`), so nothing is exposed before it is durable.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from consumer.fetcher import PartitionRecords
from proto import txnsim_pb2 as pb
from proto.errors import CorruptMessageError, OffsetOutOfRangeError
from proto.structs import IsolationLevel, TopicPartition
from txnsim.simulate.cluster.clients import REQUEST_TIMEOUT_MS
from txnsim.simulate.network import TIMED_OUT

if TYPE_CHECKING:
    from txnsim.simulate.cluster.roles import ClientCluster


class Reader:
    """A consumer of every data partition at one isolation level, one fetch per partition at a time."""

    def __init__(self, name: str, model: ClientCluster, isolation: IsolationLevel, poll_interval_ms: int) -> None:
        self.name = name
        self.model = model
        self.net = model.network
        self.isolation = isolation
        self.poll_interval_ms = poll_interval_ms
        self.positions = {tp: 0 for tp in model.control.data_partitions}
        self.in_flight: set[TopicPartition] = set()  # one fetch per partition at a time, as a consumer does
        #: the furthest end (LSO) any fetch of the partition answered (read_committed)
        self.told = {tp: 0 for tp in model.control.data_partitions}
        self.stopped = False

    @property
    def committed(self) -> bool:
        return self.isolation is IsolationLevel.READ_COMMITTED

    def start(self) -> None:
        if self.committed:
            for tp in self.model.control.data_partitions:
                self.model.history.seeked(self.name, tp, 0, "start")
        self.net.set_timer(self.name, self.poll_interval_ms, self.poll, label="poll")

    def poll(self) -> None:
        for tp in self.model.control.data_partitions:
            if tp in self.in_flight:
                continue
            self.in_flight.add(tp)
            request = pb.FetchRequest(isolation_level=self.isolation, max_wait_ms=0, min_bytes=1,
                                      partitions=[pb.FetchPartition(topic=tp.topic, partition=tp.partition,
                                                                    fetch_offset=self.positions[tp])])
            owner = self.model.control.owner_now(tp.topic, tp.partition)
            self.net.call(self.name, f"n{owner}", request, REQUEST_TIMEOUT_MS,
                          functools.partial(self.fetched, tp, f"n{owner}"))
        if not self.stopped:
            self.net.set_timer(self.name, self.poll_interval_ms, self.poll, label="poll")

    def fetched(self, tp: TopicPartition, node: str, response: Any) -> None:
        self.in_flight.discard(tp)
        if response is TIMED_OUT:
            return
        part = response.partitions[0]
        if part.error_code == OffsetOutOfRangeError.errno and self.committed:  # a consumer would reset now
            self.model.recorder.stale_read(self.name, tp, node, self.told[tp], f"OFFSET_OUT_OF_RANGE at {self.positions[tp]}")
        if part.error_code:
            return
        if self.committed:
            if part.last_stable_offset < self.told[tp]:
                self.model.recorder.stale_read(self.name, tp, node, self.told[tp], f"LSO {part.last_stable_offset}")
            self.told[tp] = max(self.told[tp], part.last_stable_offset)
        fetch_offset = self.positions[tp]
        records = PartitionRecords(tp, fetch_offset, part.records, isolation_level=self.isolation,
                                   aborted_transactions=[(a.producer_id, a.first_offset)
                                                         for a in part.aborted_transactions])
        try:
            taken = records.take(1 << 30)
        except CorruptMessageError as exc:  # a real consumer raises this to its user: the log was damaged
            self.model.recorder.corrupt_read(self.name, tp, fetch_offset, exc)
            return
        if taken:
            if self.committed:
                self.model.history.polled(self.name, taken)
            else:
                self.model.recorder.uncommitted_polled(self.name, taken)
        self.positions[tp] = max(fetch_offset, records.next_fetch_offset)
