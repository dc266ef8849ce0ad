"""The demo's clients: transactional producers and a read_committed consumer.

They record what they did in a `txnsim.chaos` History (simulated seconds as its clock), so
the final checks are the Jepsen checks of `txnsim chaos`, not a second copy of them.
A producer writes one or two partitions, commits if every write was acknowledged (or
aborts on purpose now and then), aborts otherwise, and retries EndTxn until answered.
"""
from __future__ import annotations

import random
from collections.abc import Callable

from proto.structs import TopicPartition
from txnsim.chaos.history import History, Observed, Outcome, Polled, Seeked
from txnsim.simulate.demo.messages import (
    EndTxn,
    EndTxnResult,
    Fetch,
    FetchResult,
    Produce,
    ProduceAck,
)
from txnsim.simulate.network import TIMED_OUT, Network

TOPIC = "demo"
PRODUCE_TIMEOUT_MS = 200
END_TXN_TIMEOUT_MS = 300
FETCH_TIMEOUT_MS = 200
POLL_INTERVAL_MS = 10
ABORT_PER_MILLE = 100


class Producer:
    def __init__(self, name: str, index: int, network: Network, history: History, rng: random.Random,
                 coordinator: str, partition_nodes: list[str], on_result: Callable[[str, bool], None]) -> None:
        self.name = name
        self.network = network
        self.history = history
        self.rng = rng
        self.coordinator = coordinator
        self.partition_nodes = partition_nodes
        self.on_result = on_result
        self.next_value = index * 10_000_000
        self.txn_count = 0
        self.running = True
        network.register(name, lambda env: None)

    def start(self) -> None:
        self.network.set_timer(self.name, self.rng.randint(0, 5), self._begin, label="begin")

    def _begin(self) -> None:
        if not self.running:
            return
        self.txn_count += 1
        txn = f"{self.name}/{self.txn_count}"
        self.history.begun(txn, self.name)
        count = self.rng.randint(1, len(self.partition_nodes))
        partitions = tuple(sorted(self.rng.sample(range(len(self.partition_nodes)), count)))
        results: dict[int, bool] = {}

        for partition in partitions:
            self.next_value += 1
            value = self.next_value

            def answered(response: object, partition: int = partition, value: int = value) -> None:
                ok = isinstance(response, ProduceAck) and not response.fenced
                offset = response.offset if ok and isinstance(response, ProduceAck) else None
                error = None if ok else (TimeoutError() if response is TIMED_OUT else PermissionError())
                self.history.sent(self.name, txn, TOPIC, partition, value, offset, error)
                results[partition] = ok
                if len(results) == len(partitions):
                    commit = all(results.values()) and self.rng.randrange(1000) >= ABORT_PER_MILLE
                    if commit:
                        self.history.commit_started(txn)
                    self._end(txn, commit, partitions, on_purpose=all(results.values()) and not commit)

            self.network.call(self.name, self.partition_nodes[partition], Produce(txn, value), PRODUCE_TIMEOUT_MS,
                              answered)

    def _end(self, txn: str, commit: bool, partitions: tuple[int, ...], *, on_purpose: bool) -> None:
        def answered(response: object) -> None:
            if not isinstance(response, EndTxnResult):  # timed out: ask again, the coordinator answers retries
                self.network.set_timer(self.name, 20, lambda: self._end(txn, commit, partitions, on_purpose=on_purpose),
                                       label=f"retry EndTxn {txn}")
                return
            outcome = Outcome.COMMITTED if response.committed else Outcome.ABORTED
            self.history.ended(txn, outcome, on_purpose=on_purpose)
            self.on_result(txn, response.committed)
            self.network.set_timer(self.name, self.rng.randint(0, 5), self._begin, label="begin")
        self.network.call(self.name, self.coordinator, EndTxn(txn, commit, partitions), END_TXN_TIMEOUT_MS, answered)


class Consumer:
    """Polls every partition in turn, one fetch in flight per partition, from where it left off."""

    def __init__(self, name: str, network: Network, history: History, partition_nodes: list[str],
                 on_polled: Callable[[Polled], None]) -> None:
        self.name = name
        self.network = network
        self.history = history
        self.partition_nodes = partition_nodes
        self.on_polled = on_polled
        self.positions = [0] * len(partition_nodes)
        self.running = True
        network.register(name, lambda env: None)

    def start(self) -> None:
        for partition in range(len(self.partition_nodes)):
            self.history.append(Seeked(self.name, TopicPartition(TOPIC, partition), 0, "start", self.history.now()))
            self.network.set_timer(self.name, POLL_INTERVAL_MS, self._fetch, partition, label=f"poll {partition}")

    def _fetch(self, partition: int) -> None:
        if not self.running:
            return

        def answered(response: object) -> None:
            if isinstance(response, FetchResult):
                if response.records:
                    polled = Polled(self.name, tuple(Observed(TOPIC, partition, offset, value, txn)
                                                     for offset, value, txn in response.records), self.history.now())
                    self.history.append(polled)
                    self.on_polled(polled)
                self.positions[partition] = max(self.positions[partition], response.next_offset)
            self.network.set_timer(self.name, POLL_INTERVAL_MS, self._fetch, partition, label=f"poll {partition}")
        self.network.call(self.name, self.partition_nodes[partition], Fetch(self.positions[partition]),
                          FETCH_TIMEOUT_MS, answered)
