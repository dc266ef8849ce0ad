"""The demo model's wire messages: frozen dataclasses, so their reprs (and the trace) are stable."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Produce:
    txn: str
    value: int


@dataclass(frozen=True, slots=True)
class ProduceAck:
    offset: int
    #: the partition already saw this transaction's marker: the write was refused
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class EndTxn:
    txn: str
    commit: bool
    #: every partition the client tried to write, acknowledged or not
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    txn: str
    committed: bool


@dataclass(frozen=True, slots=True)
class Marker:
    txn: str
    commit: bool


@dataclass(frozen=True, slots=True)
class MarkerAck:
    txn: str


@dataclass(frozen=True, slots=True)
class Fetch:
    offset: int


@dataclass(frozen=True, slots=True)
class FetchResult:
    #: (offset, value, transaction) of the records read_committed may return
    records: tuple[tuple[int, int, str], ...]
    next_offset: int
