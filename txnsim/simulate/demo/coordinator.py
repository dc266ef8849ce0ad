"""The demo coordinator: decides each transaction, makes the decision durable, then writes markers.

Invariant: a client is told its transaction committed only once the decision is durable,
so a crash cannot take back a commit that was acknowledged (the `ack-before-fsync` bug
breaks exactly this). Markers are retried until every partition acknowledged them, also
after a restart, from the durable log.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from txnsim.simulate.demo.messages import EndTxn, EndTxnResult, Marker
from txnsim.simulate.network import TIMED_OUT, Envelope, Network

MARKER_TIMEOUT_MS = 100
FSYNC_MS = 8


@dataclass(slots=True)
class Decision:
    txn: str
    commit: bool
    partitions: tuple[int, ...]
    durable: bool = False
    #: EndTxn requests (and retries) waiting for the decision to be durable
    waiting: list[Envelope] = field(default_factory=list)
    #: partitions that have not acknowledged the marker yet
    unmarked: set[int] = field(default_factory=set)


class CoordinatorNode:
    def __init__(self, name: str, network: Network, partition_nodes: list[str], *, ack_before_fsync: bool,
                 on_durable: Callable[[str, bool], None]) -> None:
        self.name = name
        self.network = network
        self.partition_nodes = partition_nodes
        self.ack_before_fsync = ack_before_fsync
        self.on_durable = on_durable
        #: survives crashes: (transaction, commit, partitions) in the order they became durable
        self.durable_log: list[tuple[str, bool, tuple[int, ...]]] = []
        self.decisions: dict[str, Decision] = {}
        #: durable too: transactions whose markers every partition acknowledged
        self.completed: set[str] = set()
        self.fsync_extra_ms = 0
        network.register(name, self.receive)

    def receive(self, env: Envelope) -> None:
        if isinstance(env.message, EndTxn):
            self._end_txn(env, env.message)

    def _end_txn(self, env: Envelope, request: EndTxn) -> None:
        decision = self.decisions.get(request.txn)
        if decision is None:
            decision = self.decisions[request.txn] = Decision(request.txn, request.commit, request.partitions)
            self.network.set_timer(self.name, FSYNC_MS + self.fsync_extra_ms, self._synced, decision,
                                   label=f"fsync {request.txn}")
        if decision.durable or self.ack_before_fsync:
            self.network.reply(env, EndTxnResult(decision.txn, decision.commit))
        else:
            decision.waiting.append(env)

    def _synced(self, decision: Decision) -> None:
        decision.durable = True
        self.durable_log.append((decision.txn, decision.commit, decision.partitions))
        self.on_durable(decision.txn, decision.commit)
        for env in decision.waiting:
            self.network.reply(env, EndTxnResult(decision.txn, decision.commit))
        decision.waiting.clear()
        self._send_markers(decision, set(decision.partitions))

    def _send_markers(self, decision: Decision, partitions: set[int]) -> None:
        decision.unmarked = set(partitions)
        for partition in sorted(partitions):
            self._send_marker(decision, partition)

    def _send_marker(self, decision: Decision, partition: int) -> None:
        def acked(response: object) -> None:
            if response is TIMED_OUT:
                self._send_marker(decision, partition)
            else:
                decision.unmarked.discard(partition)
                if not decision.unmarked:
                    self.completed.add(decision.txn)
        self.network.call(self.name, self.partition_nodes[partition], Marker(decision.txn, decision.commit),
                          MARKER_TIMEOUT_MS, acked)

    def crash(self) -> None:
        self.decisions.clear()  # unsynced decisions are lost; markers in progress are resent on restart

    def restart(self) -> None:
        for txn, commit, partitions in self.durable_log:
            if txn in self.completed:
                continue
            decision = self.decisions[txn] = Decision(txn, commit, partitions, durable=True)
            self._send_markers(decision, set(partitions))
