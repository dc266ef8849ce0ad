"""RocketMQ's pop model (SimpleConsumer) for one (consumer group, topic, partition), as plain logic:
what is visible, what a receive hands out, what an ack or a change of invisible duration does, and
what must be committed. No I/O and no clock: the driver (pop_service.py) reads the log, passes the
time, and writes the commits.

Invariants:
- durable state is the group's committed offset (every deliverable message below it was acked)
  plus the acked offsets above it (encoded in the commit's metadata), so an acked message is
  never delivered again, even after a crash; a change is applied only once committed;
- a message is handed out only while no live lease holds it (popped, not acked, deadline not
  passed); leases live in memory only, so after a failover they are gone and the message is
  delivered again (at-least-once);
- a receipt handle is valid only while it names the message's latest delivery: a new delivery
  or a changed invisible duration voids it;
- nothing is handed out at or beyond `committed + window`, so the acked set fits the metadata.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from proto.errors import InvalidReceiptHandleError

#: offsets beyond the committed one a queue may hand out (its acked set is a bitmap of this size)
WINDOW = 1024
_METADATA_PREFIX = "rmq-pop-v1:"


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """Names one delivery: the message (topic, partition, offset), the delivery's version, and the
    queue's incarnation (a queue loaded again, e.g. after a failover, voids every earlier handle)."""

    topic: str
    partition: int
    offset: int
    version: int
    incarnation: str

    def encode(self) -> str:
        return f"{self.partition}.{self.offset}.{self.version}.{self.incarnation}.{self.topic}"

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        parts = text.split(".", 4)
        if len(parts) != 5 or not all(p.isdigit() for p in parts[:3]) or not parts[3] or not parts[4]:
            raise InvalidReceiptHandleError(f"[INVALID_RECEIPT_HANDLE] {text!r} is not a receipt handle txnsim gave out")
        return cls(parts[4], int(parts[0]), int(parts[1]), int(parts[2]), parts[3])


@dataclass(frozen=True, slots=True)
class Delivery:
    offset: int
    message: Any          # what the driver stored for it (a decoded record)
    handle: ReceiptHandle
    attempt: int          # 1 for the first delivery
    invisible_until_ms: int


@dataclass(frozen=True, slots=True)
class Commit:
    """What to commit for the group: the offset, and the acked offsets above it as metadata."""

    offset: int
    acked: frozenset[int]

    @property
    def metadata(self) -> str:
        return encode_acked(self.offset, self.acked)


@dataclass(slots=True)
class _Lease:
    version: int
    until_ms: int


@dataclass
class PopQueue:
    topic: str
    partition: int
    incarnation: str
    committed: int
    acked: set[int] = field(default_factory=set)
    window: int = WINDOW
    #: the log has been read up to here: every offset in [committed, scanned) is known
    scanned: int = -1
    #: deliverable, not yet acked messages in [committed, scanned)
    messages: dict[int, Any] = field(default_factory=dict)
    leases: dict[int, _Lease] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)
    _next_version: int = 1

    def __post_init__(self) -> None:
        self.acked = {o for o in self.acked if o >= self.committed}
        if self.scanned < self.committed:
            self.scanned = self.committed

    # ------------------------------------------------------------ reading the log

    def read_from(self) -> int | None:
        """Where the driver should read the log next, or None while the window is full."""
        return self.scanned if self.scanned < self.committed + self.window else None

    def add_read(self, start: int, end: int, messages: Iterable[tuple[int, Any]]) -> None:
        """The deliverable messages of [start, end) (markers and aborted records are simply absent)."""
        if start != self.scanned or end < start:
            raise ValueError(f"read [{start}, {end}) does not continue the scan at {self.scanned}")
        for offset, message in messages:
            if start <= offset < end and offset not in self.acked:
                self.messages[offset] = message
        self.scanned = end

    # ------------------------------------------------------------ receiving

    def pop(self, now_ms: int, max_count: int, invisible_ms: int) -> list[Delivery]:
        """Up to `max_count` visible messages, oldest first, each now invisible until now + invisible_ms."""
        out: list[Delivery] = []
        limit = self.committed + self.window
        for offset in sorted(self.messages):
            if len(out) >= max_count or offset >= limit:
                break
            lease = self.leases.get(offset)
            if lease is not None and lease.until_ms > now_ms:
                continue
            version = self._version()
            self.leases[offset] = _Lease(version, now_ms + invisible_ms)
            self.attempts[offset] = self.attempts.get(offset, 0) + 1
            out.append(Delivery(offset, self.messages[offset], self._handle(offset, version), self.attempts[offset],
                                now_ms + invisible_ms))
        return out

    def next_visible_ms(self) -> int | None:
        """When the earliest leased message becomes visible again (None: nothing is leased)."""
        pending = [lease.until_ms for offset, lease in self.leases.items() if offset in self.messages]
        return min(pending) if pending else None

    # ------------------------------------------------------------ ack and change

    def check(self, handle: ReceiptHandle) -> bool:
        """True if the handle names the message's latest delivery; False if that message was acked
        already (an ack again is harmless). Raises for a void or foreign handle."""
        if (handle.incarnation != self.incarnation or handle.topic != self.topic
                or handle.partition != self.partition):
            raise InvalidReceiptHandleError(
                f"[INVALID_RECEIPT_HANDLE] the handle of offset {handle.offset} is from an earlier delivery of "
                f"{self.topic}-{self.partition} (the queue was loaded again); receive the message again")
        if handle.offset < self.committed or handle.offset in self.acked:
            return False
        lease = self.leases.get(handle.offset)
        if lease is None or lease.version != handle.version or handle.offset not in self.messages:
            raise InvalidReceiptHandleError(
                f"[INVALID_RECEIPT_HANDLE] the handle of {self.topic}-{self.partition} offset {handle.offset} is "
                "void: the message was delivered again or its invisible duration was changed since")
        return True

    def prepare_ack(self, offsets: Iterable[int]) -> Commit:
        """The commit that acks `offsets` (checked handles' offsets); apply it with acked_durably."""
        acked = self.acked | set(offsets)
        offset = self.committed
        while offset < self.scanned and (offset not in self.messages or offset in acked):
            offset += 1
        return Commit(offset, frozenset(o for o in acked if o >= offset))

    def acked_durably(self, commit: Commit) -> None:
        for offset in list(self.messages):
            if offset < commit.offset or offset in commit.acked:
                del self.messages[offset]
                self.leases.pop(offset, None)
                self.attempts.pop(offset, None)
        self.committed = commit.offset
        self.acked = set(commit.acked)

    def change_invisible(self, handle: ReceiptHandle, now_ms: int, invisible_ms: int) -> ReceiptHandle:
        """Invisible until now + invisible_ms instead; the new handle, the old one void."""
        if not self.check(handle):
            raise InvalidReceiptHandleError(
                f"[INVALID_RECEIPT_HANDLE] {self.topic}-{self.partition} offset {handle.offset} was acked already")
        version = self._version()
        self.leases[handle.offset] = _Lease(version, now_ms + invisible_ms)
        return self._handle(handle.offset, version)

    # ------------------------------------------------------------ helpers

    def _version(self) -> int:
        version, self._next_version = self._next_version, self._next_version + 1
        return version

    def _handle(self, offset: int, version: int) -> ReceiptHandle:
        return ReceiptHandle(self.topic, self.partition, offset, version, self.incarnation)


def encode_acked(committed: int, acked: Iterable[int]) -> str:
    """The acked offsets above `committed` as a bitmap in hex (bit i: offset committed + i)."""
    bits = 0
    for offset in acked:
        if offset >= committed:
            bits |= 1 << (offset - committed)
    return f"{_METADATA_PREFIX}{bits:x}" if bits else ""


def decode_acked(committed: int, metadata: str) -> set[int]:
    """The acked offsets a commit's metadata names (none for metadata not written here)."""
    if not metadata.startswith(_METADATA_PREFIX):
        return set()
    try:
        bits = int(metadata[len(_METADATA_PREFIX):], 16)
    except ValueError:
        return set()
    return {committed + i for i in range(bits.bit_length()) if bits >> i & 1}

