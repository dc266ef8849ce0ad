"""When a committed transaction becomes readable: as a read_committed consumer waiting in poll() sees it.

The commit benchmarks time "until readable" with this watch: a consumer of its own (assigned the
partitions, no group) polls on a thread of its own, as an application's consumer would, holding a
long-poll Fetch at each leader that the node answers as soon as a marker moves the LSO. An earlier
method polled ListOffsets for the LSO every millisecond: its own round trips to every leader and its
sleeps were in the figure, and its requests loaded the nodes while they wrote the markers.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType

from consumer import Consumer
from proto.structs import IsolationLevel, TopicPartition


class ReadableWatch:
    """A read_committed consumer on `tps` from their current ends; `wait_until_read` says when it had records."""

    def __init__(self, bootstrap_servers: str, tps: Sequence[TopicPartition], *, poll_ms: int = 50) -> None:
        self._consumer = Consumer(bootstrap_servers=bootstrap_servers, isolation_level=IsolationLevel.READ_COMMITTED,
                                  enable_auto_commit=False, fetch_max_wait_ms=500)
        self._consumer.assign(tps)
        self._consumer.seek_to_end(*tps)
        for tp in tps:
            self._consumer.position(tp)  # resolved now, not during the first timed commit
        self._poll_ms = poll_ms
        self._cond = threading.Condition()
        #: per partition: the offset after the last record received, and when (monotonic s)
        self._received: dict[TopicPartition, tuple[int, float]] = {}
        self._error: BaseException | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="readable-watch", daemon=True)
        self._thread.start()

    def wait_until_read(self, ends: Mapping[TopicPartition, int], timeout_s: float = 30.0) -> float:
        """Block until the consumer has received every record below `ends[tp]` of each partition; returns
        when (time.monotonic()) the last of them arrived. TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s

        def read() -> bool:
            return self._error is not None or all(
                self._received.get(tp, (0, 0.0))[0] >= end for tp, end in ends.items())

        with self._cond:
            if not self._cond.wait_for(read, timeout=max(0.0, deadline - time.monotonic())):
                missing = sorted(tp for tp, end in ends.items() if self._received.get(tp, (0, 0.0))[0] < end)
                raise TimeoutError(f"a read_committed consumer did not receive {missing} up to {dict(ends)} "
                                   f"within {timeout_s} s")
            if self._error is not None:
                raise RuntimeError("the read_committed consumer failed") from self._error
            return max(self._received[tp][1] for tp in ends)

    def close(self) -> None:
        with self._cond:
            self._stopped = True
        self._thread.join(timeout=10)
        self._consumer.close(autocommit=False)

    def __enter__(self) -> ReadableWatch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._stopped:
                        return
                batches = self._consumer.poll(timeout_ms=self._poll_ms)
                arrived = time.monotonic()
                if batches:
                    with self._cond:
                        for tp, records in batches.items():
                            self._received[tp] = (records[-1].offset + 1, arrived)
                        self._cond.notify_all()
        except BaseException as exc:  # the waiter hears it instead of timing out
            with self._cond:
                self._error = exc
                self._cond.notify_all()
