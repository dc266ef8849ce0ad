"""Reading partitions whole: from their start to the end offsets they had when the read began.

For what needs a topic's whole content at one moment: a test's or a benchmark's read-back, the
demo's tally. An empty poll proves nothing (a fetch held up by a failover looks the same), so the
read ends when every partition's position has reached its end offset, and fails with
KafkaTimeoutError, saying how far each partition got, when the deadline passes first.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from consumer.consumer import Consumer
from proto.errors import KafkaTimeoutError
from proto.structs import ConsumerRecord, TopicPartition


def read_to_end(bootstrap_servers: str, tps: Sequence[TopicPartition], *, isolation_level: str = "read_committed",
                timeout_s: float = 30.0, poll_ms: int = 200) -> Iterator[ConsumerRecord]:
    """Every record of `tps` from the log start up to their end offsets now (the LSO for read_committed, the
    high watermark for read_uncommitted), in each partition's order; a consumer of its own, no group."""
    with Consumer(bootstrap_servers=bootstrap_servers, isolation_level=isolation_level,
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                behind = ", ".join(f"{tp.topic}-{tp.partition} at {consumer.position(tp)} of {ends[tp]}"
                                   for tp in tps if consumer.position(tp) < ends[tp])
                raise KafkaTimeoutError(f"[REQUEST_TIMED_OUT] could not read to the end within {timeout_s:g} s: "
                                        f"{behind}")
            for records in consumer.poll(timeout_ms=poll_ms).values():
                yield from records
