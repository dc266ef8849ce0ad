"""The checker: pure functions from a chaos history and the final read to counted anomalies.

Names are those of Jepsen's Kafka checker. A transaction's outcome is what its client was
told: committed when commit_transaction() returned, aborted when abort_transaction()
returned or when commit was never asked for (nothing commits without EndTxn(commit)),
unknown otherwise. Only certain outcomes count against the system: an unknown one may go
either way. Every check returns a Finding: how many, and one example in words.
"""
from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from proto.structs import TopicPartition
from txnsim.chaos.history import (
    ClientError,
    CommitStarted,
    Event,
    FaultEvent,
    FinalRead,
    Observed,
    Outcome,
    Polled,
    Seeked,
    Sent,
    TxnBegun,
    TxnEnded,
)

ANOMALIES = ("lost-write", "unseen", "duplicate", "inconsistent-offsets", "G1a", "precommitted-read",
             "poll-skip", "nonmonotonic-poll", "nonmonotonic-send")

#: what each anomaly means, for the report
MEANINGS = {
    "lost-write": "acknowledged committed record missing although later offsets (or committed input offsets) passed it",
    "unseen": "acknowledged committed record the final read_committed read never returned",
    "duplicate": "the same value at more than one offset of a topic",
    "inconsistent-offsets": "one offset of a partition seen with different values",
    "G1a": "aborted read: read_committed returned a record of an aborted transaction",
    "precommitted-read": "read_committed returned a record before its transaction's commit was asked for",
    "poll-skip": "a consumer's consecutive reads of a partition skipped committed offsets",
    "nonmonotonic-poll": "a consumer's offsets went backwards (or repeated) with no seek in between",
    "nonmonotonic-send": "a producer's acknowledged offsets on a partition went backwards",
}


@dataclass(frozen=True, slots=True)
class Finding:
    name: str
    count: int
    example: str | None = None


@dataclass(slots=True)
class CheckResult:
    findings: dict[str, Finding]
    totals: dict[str, int]
    errors: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def anomalies(self) -> int:
        return sum(f.count for f in self.findings.values())

    @property
    def valid(self) -> bool:
        return self.anomalies == 0


class _Tally:
    """Counts distinct keys and keeps the first example."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.keys: set[object] = set()
        self.example: str | None = None

    def add(self, key: object, example: str) -> None:
        if key in self.keys:
            return
        self.keys.add(key)
        if self.example is None:
            self.example = example

    def finding(self) -> Finding:
        return Finding(self.name, len(self.keys), self.example)


# ------------------------------------------------------------ reading the history

def txn_outcomes(events: Iterable[Event]) -> dict[str, Outcome]:
    """Every transaction's outcome as its client knows it (see the module docstring)."""
    begun: set[str] = set()
    commit_asked: set[str] = set()
    ended: dict[str, Outcome] = {}
    for e in events:
        if isinstance(e, TxnBegun):
            begun.add(e.txn)
        elif isinstance(e, CommitStarted):
            commit_asked.add(e.txn)
        elif isinstance(e, TxnEnded):
            ended[e.txn] = e.outcome
    outcomes: dict[str, Outcome] = {}
    for txn in begun | set(ended) | commit_asked:
        if txn in ended:
            outcomes[txn] = ended[txn]
        else:
            outcomes[txn] = Outcome.UNKNOWN if txn in commit_asked else Outcome.ABORTED
    return outcomes


def _reads(events: Sequence[Event], final: FinalRead) -> list[tuple[str, Observed]]:
    """(who read it, record) for every poll of the workload and every record of the final read."""
    out: list[tuple[str, Observed]] = []
    for e in events:
        if isinstance(e, Polled):
            out.extend((e.consumer, r) for r in e.records)
    for records in final.records.values():
        out.extend(("the final read", r) for r in records)
    return out


def _where(r: Observed) -> str:
    return f"{r.topic}-{r.partition}@{r.offset}"


# ------------------------------------------------------------ the checks

def inconsistent_offsets(events: Sequence[Event], final: FinalRead) -> Finding:
    seen: dict[tuple[str, int, int], dict[int | None, str]] = defaultdict(dict)
    for e in events:
        if isinstance(e, Sent) and e.offset is not None and e.partition is not None:
            seen[(e.topic, e.partition, e.offset)].setdefault(e.value, f"acknowledged to {e.producer}")
    for who, r in _reads(events, final):
        seen[(r.topic, r.partition, r.offset)].setdefault(r.value, f"read by {who}")
    tally = _Tally("inconsistent-offsets")
    for (topic, partition, offset), values in sorted(seen.items()):
        if len(values) > 1:
            described = "; ".join(f"{v} ({src})" for v, src in values.items())
            tally.add((topic, partition, offset), f"{topic}-{partition}@{offset}: {described}")
    return tally.finding()


def duplicate(events: Sequence[Event], final: FinalRead) -> Finding:
    positions: dict[tuple[str, int], set[tuple[int, int]]] = defaultdict(set)
    for _, r in _reads(events, final):
        if r.value is not None:
            positions[(r.topic, r.value)].add((r.partition, r.offset))
    tally = _Tally("duplicate")
    for (topic, value), where in sorted(positions.items()):
        if len(where) > 1:
            at = ", ".join(f"{topic}-{p}@{o}" for p, o in sorted(where))
            tally.add((topic, value), f"value {value} at {at}")
    return tally.finding()


def aborted_read(events: Sequence[Event], final: FinalRead, outcomes: dict[str, Outcome]) -> Finding:
    writers_of: dict[tuple[str, int], set[str]] = defaultdict(set)
    for e in events:
        if isinstance(e, Sent):
            writers_of[(e.topic, e.value)].add(e.txn)
    tally = _Tally("G1a")
    for who, r in _reads(events, final):
        if r.writer is not None:
            writers = {r.writer} if r.writer in outcomes else set()
        else:  # no header: aborted only if every transaction that wrote the value aborted
            writers = writers_of.get((r.topic, r.value), set()) if r.value is not None else set()
        if writers and all(outcomes.get(w) is Outcome.ABORTED for w in writers):
            tally.add((r.topic, r.partition, r.offset),
                      f"{_where(r)} value {r.value} of aborted {', '.join(sorted(writers))}, read by {who}")
    return tally.finding()


def precommitted_read(events: Sequence[Event], outcomes: dict[str, Outcome]) -> Finding:
    """A poll that returned a record before its writer even called commit_transaction().

    The commit is decided while EndTxn is answered, so a record may be visible before
    commit_transaction() returns, never before it is called."""
    commit_asked = {e.txn: e.at for e in events if isinstance(e, CommitStarted)}
    tally = _Tally("precommitted-read")
    for e in events:
        if not isinstance(e, Polled):
            continue
        for r in e.records:
            if r.writer is None or outcomes.get(r.writer) in (None, Outcome.ABORTED):
                continue  # an aborted writer is G1a's business
            asked = commit_asked.get(r.writer)
            if asked is not None and e.at < asked:
                tally.add((r.topic, r.partition, r.offset),
                          f"{e.consumer} read {_where(r)} value {r.value} {1000 * (asked - e.at):.0f} ms before "
                          f"{r.writer} asked to commit")
    return tally.finding()


def lost_write(events: Sequence[Event], final: FinalRead, outcomes: dict[str, Outcome], input_topic: str,
               output_topic: str) -> Finding:
    """Jepsen's rule on both topics (an acknowledged committed record at or below the highest
    offset anyone read, never read itself), plus the pipeline's: a committed input record
    below the group's committed offset whose copy is not in the output."""
    reads = _reads(events, final)
    highest: dict[tuple[str, int], int] = {}
    read_values: dict[str, set[int]] = defaultdict(set)
    for _, r in reads:
        key = (r.topic, r.partition)
        highest[key] = max(highest.get(key, -1), r.offset)
        if r.value is not None:
            read_values[r.topic].add(r.value)
    tally = _Tally("lost-write")
    for e in events:
        if (isinstance(e, Sent) and e.offset is not None and e.partition is not None
                and outcomes.get(e.txn) is Outcome.COMMITTED and e.value not in read_values[e.topic]
                and e.offset <= highest.get((e.topic, e.partition), -1)):
            tally.add((e.topic, e.value), f"{e.topic}-{e.partition}@{e.offset} value {e.value} committed by {e.txn}, "
                                          f"never read; offset {highest[(e.topic, e.partition)]} was")
    copied = {r.value for r in final.records.get(output_topic, ()) if r.value is not None}
    for r in final.records.get(input_topic, ()):
        committed = final.committed.get(r.topic_partition)
        if r.value is not None and committed is not None and r.offset < committed and r.value not in copied:
            tally.add((output_topic, r.value), f"input {_where(r)} value {r.value} is below the group's committed "
                                               f"offset {committed}, but {output_topic} has no copy")
    return tally.finding()


def unseen(events: Sequence[Event], final: FinalRead, outcomes: dict[str, Outcome]) -> Finding:
    final_values = {topic: {r.value for r in records} for topic, records in final.records.items()}
    tally = _Tally("unseen")
    for e in events:
        if (isinstance(e, Sent) and e.offset is not None and outcomes.get(e.txn) is Outcome.COMMITTED
                and e.value not in final_values.get(e.topic, set())):
            tally.add((e.topic, e.value), f"{e.topic}-{e.partition}@{e.offset} value {e.value} committed by {e.txn}, "
                                          f"not in the final read")
    return tally.finding()


def poll_order(events: Sequence[Event], final: FinalRead) -> tuple[Finding, Finding]:
    """poll-skip and nonmonotonic-poll: each consumer's reads of a partition, seek to seek."""
    present: dict[TopicPartition, list[int]] = {
        tp: sorted(offsets) for tp, offsets in _offsets_by_partition(final).items()}
    after: dict[tuple[str, TopicPartition], int] = {}  # reads must go above this offset
    skip, backwards = _Tally("poll-skip"), _Tally("nonmonotonic-poll")
    for e in events:
        if isinstance(e, Seeked):
            after[(e.consumer, e.topic_partition)] = e.offset - 1
        elif isinstance(e, Polled):
            for r in e.records:
                key = (e.consumer, r.topic_partition)
                last = after.get(key)
                after[key] = r.offset
                if last is None:
                    continue
                if r.offset <= last:
                    backwards.add((e.consumer, r.topic_partition, r.offset, e.at),
                                  f"{e.consumer} read {r.topic_partition} offset {r.offset} after {last}, no seek "
                                  f"in between")
                    continue
                offsets = present.get(r.topic_partition, [])
                lo, hi = bisect.bisect_right(offsets, last), bisect.bisect_left(offsets, r.offset)
                if hi > lo:
                    missed = offsets[lo:hi]
                    shown = ", ".join(map(str, missed[:5])) + (" ..." if len(missed) > 5 else "")
                    skip.add((e.consumer, r.topic_partition, r.offset, e.at),
                             f"{e.consumer} read {r.topic_partition} offset {r.offset} right after {last}, skipping "
                             f"committed offset(s) {shown}")
    return skip.finding(), backwards.finding()


def nonmonotonic_send(events: Sequence[Event]) -> Finding:
    last: dict[tuple[str, str, int], tuple[int, str]] = {}
    tally = _Tally("nonmonotonic-send")
    for e in events:
        if not isinstance(e, Sent) or e.offset is None or e.partition is None:
            continue
        key = (e.producer, e.topic, e.partition)
        previous = last.get(key)
        last[key] = (e.offset, e.txn)
        if previous is not None and e.offset <= previous[0]:
            tally.add((e.producer, e.topic, e.partition, e.offset),
                      f"{e.producer} got {e.topic}-{e.partition}@{e.offset} for value {e.value} ({e.txn}) after "
                      f"@{previous[0]} ({previous[1]})")
    return tally.finding()


def _offsets_by_partition(final: FinalRead) -> dict[TopicPartition, set[int]]:
    out: dict[TopicPartition, set[int]] = defaultdict(set)
    for records in final.records.values():
        for r in records:
            out[r.topic_partition].add(r.offset)
    return out


# ------------------------------------------------------------ everything at once

def check(events: Sequence[Event], final: FinalRead, *, input_topic: str = "chaos-in",
          output_topic: str = "chaos-out") -> CheckResult:
    outcomes = txn_outcomes(events)
    skip, backwards = poll_order(events, final)
    found = [
        lost_write(events, final, outcomes, input_topic, output_topic),
        unseen(events, final, outcomes),
        duplicate(events, final),
        inconsistent_offsets(events, final),
        aborted_read(events, final, outcomes),
        precommitted_read(events, outcomes),
        skip,
        backwards,
        nonmonotonic_send(events),
    ]
    findings = {f.name: f for f in found}
    assert tuple(findings) == ANOMALIES
    errors: Counter[str] = Counter(e.error for e in events if isinstance(e, ClientError))
    faults: Counter[str] = Counter(e.kind for e in events
                                   if isinstance(e, FaultEvent) and e.phase == "inject" and e.error is None)
    return CheckResult(findings, totals(events, final, outcomes, input_topic, output_topic), errors, faults)


def totals(events: Sequence[Event], final: FinalRead, outcomes: dict[str, Outcome], input_topic: str,
           output_topic: str) -> dict[str, int]:
    topic_of: dict[str, str] = {}
    acked: Counter[str] = Counter()
    committed_values: set[int] = set()
    for e in events:
        if isinstance(e, Sent):
            topic_of.setdefault(e.txn, e.topic)
            if e.offset is not None:
                acked[e.topic] += 1
                if e.topic == input_topic and outcomes.get(e.txn) is Outcome.COMMITTED:
                    committed_values.add(e.value)
    on_purpose = {e.txn for e in events if isinstance(e, TxnEnded) and e.on_purpose}
    by_role: Counter[str] = Counter()
    for txn, outcome in outcomes.items():
        role = "generator" if topic_of.get(txn) == input_topic else "copy"
        suffix = " on purpose" if txn in on_purpose else (" after an error" if outcome is Outcome.ABORTED else "")
        by_role[f"{role} transactions {outcome}{suffix}"] += 1
    input_read = final.records.get(input_topic, [])
    output_values = [r.value for r in final.records.get(output_topic, [])]
    copied = set(output_values)
    result = {
        f"records sent to {input_topic} and acknowledged": acked[input_topic],
        "  of which in committed transactions": len(committed_values),
        f"records read back from {input_topic}": len(input_read),
        f"records written to {output_topic} and acknowledged": acked[output_topic],
        f"records read back from {output_topic}": len(output_values),
        f"input records copied (distinct values in {output_topic})": len(copied),
        "input records not copied yet (workers behind)": sum(1 for r in input_read if r.value not in copied),
        "polls": sum(1 for e in events if isinstance(e, Polled)),
        "faults injected": sum(1 for e in events if isinstance(e, FaultEvent) and e.phase == "inject"
                               and e.error is None),
    }
    result.update(sorted(by_role.items()))
    return result
