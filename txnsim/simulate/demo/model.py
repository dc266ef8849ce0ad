"""The demo model: wires the coordinator, the partitions and the clients, and checks them.

After every step it checks only what the step produced (a poll, a marker, a restart), so a
check costs nothing when nothing happened. At the end, the Jepsen checks of `txnsim chaos`
run over the history the clients kept.
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import ClassVar

from txnsim.chaos.checker import check as chaos_check
from txnsim.chaos.history import FinalRead, History, Observed, Polled
from txnsim.simulate.demo.clients import TOPIC, Consumer, Producer
from txnsim.simulate.demo.coordinator import CoordinatorNode
from txnsim.simulate.demo.partition import PartitionNode
from txnsim.simulate.model import Model, Report, Violation
from txnsim.simulate.network import Network
from txnsim.simulate.world import World

COORDINATOR = "n0"
PARTITION_NODES = ["n1", "n2"]


class DemoModel(Model):
    name = "demo"
    description = "a toy of Kafka's transactions: one coordinator, two partitions, producers and a consumer"
    BUGS: ClassVar[Mapping[str, str]] = {
        "ack-before-fsync": "the coordinator answers EndTxn before its decision is durable (a crash takes back "
                            "an acknowledged commit)",
        "no-dedup": "a partition appends a duplicated Produce twice (duplicate records after a dup fault)",
        "dirty-read": "read_committed ignores the LSO and the markers (returns undecided and aborted records)",
    }
    WORKLOADS: ClassVar[Mapping[str, str]] = {
        "default": "2 transactional producers, 1 read_committed consumer",
        "busy": "6 transactional producers, 1 read_committed consumer",
    }
    INVARIANTS: ClassVar[Mapping[str, str]] = {
        "read-committed": "a poll returns only records of transactions whose commit is durable",
        "atomicity": "every partition of a transaction writes the coordinator's decision as its marker",
        "durable-commit": "a commit acknowledged to a client is in the coordinator's durable log after a restart",
    }

    def __init__(self, *, bug: str | None = None, workload: str | None = None) -> None:
        super().__init__(bug=bug, workload=workload)
        self.producer_count = 6 if self.workload == "busy" else 2
        #: ground truth: the durable decision of every transaction, as the coordinator made it
        self.truth: dict[str, bool] = {}
        self.acknowledged: dict[str, bool] = {}
        self._new_polls: list[Polled] = []
        self._restarted = False
        self._new_markers: list[tuple[str, str, bool]] = []
        self._bit_flips = 0
        self._clock_jumps = 0

    def nodes(self) -> Sequence[str]:
        return [COORDINATOR, *PARTITION_NODES]

    def clients(self) -> Sequence[str]:
        return [p.name for p in self.producers] + [self.consumer.name]

    def setup(self, world: World, network: Network) -> None:
        self.history = History(clock=lambda: world.now_ms / 1000)
        self.coordinator = CoordinatorNode(COORDINATOR, network, PARTITION_NODES,
                                           ack_before_fsync=self.bug == "ack-before-fsync",
                                           on_durable=self.truth.__setitem__)
        self.partitions = [PartitionNode(name, i, network, dedup=self.bug != "no-dedup", lso=self.bug != "dirty-read",
                                         on_marker=lambda *marker: self._new_markers.append(marker))
                           for i, name in enumerate(PARTITION_NODES)]
        self.producers = [Producer(f"c{i}", i + 1, network, self.history, world.rng(f"workload.c{i}"), COORDINATOR,
                                   PARTITION_NODES, self.acknowledged.__setitem__)
                          for i in range(self.producer_count)]
        self.consumer = Consumer(f"c{self.producer_count}", network, self.history, PARTITION_NODES,
                                 self._new_polls.append)
        for producer in self.producers:
            producer.start()
        self.consumer.start()

    # ------------------------------------------------------------ invariants after every step

    def check(self, world: World) -> list[Violation]:
        if not (self._new_polls or self._restarted or self._new_markers):
            return []
        found: list[Violation] = []
        for polled in self._new_polls:
            for r in polled.records:
                if self.truth.get(str(r.writer)) is not True:
                    state = {None: "undecided", False: "aborted"}[self.truth.get(str(r.writer))]
                    found.append(Violation("read-committed", f"{polled.consumer} read {TOPIC}-{r.partition}@{r.offset}"
                                                             f" value {r.value} of {state} transaction {r.writer}"))
        self._new_polls.clear()
        for node, txn, commit in self._new_markers:
            if self.truth.get(txn) is not commit:
                found.append(Violation("atomicity", f"{node} wrote a {'commit' if commit else 'abort'} marker for "
                                                    f"{txn}, whose decision is {self.truth.get(txn)}"))
        self._new_markers.clear()
        if self._restarted:
            self._restarted = False
            durable = {txn for txn, _, _ in self.coordinator.durable_log}
            lost = [txn for txn, committed in self.acknowledged.items() if committed and txn not in durable]
            if lost:
                found.append(Violation("durable-commit", f"{COORDINATOR} restarted without the commit of {lost[0]}, "
                                                         f"which its client was told had committed"))
        return found

    # ------------------------------------------------------------ faults

    def crash(self, node: str) -> None:
        if node == COORDINATOR:
            self.coordinator.crash()

    def restart(self, node: str) -> None:
        if node == COORDINATOR:
            self.coordinator.restart()
            self._restarted = True

    def slow_fsync(self, node: str, extra_ms: int) -> None:
        if node == COORDINATOR:
            self.coordinator.fsync_extra_ms = extra_ms

    def flip_bit(self, node: str, rng: random.Random) -> None:
        self._bit_flips += 1  # the demo keeps no bytes on a disk: a flip changes nothing

    def clock_jump(self, node: str, delta_ms: int) -> None:
        self._clock_jumps += 1  # the demo never reads a local clock: a jump changes nothing

    def quiesce(self) -> None:
        for producer in self.producers:
            producer.running = False
        self.consumer.running = False

    # ------------------------------------------------------------ the end

    def finish(self, world: World) -> Report:
        final = FinalRead()
        final.records[TOPIC] = [Observed(TOPIC, p.index, r.offset, r.value, r.txn)
                                for p in self.partitions for r in p.committed_records()]
        final.complete = not any(p.log.open_txns for p in self.partitions)
        extra = []
        if not final.complete:
            hanging = next(f"{p.name}: {txn} at offset {offset}" for p in self.partitions
                           for txn, offset in sorted(p.log.open_txns.items(), key=lambda kv: kv[1]))
            extra.append(Violation("hanging-transaction", f"an undecided transaction holds the LSO after every "
                                                          f"fault healed ({hanging})"))
        return Report.of_check(chaos_check(self.history.events(), final, input_topic=TOPIC, output_topic="-"), extra)

    def counters(self) -> dict[str, int]:
        committed = sum(1 for c in self.acknowledged.values() if c)
        return {"transactions committed": committed,
                "transactions aborted": len(self.acknowledged) - committed,
                "transactions begun": sum(p.txn_count for p in self.producers),
                "records written": sum(p.log.end_offset for p in self.partitions),
                "records polled": self.history.counters["records polled"],
                "bit flips ignored": self._bit_flips,
                "clock jumps ignored": self._clock_jumps}
