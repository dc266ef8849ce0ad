"""What happened during a chaos run: an append-only, thread-safe list of events.

The workload, the nemesis and the final read only append; the checker only reads. Times
are `time.monotonic()` seconds of this process, so events of different threads compare.
A transaction is named `<producer session>/<n>`; each record it sends carries that name in
the `chaos-txn` header, so a read can always tell which transaction wrote what it saw.
"""
from __future__ import annotations

import enum
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Union

from proto.structs import ConsumerRecord, TopicPartition

#: header naming the transaction that wrote a record
TXN_HEADER = "chaos-txn"


class Outcome(enum.StrEnum):
    COMMITTED = "committed"
    ABORTED = "aborted"
    #: commit_transaction() was called and never returned: it may have committed or not
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Observed:
    """One record as a read returned it."""

    topic: str
    partition: int
    offset: int
    value: int | None
    writer: str | None

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @classmethod
    def of(cls, record: ConsumerRecord) -> Observed:
        writer = next((v.decode(errors="replace") for k, v in record.headers if k == TXN_HEADER and v is not None),
                      None)
        return cls(record.topic, record.partition, record.offset, parse_value(record.value), writer)


def parse_value(raw: bytes | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class TxnBegun:
    txn: str
    producer: str
    at: float


@dataclass(frozen=True, slots=True)
class Sent:
    """One send: `offset` is set when the partition acknowledged it, `error` when it failed."""

    producer: str
    txn: str
    topic: str
    partition: int | None
    value: int
    offset: int | None
    error: str | None
    at: float


@dataclass(frozen=True, slots=True)
class CommitStarted:
    """commit_transaction() is about to be called: nothing of `txn` may be visible before this."""

    txn: str
    at: float


@dataclass(frozen=True, slots=True)
class TxnEnded:
    txn: str
    outcome: Outcome
    #: aborted by the workload's --abort-ratio, not because of an error
    on_purpose: bool
    #: input positions sent with send_offsets_to_transaction (empty for the generator)
    offsets: Mapping[TopicPartition, int]
    at: float


@dataclass(frozen=True, slots=True)
class Polled:
    consumer: str
    records: tuple[Observed, ...]
    #: poll() had returned by then: every record was visible before this time
    at: float


@dataclass(frozen=True, slots=True)
class Seeked:
    """The consumer's position of a partition was set (start, rewind): reads restart here."""

    consumer: str
    topic_partition: TopicPartition
    offset: int
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class ClientError:
    who: str
    error: str
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class FaultEvent:
    kind: str
    node: int
    #: "inject" or "heal"
    phase: str
    error: str | None
    at: float


Event = Union[TxnBegun, Sent, CommitStarted, TxnEnded, Polled, Seeked, ClientError, FaultEvent]


@dataclass(slots=True)
class FinalRead:
    """What fresh read_committed consumers read after every fault was healed."""

    records: dict[str, list[Observed]] = field(default_factory=dict)
    #: the group's committed offset of every input partition (None: nothing committed)
    committed: dict[TopicPartition, int | None] = field(default_factory=dict)
    #: every partition was read up to its last stable offset, with no transaction open (else cut short)
    complete: bool = True


class History:
    """Append-only and thread-safe; counters for a live display are kept as events arrive."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._clock = clock
        self.counters: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    def now(self) -> float:
        return self._clock()

    def append(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)
            self._count(event)

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    # ------------------------------------------------------------ shorthands for the workload

    def begun(self, txn: str, producer: str) -> None:
        self.append(TxnBegun(txn, producer, self.now()))

    def sent(self, producer: str, txn: str, topic: str, partition: int | None, value: int, offset: int | None,
             error: BaseException | None = None) -> None:
        self.append(Sent(producer, txn, topic, partition, value, offset,
                         None if error is None else type(error).__name__, self.now()))

    def commit_started(self, txn: str) -> None:
        self.append(CommitStarted(txn, self.now()))

    def ended(self, txn: str, outcome: Outcome, *, on_purpose: bool = False,
              offsets: Mapping[TopicPartition, int] | None = None) -> None:
        self.append(TxnEnded(txn, outcome, on_purpose, dict(offsets or {}), self.now()))

    def polled(self, consumer: str, records: Iterable[ConsumerRecord]) -> None:
        self.append(Polled(consumer, tuple(Observed.of(r) for r in records), self.now()))

    def seeked(self, consumer: str, tp: TopicPartition, offset: int, reason: str) -> None:
        self.append(Seeked(consumer, tp, offset, reason, self.now()))

    def error(self, who: str, error: BaseException) -> None:
        self.append(ClientError(who, type(error).__name__, str(error)[:300], self.now()))

    def fault(self, kind: str, node: int, phase: str, error: BaseException | None = None) -> None:
        self.append(FaultEvent(kind, node, phase, None if error is None else f"{type(error).__name__}: {error}",
                               self.now()))

    # ------------------------------------------------------------ live counters

    def _count(self, event: Event) -> None:
        c = self.counters
        if isinstance(event, Sent):
            c[f"acked {event.topic}" if event.offset is not None else "sends failed"] += 1
        elif isinstance(event, TxnEnded):
            c[f"{event.outcome}{' on purpose' if event.on_purpose else ''}"] += 1
        elif isinstance(event, Polled):
            c["records polled"] += len(event.records)
        elif isinstance(event, ClientError):
            self.errors[event.error] += 1
            c["client errors"] += 1
        elif isinstance(event, FaultEvent) and event.phase == "inject" and event.error is None:
            c["faults"] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counters)
