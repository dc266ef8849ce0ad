"""When a committed transaction becomes readable: as a read_committed consumer waiting in poll() sees it.

The commit benchmarks time "until readable" with this watch: a consumer of its own (assigned the
partitions, no group) polls in a process of its own, as an application's consumer would, holding a
long-poll Fetch at each leader that the node answers as soon as a marker moves the LSO. It records
when each poll handed it records (time.monotonic(), one clock for every process of the machine) and
answers the benchmark over a pipe. In the benchmark's own process its decoding would compete with the
producer being timed for the GIL. An earlier method polled ListOffsets for the LSO every millisecond:
its own round trips to every leader and its sleeps were in the figure, and its requests loaded the
nodes while they wrote the markers.
"""
from __future__ import annotations

import multiprocessing
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from types import TracebackType

from consumer import Consumer
from proto.structs import IsolationLevel, TopicPartition


class ReadableWatch:
    """A read_committed consumer on `tps` from their current ends, in a child process; `wait_until_readable`
    says when it was handed a transaction's records."""

    def __init__(self, bootstrap_servers: str, tps: Sequence[TopicPartition]) -> None:
        context = multiprocessing.get_context("spawn")  # not fork: this process holds gRPC channels and threads
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, bootstrap_servers, list(tps)),
                                        name="readable-watch", daemon=True)
        self._process.start()
        child.close()
        self._answer(_START_TIMEOUT_S)  # the consumer's positions are resolved before anything is timed

    def wait_until_readable(self, starts: Mapping[TopicPartition, int], timeout_s: float = 30.0) -> float:
        """When (time.monotonic()) the consumer had been handed a record at or after `starts[tp]` on every
        partition: the first of a transaction that began there, which becomes readable whole. TimeoutError
        after `timeout_s`."""
        self._conn.send((dict(starts), timeout_s))
        return self._answer(timeout_s + _START_TIMEOUT_S)

    def close(self) -> None:
        try:
            self._conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()

    def __enter__(self) -> ReadableWatch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _answer(self, timeout_s: float) -> float:
        if not self._conn.poll(timeout_s):
            raise TimeoutError(f"the read_committed consumer process did not answer within {timeout_s:.0f} s")
        kind, value = self._conn.recv()
        if kind == "timeout":
            raise TimeoutError(value)
        if kind == "error":
            raise RuntimeError(f"the read_committed consumer process failed: {value}")
        return float(value)


#: how long the child may take to start (imports, metadata, positions) or to answer beyond its own timeout
_START_TIMEOUT_S = 60.0


def _serve(conn: Connection, bootstrap_servers: str, tps: list[TopicPartition]) -> None:
    """The child process: a consumer polling on a thread, answering the parent's questions until told to stop."""
    try:
        watch = _ConsumerWatch(bootstrap_servers, tps)
    except Exception as exc:  # noqa: BLE001 - the parent hears why instead of waiting out its timeout
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    try:
        conn.send(("ready", 0.0))
        while (question := conn.recv()) is not None:
            starts, timeout_s = question
            try:
                conn.send(("ok", watch.wait_until_readable(starts, timeout_s)))
            except TimeoutError as exc:
                conn.send(("timeout", str(exc)))
            except RuntimeError as exc:
                conn.send(("error", f"{exc}: {exc.__cause__!r}"))
    except EOFError:  # the parent went away
        pass
    finally:
        watch.close()


class _ConsumerWatch:
    """The consumer and its polling thread (in the child process)."""

    def __init__(self, bootstrap_servers: str, tps: Sequence[TopicPartition], *, poll_ms: int = 50) -> None:
        self._consumer = Consumer(bootstrap_servers=bootstrap_servers, isolation_level=IsolationLevel.READ_COMMITTED,
                                  enable_auto_commit=False, fetch_max_wait_ms=500)
        self._consumer.assign(tps)
        self._consumer.seek_to_end(*tps)
        for tp in tps:
            self._consumer.position(tp)  # resolved now, not during the first timed commit
        self._poll_ms = poll_ms
        self._cond = threading.Condition()
        #: per partition, the polls that returned records and are not yet dropped: (offset after the last record,
        #: when: monotonic s), in offset order
        self._arrivals: dict[TopicPartition, deque[tuple[int, float]]] = {}
        self._error: BaseException | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="readable-watch", daemon=True)
        self._thread.start()

    def wait_until_readable(self, starts: Mapping[TopicPartition, int], timeout_s: float = 30.0) -> float:
        """Block until the consumer has been handed a record at or after `starts[tp]` on each partition (the
        first of a transaction that began there: it becomes readable whole, so its first record says
        when); returns when (time.monotonic()) the last of those arrived. TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s

        def arrived() -> bool:
            return self._error is not None or all(tp in self._first_at_or_after(starts) for tp in starts)

        with self._cond:
            if not self._cond.wait_for(arrived, timeout=max(0.0, deadline - time.monotonic())):
                missing = sorted(set(starts) - set(self._first_at_or_after(starts)))
                raise TimeoutError(f"a read_committed consumer was handed nothing of {missing} at or after "
                                   f"{dict(starts)} within {timeout_s} s")
            if self._error is not None:
                raise RuntimeError("the read_committed consumer failed") from self._error
            return max(self._first_at_or_after(starts).values())

    def _first_at_or_after(self, starts: Mapping[TopicPartition, int]) -> dict[TopicPartition, float]:
        """Per partition that has one: when the first record at or after its start arrived (lock held).

        Arrivals ending at or before a start are dropped: a partition's starts only grow (each
        transaction begins where the last one's marker ended), so no later question needs them."""
        found = {}
        for tp, start in starts.items():
            arrivals = self._arrivals.get(tp)
            while arrivals and arrivals[0][0] <= start:
                arrivals.popleft()
            if arrivals:
                found[tp] = arrivals[0][1]
        return found

    def close(self) -> None:
        with self._cond:
            self._stopped = True
        self._thread.join(timeout=10)
        self._consumer.close(autocommit=False)

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
                            self._arrivals.setdefault(tp, deque()).append(
                                (records[-1].offset + 1, arrived))
                        self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - the waiter hears it instead of timing out
            with self._cond:
                self._error = exc
                self._cond.notify_all()
