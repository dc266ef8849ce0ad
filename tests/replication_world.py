"""A small world for the replication drivers' tests: nodes whose NodeIO runs on the simulator's clock, whose
calls are messages with a latency over links a test can cut, and whose fsyncs take a millisecond on the
simulator's disk. The drivers under test are the shipping ones; only the world is the test's.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from coordinator.runtime.io import Cancellable, Failures, Outcome
from partitions import PartitionLog
from proto.errors import KafkaError, KafkaTimeoutError
from txnsim.simulate.world import World

LATENCY_MS = 1
FSYNC_MS = 1


class Net:
    """Messages between nodes, LATENCY_MS each way; a cut link (or a downed node) drops them."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.handlers: dict[int, Callable[[Any, Callable[[Outcome], None]], None]] = {}
        self.cut: set[tuple[int, int]] = set()
        self.calls = 0

    def isolate(self, node: int, others: list[int]) -> None:
        for other in others:
            self.cut |= {(node, other), (other, node)}

    def call(self, src: int, dst: int, request: Any, timeout_ms: int, done: Callable[[Outcome], None]) -> None:
        self.calls += 1
        finished = [False]

        def finish(outcome: Outcome) -> None:
            if not finished[0]:
                finished[0] = True
                done(outcome)
        timer = self.world.after(timeout_ms, finish, KafkaTimeoutError(f"node {dst} did not answer node {src}"))

        def reply(response: Outcome) -> None:
            def arrive() -> None:
                if (dst, src) not in self.cut:
                    timer.cancel()
                    finish(response)
            self.world.after(LATENCY_MS, arrive)

        def deliver() -> None:
            handler = self.handlers.get(dst)  # none: the node is down
            if (src, dst) not in self.cut and handler is not None:
                handler(request, reply)
        self.world.after(LATENCY_MS, deliver)


class WorldIO:
    """NodeIO on the world's clock and the Net; once `down` (the process killed) none of its work runs."""

    def __init__(self, world: World, net: Net, node_id: int) -> None:
        self.world, self.net, self.node_id = world, net, node_id
        self.down = False

    def now_ms(self) -> int:
        return self.world.now_ms

    def after(self, delay_ms: int, work: Callable[[], None], label: str) -> Cancellable:
        return self.world.after(delay_ms, self._unless_down, work)

    def soon(self, work: Callable[[], None], label: str) -> None:
        self.world.after(0, self._unless_down, work)

    def _unless_down(self, work: Callable[[], None]) -> None:
        if not self.down:
            work()

    def durable(self, ends: Mapping[PartitionLog, int], done: Callable[[Failures], None]) -> None:
        def fsynced() -> None:
            if self.down:
                return
            failures: Failures = {}
            for plog, end in ends.items():
                try:
                    plog.make_durable(end)
                except KafkaError as error:
                    failures[plog] = error
            done(failures)
        self.world.after(FSYNC_MS, fsynced)

    def call(self, node_id: int, request: Any, timeout_ms: int, done: Callable[[Outcome], None]) -> None:
        if not self.down:
            self.net.call(self.node_id, node_id, request, timeout_ms, lambda outcome: self._unless_down(
                lambda: done(outcome)))


