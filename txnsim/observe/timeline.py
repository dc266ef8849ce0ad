"""A transaction's timeline, built from what is durable: no I/O here, only decoded entries in, events out.

Three sources, each already on disk (txnsim/observe/log_reader.py reads them):
- the `__transaction_state` entries of the transactional id (each a state, an epoch, partitions, the
  coordinator's time of the change, and the leader epoch of the shard that wrote it);
- the data partitions' batches of its producer ids, and their COMMIT/ABORT control batches;
- the ownership log (who took which log over, when, and why).

The coordinator's steps go in the lane of the node that owned the shard when it wrote them (found
through the leader epoch stamped in the batch), a partition's batches in that partition's lane.
Requests leave no durable trace of their own, so InitProducerId, AddPartitions and EndTxn are
placed at the time of the state write they caused. A marker's acknowledgement is the moment the
partition made it durable (the coordinator counts it as acknowledged on that reply).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from coordinator.txn.metadata import TxnMetadata
from proto.structs import TRANSACTION_STATE_TOPIC, TopicPartition, TransactionState

S = TransactionState


@dataclass(frozen=True, slots=True)
class StateEntry:
    """One durable `__transaction_state` record of the transactional id (value None: a tombstone)."""

    offset: int
    timestamp_ms: int
    leader_epoch: int
    value: TxnMetadata | None


@dataclass(frozen=True, slots=True)
class DataBatch:
    """One batch of a data partition, as its header says (control batches carry their marker)."""

    topic_partition: TopicPartition
    base_offset: int
    last_offset: int
    timestamp_ms: int
    producer_id: int
    producer_epoch: int
    leader_epoch: int
    records: int
    is_control: bool = False
    #: "COMMIT" or "ABORT" for a control batch
    marker: str = ""
    coordinator_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OwnershipEvent:
    """One line of DATA/metadata/ownership.log."""

    time_ms: int
    node_id: int
    action: str
    topic: str
    partition: int
    leader_epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """One step, in one lane: `node N` (the coordinator's side) or `topic-partition` (the data's side)."""

    time_ms: int
    lane: str
    kind: str
    label: str
    node_id: int = -1
    producer_epoch: int = -1
    detail: str = ""
    #: which of the id's transactions this step belongs to, counted from 1 (0: none, or not known)
    transaction: int = 0
    #: for a consumer group's step (group_timeline.py): the generation it belongs to
    generation: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: a consumer group's kinds of event (group_timeline.py), in the order they happen at one moment
GROUP_KINDS = ("Rebalance", "Membership", "Assignment", "MemberLeft", "GroupDeleted")
#: every kind of event, in the order they happen within one transaction (ties at one time sort so)
KINDS = ("InitProducerId", "AddPartitions", "Produce", "EndTxn", "Timeout", "Fence", "Prepare", "Marker",
         "MarkerAck", "Complete", "Expired", "Failover", *GROUP_KINDS)
_ORDER = {kind: i for i, kind in enumerate(KINDS)}


def node_lane(node_id: int) -> str:
    return f"node {node_id}" if node_id >= 0 else "node ?"


def partition_lane(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


class LogOwners:
    """Which node led a log at a leader epoch (or, failing that, at a time), from the ownership log."""

    def __init__(self, changes: Sequence[OwnershipEvent], first_owners: Mapping[tuple[str, int], int]) -> None:
        self._first = first_owners
        self._by_epoch: dict[tuple[str, int, int], int] = {}
        self._acquired: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for c in sorted(changes, key=lambda c: c.time_ms):
            if c.action == "acquired":
                self._by_epoch[(c.topic, c.partition, c.leader_epoch)] = c.node_id
                self._acquired.setdefault((c.topic, c.partition), []).append((c.time_ms, c.node_id))

    def node(self, topic: str, partition: int, leader_epoch: int, time_ms: int) -> int:
        found = self._by_epoch.get((topic, partition, leader_epoch))
        if found is not None:
            return found
        owner = self._first.get((topic, partition), -1)
        for t, node_id in self._acquired.get((topic, partition), ()):
            if t > time_ms:
                break
            owner = node_id
        return owner


def build_timeline(transactional_id: str, shard: int, entries: Sequence[StateEntry],
                   batches: Iterable[DataBatch], ownership: Sequence[OwnershipEvent],
                   first_owners: Mapping[tuple[str, int], int] | None = None) -> list[TimelineEvent]:
    """Every step of `transactional_id`'s transactions, oldest first.

    `entries`: its `__transaction_state` records (shard `shard`) in log order; `batches`: data batches of
    any producer (those of other producer ids are ignored); `ownership`: the ownership log;
    `first_owners`: (topic, partition) -> the node that led it before the ownership log says otherwise
    (a node does not log the logs it opens at start-up as their preferred owner).
    """
    owners = LogOwners(ownership, first_owners or {})
    events: list[TimelineEvent] = []
    transactions = _Transactions()
    previous: TxnMetadata | None = None
    for entry in entries:
        node = owners.node(TRANSACTION_STATE_TOPIC, shard, entry.leader_epoch, entry.timestamp_ms)
        lane = node_lane(node)
        value = entry.value
        if value is None:
            events.append(TimelineEvent(entry.timestamp_ms, lane, "Expired", "transactional id expired", node))
            previous = None
            continue
        number = transactions.saw(entry.timestamp_ms, previous, value)
        events.extend(replace(e, transaction=number)
                      for e in _state_events(entry.timestamp_ms, lane, node, previous, value))
        previous = value
    events.extend(_data_events(batches, transactions, owners))
    if events:
        events.extend(_failovers(events, shard, ownership, transactions))
    return sort_events(events)


def sort_events(events: Iterable[TimelineEvent]) -> list[TimelineEvent]:
    """Oldest first; steps at one time in the order they happen."""
    return sorted(events, key=lambda e: (e.time_ms, _ORDER[e.kind]))


class _Transactions:
    """Numbers the id's transactions as the state log shows them begin, and tells which one a data batch
    or a marker belongs to, by its producer id and epoch (and time, when epochs repeat, as in V1)."""

    def __init__(self) -> None:
        self.count = 0
        self.producer_ids: set[int] = set()
        self._begun: list[tuple[int, int]] = []                            # (time, number)
        self._ongoing: dict[tuple[int, int], list[tuple[int, int]]] = {}   # (pid, epoch) -> [(begin time, number)]
        self._prepared: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (pid, epoch) -> [(prepare time, number)]

    def saw(self, t: int, before: TxnMetadata | None, now: TxnMetadata) -> int:
        """The number of the transaction this state write belongs to (an InitProducerId: the next one)."""
        self.producer_ids.add(now.producer_id)
        key = (now.producer_id, now.producer_epoch)
        if now.state == S.ONGOING and (before is None or before.state != S.ONGOING):
            self.count += 1
            self._begun.append((t, self.count))
            self._ongoing.setdefault(key, []).append((t, self.count))
        elif now.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            self._prepared.setdefault(key, []).append((t, self.count))
        elif now.state == S.EMPTY:
            return self.count + 1
        return self.count

    @staticmethod
    def _latest(candidates: list[tuple[int, int]], t: int) -> int:
        """The number of the last candidate at or before `t`, else the first one."""
        found = candidates[0][1]
        for when, number in candidates:
            if when <= t:
                found = number
        return found

    def of_batch(self, pid: int, epoch: int, t: int) -> int:
        # a batch's timestamp is the client's, taken just before its request added the partition
        candidates = self._ongoing.get((pid, epoch))
        return self._latest(candidates, t + 1_000) if candidates else 0

    def of_marker(self, pid: int, epoch: int, t: int) -> int:
        candidates = self._prepared.get((pid, epoch))
        return self._latest(candidates, t) if candidates else 0

    def at(self, t: int) -> int:
        return self._latest(self._begun, t) if self._begun and self._begun[0][0] <= t else 0


def _state_events(t: int, lane: str, node: int, before: TxnMetadata | None, now: TxnMetadata) -> list[TimelineEvent]:
    """What one state write says happened, given the value before it."""
    epoch = now.producer_epoch
    out: list[TimelineEvent] = []

    def add(kind: str, label: str, detail: str = "") -> None:
        out.append(TimelineEvent(t, lane, kind, label, node, epoch, detail))

    if now.state == S.EMPTY:
        if before is None or before.producer_epoch != epoch or before.producer_id != now.producer_id:
            add("InitProducerId", f"InitProducerId: producer {now.producer_id} epoch {epoch}",
                f"timeout {now.timeout_ms} ms")
    elif now.state == S.ONGOING:
        had = before.partitions if before is not None and before.state == S.ONGOING else frozenset()
        added = sorted(now.partitions - had)
        if added:
            add("AddPartitions", "AddPartitions: " + ", ".join(partition_lane(tp) for tp in added),
                "transaction begins" if not had else "")
    elif now.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        outcome = "commit" if now.state == S.PREPARE_COMMIT else "abort"
        if now.ended_by_fence:
            if now.start_time_ms >= 0 and t >= now.start_time_ms + now.timeout_ms:
                add("Timeout", f"timed out after {now.timeout_ms} ms: fenced at epoch {epoch}")
            else:
                add("Fence", f"fenced: epoch bumped to {epoch} (a new instance)")
        else:
            add("EndTxn", f"EndTxn({outcome})")
        targets = ", ".join(partition_lane(tp) for tp in sorted(now.partitions)) or "no partitions"
        add("Prepare", f"{now.state} written", f"markers owed to {targets}")
    elif now.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        add("Complete", f"{now.state} written", "every marker acknowledged")
    return out


def _data_events(batches: Iterable[DataBatch], transactions: _Transactions, owners: LogOwners) -> list[TimelineEvent]:
    out: list[TimelineEvent] = []
    for b in batches:
        if b.producer_id not in transactions.producer_ids:
            continue
        tp = b.topic_partition
        lane = partition_lane(tp)
        node = owners.node(tp.topic, tp.partition, b.leader_epoch, b.timestamp_ms)
        offsets = f"offset {b.base_offset}" if b.base_offset == b.last_offset else \
            f"offsets {b.base_offset}..{b.last_offset}"
        if b.is_control:
            number = transactions.of_marker(b.producer_id, b.producer_epoch, b.timestamp_ms)
            out.append(TimelineEvent(b.timestamp_ms, lane, "Marker", f"{b.marker} marker at offset {b.base_offset}",
                                     node, b.producer_epoch, f"coordinator epoch {b.coordinator_epoch}", number))
            out.append(TimelineEvent(b.timestamp_ms, lane, "MarkerAck", f"{b.marker} marker acknowledged",
                                     node, b.producer_epoch, f"durable on node {node}", number))
        else:
            out.append(TimelineEvent(b.timestamp_ms, lane, "Produce", f"batch of {b.records}, {offsets}", node,
                                     b.producer_epoch, "",
                                     transactions.of_batch(b.producer_id, b.producer_epoch, b.timestamp_ms)))
    return out


def _failovers(events: Sequence[TimelineEvent], shard: int, ownership: Sequence[OwnershipEvent],
               transactions: _Transactions) -> list[TimelineEvent]:
    """Ownership changes of the transaction's shard and partitions while its events happened."""
    start = min(e.time_ms for e in events)
    end = max(e.time_ms for e in events)
    partitions = {e.lane for e in events if not e.lane.startswith("node ")}
    out = []
    for c in ownership:
        if not start <= c.time_ms <= end:
            continue
        if c.topic == TRANSACTION_STATE_TOPIC and c.partition == shard:
            what = f"txn shard {shard}"
        elif f"{c.topic}-{c.partition}" in partitions:
            what = f"{c.topic}-{c.partition}"
        else:
            continue
        out.append(TimelineEvent(c.time_ms, node_lane(c.node_id), "Failover",
                                 f"{c.action} {what} (leader epoch {c.leader_epoch})", c.node_id, -1, c.reason,
                                 transactions.at(c.time_ms)))
    return out


def lanes(events: Sequence[TimelineEvent]) -> list[str]:
    """The timeline's lanes: nodes first, then partitions, each sorted; then each consumer group's lane
    followed by its members' lanes in the order they first appear."""
    grouped = list(dict.fromkeys(e.lane for e in sorted(events, key=lambda e: e.time_ms) if e.kind in GROUP_KINDS))
    names = {e.lane for e in events} - set(grouped)
    out = sorted(n for n in names if n.startswith("node ")) + sorted(n for n in names if not n.startswith("node "))
    for group in sorted(n for n in grouped if n.startswith("group ")):
        out.append(group)
        out.extend(n for n in grouped if n.startswith(group.removeprefix("group ") + ": "))
    return out + [n for n in grouped if n not in out]



def last_transactions(events: Sequence[TimelineEvent], count: int) -> list[TimelineEvent]:
    """The events of the id's last `count` transactions (a long-lived transactional id has thousands; a
    picture of them all says nothing). Steps between transactions (InitProducerId) go with the next."""
    newest = max((e.transaction for e in events), default=0)
    return [e for e in events if e.transaction > newest - count]
