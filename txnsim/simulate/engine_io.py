"""A simulated node's world: the I/O interface the shipping drivers run over (coordinator/runtime/io.py),
carried out on the simulator's clock, network and disk, for any model whose nodes run shipping drivers.

Timers are the node's simulated timers (a crash cancels them, a pause holds them); `soon` is a timer of no
delay; a make-durable is the node's fsync time later, then the real PartitionLog.make_durable on the
simulated disk (a crash in between loses the write, unacknowledged); a call to another node is a simulated
message with its latency and faults, and one to this node runs its handler at once, as a node process does.
A model adds what it watches through the two hooks (the cluster model's sim_io.py: planted bugs that
acknowledge before the fsync, and its invariant recorder).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from coordinator.runtime.io import Cancellable, Failures, Outcome
from partitions import PartitionLog
from proto.errors import KafkaError, KafkaTimeoutError
from txnsim.simulate.network import TIMED_OUT, Network

#: a local call's handler: the request, and where its outcome goes
LocalHandler = Callable[[Any, Callable[[Outcome], None]], None]


class EngineIO:
    """NodeIO for one simulated node named `name` (node id `node_id`; its peers are named n<id>)."""

    def __init__(self, name: str, node_id: int, network: Network, fsync_ms: Callable[[], int]) -> None:
        self.name = name
        self.node_id = node_id
        self._net = network
        self._base_fsync_ms = fsync_ms
        self.extra_fsync_ms = 0
        self._local: LocalHandler | None = None

    def serve_locally(self, handler: LocalHandler) -> None:
        self._local = handler

    @property
    def fsync_ms(self) -> int:
        return self._base_fsync_ms() + self.extra_fsync_ms

    # ------------------------------------------------------------ hooks

    def acknowledges_early(self, ends: Mapping[PartitionLog, int]) -> bool:
        """Whether these writes are answered before their fsync (a model's planted bug)."""
        return False

    def fsynced(self, plog: PartitionLog) -> None:
        """`plog` was just made durable here."""

    # ------------------------------------------------------------ NodeIO

    def now_ms(self) -> int:
        return self._net.now(self.name)

    def after(self, delay_ms: int, work: Callable[[], None], label: str) -> Cancellable:
        return self._net.set_timer(self.name, max(0, delay_ms), work, label=label)

    def soon(self, work: Callable[[], None], label: str) -> None:
        self._net.set_timer(self.name, 0, work, label=label)

    def durable(self, ends: Mapping[PartitionLog, int], done: Callable[[Failures], None]) -> None:
        """The fsync's time passes, then it happens (a crash in between loses the writes), then `done`."""
        ends = dict(ends)
        early = self.acknowledges_early(ends)
        if early:  # a planted bug: acknowledged before the fsync
            done({})

        def fsync() -> None:
            failures: Failures = {}
            for plog, end in ends.items():
                try:
                    plog.make_durable(end)
                except KafkaError as exc:
                    failures[plog] = exc
                    continue
                self.fsynced(plog)
            if not early:
                done(failures)
        self._net.set_timer(self.name, self.fsync_ms, fsync, label="fsync")

    def call(self, node_id: int, request: Any, timeout_ms: int, done: Callable[[Outcome], None]) -> None:
        if node_id == self.node_id and self._local is not None:
            self._local(request, done)
            return

        def answered(response: object) -> None:
            done(KafkaTimeoutError(f"node n{node_id} did not answer {type(request).__name__} within {timeout_ms} ms")
                 if response is TIMED_OUT else response)
        self._net.call(self.name, f"n{node_id}", request, timeout_ms, answered)
