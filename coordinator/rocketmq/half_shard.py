"""One shard of half messages as plain logic: what is undecided, what to check back and when,
what a decision writes. No I/O, no clock: the driver passes the time and carries out the writes.

Invariants (ROCKETMQ-REFERENCE §4, and the bugs of RocketMQ's tracker it must not have):
- a message is checked at most once per check interval, never before its immunity time, and
  never once it is decided; its check count and the time of its last check are in the half log
  (a checked message is appended again with both), so a restart or a failover neither resets
  nor repeats them;
- a decision is durable (an OP record) before anything is done about it, and what it leaves to
  do (the copy to the real topic, or the marker) is redone after a crash until a DONE record
  says it is finished; copies carry an idempotent producer id and a sequence fixed in the
  decision, so a redone copy is recognised as a duplicate by the partition;
- after `check_max` checks the message is discarded, never delivered.
A check that finds no live producer of the group is not counted (see docs/rocketmq-transactions.md).

A half message's life is one state machine (HalfState, moved only through _TRANSITIONS): undecided, its
check being counted, its decision being written, decided with an effect still owed, finished. The shard's
methods return what the driver is to carry out (the OP record to write, the checks to count, the DONE
records to append); the driver reports back what became durable or failed.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from coordinator.rocketmq.log_format import HalfRecord, OpKind, OpRecord, Resolution, Storage, transaction_id
from proto.errors import IllegalMessageIdError, InvalidTransactionIdError
from proto.structs import TopicPartition


class HalfState(enum.Enum):
    UNDECIDED = "undecided"    # waiting for its end, or for its check to fall due
    CHECKING = "checking"      # a check is due: its re-append (count + 1) is being routed and written
    DECIDING = "deciding"      # its OP record is being written (a second, different decision is refused)
    DECIDED = "decided"        # the decision is durable; its copy or marker is still owed
    FINISHED = "finished"      # decided, and nothing is owed (rolled back, discarded, or its effect DONE)


class HalfEvent(enum.Enum):
    CHECK_DUE = "check-due"            # a check pass picked it
    COUNTED = "counted"                # its re-append is durable
    NOT_COUNTED = "not-counted"        # the re-append failed, or no producer could be asked
    END = "end"                        # an end (or a discard) asks for a decision: its OP record is written
    END_FAILED = "end-failed"          # that OP record could not be written
    DECIDED_OWING = "decided-owing"    # the OP record is durable, a copy or marker is owed
    DECIDED_DONE = "decided-done"      # the OP record is durable, nothing is owed
    EFFECT_DONE = "effect-done"        # the owed copy or marker is carried out (a DONE record follows)


#: every transition a half message may make; anything else is a bug in the driver
_TRANSITIONS: dict[tuple[HalfState, HalfEvent], HalfState] = {
    (HalfState.UNDECIDED, HalfEvent.CHECK_DUE): HalfState.CHECKING,
    (HalfState.UNDECIDED, HalfEvent.END): HalfState.DECIDING,
    (HalfState.CHECKING, HalfEvent.COUNTED): HalfState.UNDECIDED,
    (HalfState.CHECKING, HalfEvent.NOT_COUNTED): HalfState.UNDECIDED,
    (HalfState.CHECKING, HalfEvent.END): HalfState.DECIDING,       # decided while its count is written
    (HalfState.DECIDING, HalfEvent.COUNTED): HalfState.DECIDING,   # that count landed: no check is sent
    (HalfState.DECIDING, HalfEvent.NOT_COUNTED): HalfState.DECIDING,
    (HalfState.DECIDING, HalfEvent.END_FAILED): HalfState.UNDECIDED,
    (HalfState.DECIDING, HalfEvent.DECIDED_OWING): HalfState.DECIDED,
    (HalfState.DECIDING, HalfEvent.DECIDED_DONE): HalfState.FINISHED,
    (HalfState.UNDECIDED, HalfEvent.DECIDED_OWING): HalfState.DECIDED,   # replay: an OP record found
    (HalfState.UNDECIDED, HalfEvent.DECIDED_DONE): HalfState.FINISHED,
    (HalfState.DECIDED, HalfEvent.EFFECT_DONE): HalfState.FINISHED,
}


class IllegalHalfTransition(Exception):
    """A driver asked a half message for a move its state does not allow."""


def next_state(state: HalfState, event: HalfEvent) -> HalfState:
    try:
        return _TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalHalfTransition(f"a half message {state.value} cannot take {event.value}") from None


@dataclass(slots=True)
class PendingHalf:
    """An undecided half message: its newest record (count and last check included)."""

    transaction_id: str
    first_offset: int
    latest_offset: int
    record: HalfRecord
    #: check passes that found no live producer of the group (in memory only: they are not counted)
    unanswered: int = 0
    #: after an unanswered pass: when to look for a producer again
    retry_at_ms: int = 0
    state: HalfState = HalfState.UNDECIDED
    #: DECIDING: the decision its OP record carries
    deciding: Resolution | None = None

    def move(self, event: HalfEvent) -> None:
        self.state = next_state(self.state, event)

    def next_check_ms(self, check_interval_ms: int, now_ms: int | None = None) -> int:
        """When the next check is due. Given the clock's `now_ms`, a due time further ahead than the message's
        immunity or one interval cannot come from this clock (it went back, or the record was stamped by a
        node whose clock is ahead): the check is due now rather than after the jump."""
        r = self.record
        due = r.store_time_ms + r.check_immunity_ms if r.last_check_ms == 0 else r.last_check_ms + check_interval_ms
        if self.retry_at_ms:
            due = max(due, self.retry_at_ms)
        if now_ms is not None and due > now_ms + max(check_interval_ms, self.record.check_immunity_ms):
            return now_ms
        return due


@dataclass(frozen=True, slots=True)
class Decision:
    """A durable decision whose effect may still be owed."""

    transaction_id: str
    first_offset: int
    resolution: Resolution
    record: HalfRecord
    copy_producer_id: int = -1
    copy_sequence: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.record.topic, self.record.partition)

    @property
    def needs_effect(self) -> bool:
        """A RocketMQ-stored commit owes its copy; a Kafka-stored message owes its marker either way."""
        if self.record.storage is Storage.KAFKA:
            return True
        return self.resolution is Resolution.COMMIT


class CheckAction(enum.Enum):
    CHECK = "check"        # append again with the count + 1, then ask a producer of the group
    DISCARD = "discard"    # too many checks: to TRANS_CHECK_MAX_TIME_TOPIC, never delivered


@dataclass(frozen=True, slots=True)
class DueCheck:
    pending: PendingHalf
    action: CheckAction
    #: CHECK: the record to append (count + 1, last check = now); DISCARD: the record to discard
    record: HalfRecord


@dataclass(frozen=True, slots=True)
class EndOutcome:
    """What an end of transaction asks for: an OP record to write, or nothing."""

    op: OpRecord | None
    already_decided: bool = False


@dataclass
class HalfShard:
    shard: int
    check_interval_ms: int
    check_max: int
    pending: dict[str, PendingHalf] = field(default_factory=dict)
    #: every decision seen (transaction id -> resolution): repeated ends and late answers are recognised
    decided: dict[str, Resolution] = field(default_factory=dict)
    #: decisions whose effect is owed, in decision order
    unfinished: dict[str, Decision] = field(default_factory=dict)
    #: the shard's idempotent producer id for copies to real topics (-1: none yet)
    copy_producer_id: int = -1
    _next_copy_sequence: dict[TopicPartition, int] = field(default_factory=dict)
    #: (producer group, message id) -> transaction id of undecided messages: a retried send is recognised
    _by_message_id: dict[tuple[str, str], str] = field(default_factory=dict)
    #: DONE records replayed before any decision of theirs (see replay_op)
    _done_undecided: set[str] = field(default_factory=set)

    def _add_pending(self, pending: PendingHalf) -> None:
        self.pending[pending.transaction_id] = pending
        self._by_message_id[(pending.record.producer_group, pending.record.message_id)] = pending.transaction_id

    def _pop_pending(self, tid: str) -> PendingHalf | None:
        pending = self.pending.pop(tid, None)
        key = None if pending is None else (pending.record.producer_group, pending.record.message_id)
        if key is not None and self._by_message_id.get(key) == tid:
            # only its own entry: an earlier message of the same id (a send rolled back after its in-place write
            # failed) decided later must not hide the undecided one a retry should find
            del self._by_message_id[key]
        return pending

    def may_write_in_place(self, producer_id: int, tp: TopicPartition) -> bool:
        """Whether a partition may accept the in-place write (Storage.KAFKA) of `producer_id` to `tp`:
        only an undecided message registered here for exactly that partition may open that transaction."""
        for pending in self.pending.values():
            r = pending.record
            if r.producer_id == producer_id and r.storage is Storage.KAFKA:
                return pending.deciding is None and (r.topic, r.partition) == (tp.topic, tp.partition)
        return False

    def state_of(self, tid: str) -> HalfState | None:
        """Where `tid` is in its life (None: unknown to this shard)."""
        pending = self.pending.get(tid)
        if pending is not None:
            return pending.state
        if tid in self.unfinished:
            return HalfState.DECIDED
        return HalfState.FINISHED if tid in self.decided else None

    def find(self, producer_group: str, message_id: str) -> PendingHalf | None:
        """The undecided message a producer already stored under this id (its send is being retried)."""
        tid = self._by_message_id.get((producer_group, message_id))
        pending = None if tid is None else self.pending.get(tid)
        return pending if pending is not None and pending.deciding is None else None

    # ------------------------------------------------------------ replay (loading the shard)

    def replay_half(self, offset: int, record: HalfRecord) -> None:
        first = offset if record.first_offset is None else record.first_offset
        tid = transaction_id(self.shard, first)
        if tid in self.decided:
            return  # a re-append racing its decision: the OP record wins
        existing = self.pending.get(tid)
        if existing is not None:
            existing.latest_offset, existing.record = offset, record
        else:
            self._add_pending(PendingHalf(tid, first, offset, record))

    def replay_op(self, op: OpRecord) -> None:
        if op.kind is OpKind.DONE:
            if self.unfinished.pop(op.transaction_id, None) is None:
                # done before its decision was replayed: a discard decided from the discard log (its OP record
                # lost), which replay reads after this one
                self._done_undecided.add(op.transaction_id)
            return
        pending = self._pop_pending(op.transaction_id)
        if pending is not None and op.copy_sequence >= 0:
            self.copy_producer_id = op.copy_producer_id
            tp = TopicPartition(pending.record.topic, pending.record.partition)
            self._next_copy_sequence[tp] = max(self._next_copy_sequence.get(tp, 0), op.copy_sequence + 1)
        self._install(op, pending)

    def replay_discard(self, offset: int, record: HalfRecord) -> None:
        """A discarded message is decided, even if the crash came before its OP record."""
        first = offset if record.first_offset is None else record.first_offset
        tid = transaction_id(self.shard, first)
        pending = self._pop_pending(tid)
        if pending is not None:
            self._install(_discard_op(pending), pending)
            if tid in self._done_undecided:
                self.unfinished.pop(tid, None)

    # ------------------------------------------------------------ sending

    def stored(self, offset: int, record: HalfRecord) -> PendingHalf:
        """A half message is durable at `offset`: from now on it is checked back until decided."""
        tid = transaction_id(self.shard, offset)
        pending = PendingHalf(tid, offset, offset, record)
        self._add_pending(pending)
        return pending

    # ------------------------------------------------------------ ending

    def end(self, tid: str, resolution: Resolution | None, *, source: str, producer_group: str = "",
            message_id: str = "") -> EndOutcome:
        """The OP record that decides `tid` (None for UNKNOW: nothing is done, it is checked later)."""
        previous = self.decided.get(tid)
        if previous is not None and source != "SERVER" and not producer_group:
            raise InvalidTransactionIdError(f"[INVALID_TRANSACTION_ID] ending transaction {tid} needs its producer "
                                            "group")
        if previous is not None:
            if resolution is None or previous is resolution:
                return EndOutcome(None, already_decided=True)
            raise InvalidTransactionIdError(
                f"transaction {tid} was already decided as {previous.value}; it cannot be {resolution.value} now")
        pending = self.pending.get(tid)
        if pending is None:
            raise InvalidTransactionIdError(f"transaction {tid} is unknown to half-message shard {self.shard}")
        record = pending.record
        if source != "SERVER":  # a client's end must name what it ends: transaction ids are not secrets
            if not message_id:
                raise IllegalMessageIdError(f"[ILLEGAL_MESSAGE_ID] ending transaction {tid} needs the id of its "
                                            "message")
            if producer_group != record.producer_group:
                raise InvalidTransactionIdError(
                    f"[INVALID_TRANSACTION_ID] transaction {tid} belongs to producer group "
                    f"{record.producer_group!r}, not {producer_group!r}")
            if message_id != record.message_id:
                raise InvalidTransactionIdError(
                    f"[INVALID_TRANSACTION_ID] transaction {tid} holds message {record.message_id!r}, not "
                    f"{message_id!r}")
        if resolution is None:
            return EndOutcome(None)
        if pending.deciding is not None:
            if pending.deciding is resolution:
                return EndOutcome(None, already_decided=True)
            raise InvalidTransactionIdError(
                f"transaction {tid} is being decided as {pending.deciding.value}; it cannot be {resolution.value}")
        op = self._op_for(pending, resolution, source)
        pending.move(HalfEvent.END)
        pending.deciding = resolution
        return EndOutcome(op)

    def decisions_failed(self, ops: Iterable[OpRecord]) -> None:
        """These OP records could not be written: their messages are undecided again (a check-back will
        ask), and their copy sequences are given back, so no gap is left."""
        for op in ops:
            pending = self.pending.get(op.transaction_id)
            if pending is None or pending.state is not HalfState.DECIDING:
                continue
            pending.move(HalfEvent.END_FAILED)
            pending.deciding = None
            if op.copy_sequence >= 0:
                tp = TopicPartition(pending.record.topic, pending.record.partition)
                self._next_copy_sequence[tp] = min(self._next_copy_sequence.get(tp, 0), op.copy_sequence)

    def _op_for(self, pending: PendingHalf, resolution: Resolution, source: str) -> OpRecord:
        producer_id, sequence = -1, -1
        if resolution is Resolution.COMMIT and pending.record.storage is Storage.ROCKETMQ:
            if self.copy_producer_id < 0:
                raise ValueError("the shard needs a copy producer id before it decides a commit")
            tp = TopicPartition(pending.record.topic, pending.record.partition)
            producer_id, sequence = self.copy_producer_id, self._next_copy_sequence.get(tp, 0)
            self._next_copy_sequence[tp] = sequence + 1  # fixed now: a failed write leaves a gap nobody sends
        return OpRecord(pending.transaction_id, pending.first_offset, resolution, source=source,
                        copy_producer_id=producer_id, copy_sequence=sequence)

    def decided_durably(self, op: OpRecord) -> Decision:
        """Install a decision once its OP record is durable; returns what it leaves to do."""
        pending = self._pop_pending(op.transaction_id)
        decision = self._install(op, pending)
        if decision is None:
            raise InvalidTransactionIdError(f"transaction {op.transaction_id} is unknown to shard {self.shard}")
        return decision

    def _install(self, op: OpRecord, pending: PendingHalf | None) -> Decision | None:
        self.decided[op.transaction_id] = op.resolution
        if pending is None:
            return None
        decision = Decision(op.transaction_id, op.first_offset, op.resolution, pending.record, op.copy_producer_id,
                            op.copy_sequence)
        if pending.state is HalfState.CHECKING:  # replay, or decided while its count was written
            pending.move(HalfEvent.END)
        pending.move(HalfEvent.DECIDED_OWING if decision.needs_effect else HalfEvent.DECIDED_DONE)
        if decision.needs_effect:
            self.unfinished[op.transaction_id] = decision
        return decision

    def done(self, tids: Iterable[str]) -> list[OpRecord]:
        """DONE records for effects carried out (to append; replay then owes nothing for them)."""
        out = []
        for tid in tids:
            decision = self.unfinished.pop(tid, None)
            if decision is not None:
                out.append(OpRecord(tid, decision.first_offset, decision.resolution, kind=OpKind.DONE))
        return out

    # ------------------------------------------------------------ check-back

    def due(self, now_ms: int) -> list[DueCheck]:
        """The messages whose check is due at `now_ms`, oldest first: each to check or to discard."""
        out = []
        for pending in sorted(self.pending.values(), key=lambda p: p.first_offset):
            if pending.state is not HalfState.UNDECIDED:
                continue  # its decision or its count is being written
            if pending.next_check_ms(self.check_interval_ms, now_ms) > now_ms:
                continue
            record = pending.record
            if record.check_times >= self.check_max:
                out.append(DueCheck(pending, CheckAction.DISCARD, record))
            else:
                checked = dataclasses.replace(record, check_times=record.check_times + 1, last_check_ms=now_ms,
                                              first_offset=pending.first_offset)
                out.append(DueCheck(pending, CheckAction.CHECK, checked))
        return out

    def next_due_ms(self) -> int | None:
        """When the next check falls due (of messages not being checked or decided now)."""
        return min((p.next_check_ms(self.check_interval_ms) for p in self.pending.values()
                    if p.state is HalfState.UNDECIDED), default=None)

    def counting(self, tids: Iterable[str]) -> None:
        """The re-appends that count these checks are being written: plan no second check meanwhile."""
        for tid in tids:
            pending = self.pending.get(tid)
            if pending is not None and pending.state is HalfState.UNDECIDED:
                pending.move(HalfEvent.CHECK_DUE)

    def count_failed(self, tids: Iterable[str]) -> None:
        """The re-appends were not written: the checks are due again (nothing was counted)."""
        for tid in tids:
            pending = self.pending.get(tid)
            if pending is not None and pending.state in (HalfState.CHECKING, HalfState.DECIDING):
                pending.move(HalfEvent.NOT_COUNTED)

    def checked_durably(self, tid: str, offset: int, record: HalfRecord) -> PendingHalf | None:
        """The re-appended record is durable: the count moved on. Returns the message to send the check
        for, None if it was decided (or is being decided) meanwhile: no check after a decision."""
        pending = self.pending.get(tid)
        if pending is None:
            return None
        pending.latest_offset, pending.record = offset, record
        pending.unanswered, pending.retry_at_ms = 0, 0
        if pending.state in (HalfState.CHECKING, HalfState.DECIDING):
            pending.move(HalfEvent.COUNTED)
        return pending if pending.state is HalfState.UNDECIDED else None

    def unanswered(self, tid: str, now_ms: int) -> None:
        """No live producer of the group: look again after an interval, without counting a check."""
        pending = self.pending.get(tid)
        if pending is not None:
            if pending.state is HalfState.CHECKING:
                pending.move(HalfEvent.NOT_COUNTED)
            pending.unanswered += 1
            pending.retry_at_ms = now_ms + self.check_interval_ms

    def discard(self, tid: str) -> OpRecord | None:
        """The OP record that decides DISCARD once the message is in TRANS_CHECK_MAX_TIME_TOPIC (None if it
        was decided, or is being decided, meanwhile)."""
        pending = self.pending.get(tid)
        if pending is None or pending.state not in (HalfState.UNDECIDED, HalfState.CHECKING):
            return None
        pending.move(HalfEvent.END)
        pending.deciding = Resolution.DISCARD
        return _discard_op(pending)


def _discard_op(pending: PendingHalf) -> OpRecord:
    return OpRecord(pending.transaction_id, pending.first_offset, Resolution.DISCARD, source="CHECK_MAX")
