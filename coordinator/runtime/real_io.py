"""The real world of a node: the wall and monotonic clocks, a timer thread, pool threads, fsync and gRPC.

Where it can, it does the work in the caller's thread and calls back before returning: a make-durable fsyncs
inline (the log group-commits concurrent callers), a call to another node is a blocking gRPC call on the
caller's thread (a third of the CPU of a gRPC future), a call to this node runs its handler inline. Work that
must not hold its caller up goes through `soon` (a pool); timers fire on one thread and run on the pool.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from client.transport import NodeChannels, call
from coordinator.runtime.io import Cancellable, Failures, Outcome
from coordinator.timers import Timers
from partitions import PartitionLog
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, UnknownServerError

log = logging.getLogger(__name__)

#: each service's stubs attribute on client.transport.Stubs
_STUBS = {"Cluster": "cluster", "Partitions": "partitions", "TransactionCoordinator": "transactions",
          "GroupCoordinator": "groups", "HalfMessages": "half"}
#: request message type -> (stubs attribute, method name): every unary call a node can make of another
METHODS: dict[type, tuple[str, str]] = {
    getattr(pb, method.input_type.name): (_STUBS[service.name], method.name)
    for service in pb.DESCRIPTOR.services_by_name.values() for method in service.methods
    if not method.server_streaming and not method.client_streaming}

#: a local call's handler: the request, and where its outcome goes
LocalHandler = Callable[[Any, Callable[[Outcome], None]], None]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class RealIO:
    """NodeIO for a node process."""

    def __init__(self, node_id: int, *, address_of: Callable[[int], str], channels: NodeChannels,
                 now_ms: Callable[[], int] = wall_clock_ms, workers: int = 16) -> None:
        self.node_id = node_id
        self._address_of = address_of
        self._channels = channels
        self._now_ms = now_ms
        self._timers = Timers(f"node{node_id}-timers")
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"node{node_id}-io")
        # fsyncs of several logs at once, apart from the pool: a pool thread waiting on them cannot starve them
        self._fsyncs = ThreadPoolExecutor(max_workers=16, thread_name_prefix=f"node{node_id}-fsync")
        self._local: LocalHandler | None = None
        self._stopped = False
        self._outstanding = 0  # work handed to `soon` and not yet finished
        self._settled = threading.Condition()

    def serve_locally(self, handler: LocalHandler) -> None:
        """Where calls to this node itself go (the node runtime's dispatch)."""
        self._local = handler

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until all work handed to `soon` so far (and what it handed on) has run; False if some still
        runs after `timeout_s`. For a node stopping gracefully, and tests."""
        with self._settled:
            return self._settled.wait_for(lambda: self._outstanding == 0, timeout_s)

    def close(self) -> None:
        self._stopped = True
        self._timers.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._fsyncs.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ NodeIO

    def now_ms(self) -> int:
        return self._now_ms()

    def after(self, delay_ms: int, work: Callable[[], None], label: str) -> Cancellable:
        return self._timers.call_later(max(0, delay_ms) / 1000, lambda: self.soon(work, label))

    def soon(self, work: Callable[[], None], label: str) -> None:
        if self._stopped:
            return
        with self._settled:
            self._outstanding += 1
        try:
            self._pool.submit(self._run, work, label)
        except RuntimeError:  # shut down meanwhile: the node is stopping
            self._finished()

    def durable(self, ends: Mapping[PartitionLog, int], done: Callable[[Failures], None]) -> None:
        items = list(ends.items())
        if len(items) == 1:
            outcomes = [_make_durable(items[0])]
        else:  # the fsyncs of several logs in parallel (an fsync releases the GIL)
            outcomes = list(self._fsyncs.map(_make_durable, items))
        done({plog: error for (plog, _end), error in zip(items, outcomes) if error is not None})

    def call(self, node_id: int, request: Any, timeout_ms: int, done: Callable[[Outcome], None]) -> None:
        if node_id == self.node_id and self._local is not None:
            self._local(request, done)
            return
        stubs_name, method = METHODS[type(request)]
        try:
            stubs = self._channels.stubs(self._address_of(node_id))
            outcome: Outcome = call(getattr(getattr(stubs, stubs_name), method), request, timeout_ms / 1000,
                                    check=False)
        except KafkaError as exc:
            outcome = exc
        done(outcome)

    # ------------------------------------------------------------ helpers

    def _run(self, work: Callable[[], None], label: str) -> None:
        try:
            work()
        except Exception:  # a bug in one piece of work must not go unseen (an executor would swallow it)
            log.exception("%s failed", label)
        finally:
            self._finished()

    def _finished(self) -> None:
        with self._settled:
            self._outstanding -= 1
            if self._outstanding == 0:
                self._settled.notify_all()


def _make_durable(item: tuple[PartitionLog, int]) -> KafkaError | None:
    plog, end = item
    try:
        plog.make_durable(end)
    except KafkaError as exc:
        return exc
    except Exception as exc:  # a node bug: only this log's waiters fail
        log.exception("making %s durable failed", plog)
        return UnknownServerError(f"[UNKNOWN_SERVER_ERROR] {type(exc).__name__}: {exc}")
    return None
