"""What a node's drivers ask of the world: the clock, timers, other work, durable logs and calls to nodes.

The drivers (the transaction coordinator's, the partition leader's, ...) are written once against this
interface; two worlds implement it. The real one (real_io.py) uses the wall and monotonic clocks, timer and
pool threads, fsync and gRPC; the simulator's (txnsim/simulate/cluster/sim_io.py) its simulated clock,
network and disk, under the faults a seed draws. This is Kafka's CoordinatorRuntime over a PartitionWriter,
and TigerBeetle's replica over its message bus, storage and time.

One rule makes a driver right in both worlds: a callback may run before the call that takes it returns (the
real world fsyncs and calls inline when it can) or much later (the simulator always answers later), on any
thread. So a driver holds no lock while it calls into the I/O, and never assumes which comes first.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

from partitions import PartitionLog
from proto.errors import KafkaError

#: what a call to a node comes back with: its response, or the error that stood for one (unreachable, timed
#: out, or the handler's own error)
Outcome = Any
#: the logs of a durable() that could not be made durable, with why (empty: all of them are)
Failures = dict[PartitionLog, KafkaError]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class NodeIO(Protocol):
    """The world one node runs in."""

    #: this node's id
    node_id: int

    def now_ms(self) -> int:
        """The node's wall clock, in ms: what stamps records and deadlines (it may jump; durations come from
        `after`)."""
        ...

    def after(self, delay_ms: int, work: Callable[[], None], label: str) -> Cancellable:
        """Run `work` once `delay_ms` have passed, unless cancelled; a crash of the node cancels it."""
        ...

    def soon(self, work: Callable[[], None], label: str) -> None:
        """Run `work` apart from the caller, as soon as possible (work that must not hold the caller up: a
        snapshot, markers to several nodes at once)."""
        ...

    def durable(self, ends: Mapping[PartitionLog, int], done: Callable[[Failures], None]) -> None:
        """Make each log durable up to its end offset (appended with wait_durable=False), several logs' fsyncs
        at once; then `done(failures)`."""
        ...

    def call(self, node_id: int, request: Any, timeout_ms: int, done: Callable[[Outcome], None]) -> None:
        """Send `request` to node `node_id` (this node's own handlers when it is this node); `done` gets the
        response, or a KafkaError: KafkaTimeoutError when no answer came within `timeout_ms`,
        KafkaConnectionError when the node could not be reached."""
        ...


def as_future(start: Callable[[Callable[[Outcome], None]], None]) -> Future[Any]:
    """A callback-style driver call as a Future: its response, or the error it came back with."""
    answer: Future[Any] = Future()

    def done(outcome: Outcome) -> None:
        if isinstance(outcome, BaseException):
            answer.set_exception(outcome)
        else:
            answer.set_result(outcome)
    start(done)
    return answer


def wait_for(start: Callable[[Callable[[Outcome], None]], None]) -> Any:
    """Run a callback-style driver call and wait for its outcome on this thread: the response, or the error it
    came back with, raised. For a node process's blocking front doors only: the real I/O completes the work on
    its own threads, the simulator's never would while this thread waits."""
    return as_future(start).result()
