"""Property: a read_committed consumer sees exactly the committed records, once each, in offset order.

The consumer side is implemented here, as Kafka's fetcher does it (KAFKA-REFERENCE §6): per fetch
response, a min-heap of aborted transactions by first offset, an aborted-producer set, control
batches skipped. The log side is the real PartitionLog, including a reopen (recovery) mid-run.
"""
from __future__ import annotations

import heapq
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitions import LogConfig, PartitionLog
from proto import records
from proto.records import ControlType
from proto.structs import IsolationLevel

TXN_PRODUCERS = (101, 102, 103)
PLAIN_PRODUCER = 200


def read_committed(log: PartitionLog, max_bytes: int) -> list[tuple[int, bytes]]:
    """Every record a read_committed consumer delivers, fetching from offset 0 until it catches up."""
    delivered: list[tuple[int, bytes]] = []
    position = 0
    while True:
        fetch = log.read(position, max_bytes, IsolationLevel.READ_COMMITTED)
        if not fetch.records:
            assert position == fetch.last_stable_offset
            return delivered
        heap = [(first, pid) for pid, first in fetch.aborted_transactions]
        heapq.heapify(heap)
        aborted_pids: set[int] = set()
        for batch in records.iter_batches(fetch.records):
            header = batch.header
            assert header.last_offset < fetch.last_stable_offset
            while heap and heap[0][0] <= header.last_offset:
                aborted_pids.add(heapq.heappop(heap)[1])
            if header.is_control:
                if batch.control_record().type is ControlType.ABORT:
                    aborted_pids.discard(header.producer_id)
            elif not (header.is_transactional and header.producer_id in aborted_pids):
                delivered.extend((r.offset, r.value) for r in batch.records() if r.offset >= position)
            position = header.next_offset


@dataclass
class Producer:
    pid: int
    epoch: int = 0
    sequence: int = 0
    pending: list[tuple[int, bytes]] = field(default_factory=list)


@dataclass
class Model:
    """What the consumer must see: committed and plain records, by offset."""

    visible: dict[int, bytes] = field(default_factory=dict)
    hidden: dict[int, bytes] = field(default_factory=dict)  # aborted records


steps = st.lists(st.one_of(
    st.tuples(st.just("send"), st.sampled_from(TXN_PRODUCERS), st.integers(1, 4)),
    st.tuples(st.just("plain"), st.just(PLAIN_PRODUCER), st.integers(1, 3)),
    st.tuples(st.sampled_from(["commit", "abort"]), st.sampled_from(TXN_PRODUCERS), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0)),
), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(60, 700), st.sampled_from([350, 1 << 20]))
def test_read_committed_sees_each_committed_record_once_and_nothing_aborted_or_open(plan, max_bytes, segment_bytes):
    with tempfile.TemporaryDirectory() as tmp:
        directory, config = Path(tmp) / "t-0", LogConfig(segment_bytes=segment_bytes)
        leader_epoch = 0
        log = PartitionLog.open(directory, "t", 0, leader_epoch=leader_epoch, config=config)
        producers = {pid: Producer(pid) for pid in (*TXN_PRODUCERS, PLAIN_PRODUCER)}
        model = Model()
        counter = 0
        try:
            for kind, pid, count in plan:
                producer = producers.get(pid)
                if kind in ("send", "plain"):
                    values = [f"{pid}:{counter + i}".encode() for i in range(count)]
                    counter += count
                    raw = records.encode_batch([(counter, None, v, ()) for v in values], producer_id=pid,
                                               producer_epoch=producer.epoch, base_sequence=producer.sequence,
                                               transactional=kind == "send")
                    result = log.append(raw, verified_producer_ids=frozenset({pid}))
                    producer.sequence += count
                    placed = list(zip(range(result.base_offset, result.last_offset + 1), values))
                    if kind == "plain":
                        model.visible.update(placed)
                    else:
                        producer.pending.extend(placed)
                elif kind in ("commit", "abort"):
                    producer.epoch += 1  # transactions V2: every end bumps the epoch
                    producer.sequence = 0
                    log.append_marker(producer_id=pid, producer_epoch=producer.epoch,
                                      committed=kind == "commit", coordinator_epoch=0)
                    (model.visible if kind == "commit" else model.hidden).update(producer.pending)
                    producer.pending.clear()
                else:
                    log.close()
                    leader_epoch += 1
                    log = PartitionLog.open(directory, "t", 0, leader_epoch=leader_epoch, config=config)
                    assert log.recovery_report == []

            open_firsts = [p.pending[0][0] for p in producers.values() if p.pending]
            lso = min(open_firsts, default=log.high_watermark)
            assert log.last_stable_offset == lso
            seen = read_committed(log, max_bytes)
            assert seen == sorted((o, v) for o, v in model.visible.items() if o < lso)

            for producer in producers.values():  # end everything still open, then all must be decided
                if producer.pending:
                    producer.epoch += 1
                    log.append_marker(producer_id=producer.pid, producer_epoch=producer.epoch,
                                      committed=False, coordinator_epoch=0)
                    model.hidden.update(producer.pending)
            assert log.last_stable_offset == log.high_watermark
            seen = read_committed(log, max_bytes)
            assert seen == sorted(model.visible.items())
            assert not set(dict(seen)) & set(model.hidden)
        finally:
            log.close()
