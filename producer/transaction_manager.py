"""The producer's transaction state machine (KAFKA-REFERENCE §3) and its bookkeeping; no I/O.

Owns the client state, the producer id and epoch, the next sequence of every partition
and what the current transaction has registered. Invariant: every state change goes
through `_transition_to`, which checks VALID_PREVIOUS_STATES and raises IllegalStateError
naming the transactional id and both states; a partition's sequences restart at 0
whenever the producer id or epoch changes.
"""
from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from proto.errors import IllegalStateError, InvalidProducerIdMappingError, KafkaError, TransactionAbortableError
from proto.structs import TopicPartition

log = logging.getLogger(__name__)

MAX_SEQUENCE = 2**31 - 1


class TransactionState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState

#: target state -> the states it may be entered from (Kafka's TransactionManager.State)
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(TransactionState),
}

#: states whose batches the sender may produce
SENDABLE_STATES = frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION})


def is_transition_valid(source: TransactionState, target: TransactionState) -> bool:
    return source in VALID_PREVIOUS_STATES[target]


def copy_error(error: KafkaError, context: str = "") -> KafkaError:
    """A fresh exception of the same class, so one stored error can be raised in many threads."""
    message = f"{context}: {error.message}" if context else error.message
    try:
        fresh = type(error)(message)
    except TypeError:
        return error
    fresh.__cause__ = error.__cause__
    return fresh


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    epoch: int

    @property
    def is_valid(self) -> bool:
        return self.producer_id >= 0


NO_PRODUCER_ID = ProducerIdAndEpoch(-1, -1)


class TransactionManager:
    """Client-side transaction state, shared by the caller's threads and the sender thread."""

    def __init__(self, transactional_id: str | None, *, idempotent: bool = True, implicit_add: bool = False) -> None:
        self.transactional_id = transactional_id
        self.idempotent = idempotent or transactional_id is not None
        #: transactions V2's implicit add (KIP-890 part 2): a partition joins the transaction with its first
        #: produce request, which asks its leader to add it; no AddPartitionsToTxn of our own
        self.implicit_add = implicit_add and transactional_id is not None
        self._lock = threading.RLock()
        self._state = TransactionState.UNINITIALIZED
        self._last_error: KafkaError | None = None
        self._pid = NO_PRODUCER_ID
        self._sequences: dict[TopicPartition, int] = {}
        #: a batch that consumed sequence numbers failed: the next pid/epoch must be new
        self._epoch_bump_required = False
        # what the current transaction has registered with the coordinator
        self._txn_partitions: set[TopicPartition] = set()
        self._pending_partitions: set[TopicPartition] = set()
        self._adding_partitions: set[TopicPartition] = set()
        self._txn_groups: set[str] = set()
        self._registration_sent = False

    # ------------------------------------------------------------ state

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def state(self) -> TransactionState:
        return self._state

    @property
    def last_error(self) -> KafkaError | None:
        return self._last_error

    def describe(self) -> str:
        if self.transactional_id is None:
            return "idempotent producer (no transactional id)"
        return f"transactional id {self.transactional_id!r}"

    def _transition_to(self, target: TransactionState, *, action: str, error: KafkaError | None = None) -> None:
        with self._lock:
            source = self._state
            if not is_transition_valid(source, target):
                expected = " or ".join(s.name for s in TransactionState if s in VALID_PREVIOUS_STATES[target])
                raise IllegalStateError(
                    f"cannot {action}: {self.describe()} is in state {source.name}, expected {expected} "
                    f"({source.name} -> {target.name} is not a valid transition)")
            if target in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
                if error is None:
                    raise ValueError(f"a transition to {target.name} needs the error that caused it")
                # keep the first error: later ones are usually its consequences
                if self._last_error is None or (target is S.FATAL_ERROR and source is not S.FATAL_ERROR):
                    self._last_error = error
            elif target is S.READY or target is S.IN_TRANSACTION:
                self._last_error = None
            self._state = target
            log.debug("%s: %s -> %s (%s)", self.describe(), source.name, target.name, action)

    def ensure_usable(self, action: str) -> None:
        """Raise the stored fatal error (after which only close() is allowed)."""
        if self._state is S.FATAL_ERROR:
            raise self.fatal_error_copy(action)

    def fatal_error_copy(self, action: str) -> KafkaError:
        assert self._last_error is not None
        error = copy_error(self._last_error, f"cannot {action}")
        if "create a new Producer" not in error.message:
            error.args = (f"{error.message}; this producer hit a fatal error, create a new Producer",)
        return error

    def abortable_error_copy(self, action: str) -> KafkaError:
        """The error a call raises in ABORTABLE_ERROR. A retriable cause (a delivery timeout, a leader
        that never came back) is wrapped in TransactionAbortableError: retrying the call cannot help,
        only abort_transaction() can (Kafka throws a non-retriable KafkaException there)."""
        error = self._last_error
        assert error is not None
        context = f"cannot {action}: the transaction of {self.describe()} failed; call abort_transaction()"
        if error.retriable:
            wrapped = TransactionAbortableError(
                f"[TRANSACTION_ABORTABLE] {context} (caused by {type(error).__name__}: {error.message})")
            wrapped.__cause__ = error
            return wrapped
        return copy_error(error, context)

    def _raise_if_error_state(self, action: str) -> None:
        if self._state is S.FATAL_ERROR:
            raise self.fatal_error_copy(action)
        if self._state is S.ABORTABLE_ERROR:
            raise self.abortable_error_copy(action)

    def _require_transactional(self, action: str) -> None:
        if self.transactional_id is None:
            raise IllegalStateError(f"cannot {action}: this producer has no transactional_id")

    # ------------------------------------------------------------ verbs of the public API

    def begin_init(self) -> bool:
        """Enter INITIALIZING; False when an earlier init_transactions() is being resumed."""
        self._require_transactional("init_transactions")
        with self._lock:
            self.ensure_usable("init_transactions")
            if self._state is S.INITIALIZING:
                return False
            self._transition_to(S.INITIALIZING, action="init_transactions")
            return True

    def begin_transaction(self) -> None:
        self._require_transactional("begin_transaction")
        with self._lock:
            self._raise_if_error_state("begin_transaction")
            self._transition_to(S.IN_TRANSACTION, action="begin_transaction")

    def begin_commit(self) -> bool:
        """Enter COMMITTING_TRANSACTION; False when an earlier commit is being resumed."""
        self._require_transactional("commit_transaction")
        with self._lock:
            self._raise_if_error_state("commit_transaction")
            if self._state is S.COMMITTING_TRANSACTION:
                return False
            self._transition_to(S.COMMITTING_TRANSACTION, action="commit_transaction")
            return True

    def begin_abort(self) -> bool:
        """Enter ABORTING_TRANSACTION; False when an earlier abort is being resumed."""
        self._require_transactional("abort_transaction")
        with self._lock:
            self.ensure_usable("abort_transaction")
            if self._state is S.ABORTING_TRANSACTION:
                return False
            self._transition_to(S.ABORTING_TRANSACTION, action="abort_transaction")
            return True

    def ensure_in_transaction(self, action: str) -> None:
        """For send_offsets_to_transaction: only inside a healthy transaction."""
        self._require_transactional(action)
        with self._lock:
            self._raise_if_error_state(action)
            if self._state is not S.IN_TRANSACTION:
                raise IllegalStateError(f"cannot {action}: {self.describe()} is in state {self._state.name}, "
                                        f"expected IN_TRANSACTION")

    def check_can_send(self) -> None:
        """send(): fails on a fatal error always; for a transactional producer, also outside a transaction."""
        state = self._state  # one read, no lock: this is the per-record path
        if state is S.IN_TRANSACTION or (self.transactional_id is None and state is not S.FATAL_ERROR):
            return
        self._raise_if_error_state("send")
        raise IllegalStateError(f"cannot send: {self.describe()} is in state {state.name}, expected IN_TRANSACTION")

    def complete_transaction(self) -> None:
        """After EndTxn (or nothing to end): READY, with an empty transaction."""
        with self._lock:
            self._transition_to(S.READY, action="complete the transaction")
            self._clear_transaction()

    def begin_epoch_bump(self) -> None:
        """After an abort that left untrusted sequences and no new epoch: InitProducerId comes next (KIP-360)."""
        with self._lock:
            self._transition_to(S.INITIALIZING, action="bump the epoch after an abort")
            self._clear_transaction()

    def _clear_transaction(self) -> None:
        self._txn_partitions.clear()
        self._pending_partitions.clear()
        self._adding_partitions.clear()
        self._txn_groups.clear()
        self._registration_sent = False

    # ------------------------------------------------------------ errors reported by I/O

    def set_abortable_error(self, error: KafkaError) -> bool:
        """A batch or request failed: the transaction can only be aborted. False if the state ignores it."""
        with self._lock:
            if self._state in VALID_PREVIOUS_STATES[S.ABORTABLE_ERROR]:
                self._transition_to(S.ABORTABLE_ERROR, action="record an abortable error", error=error)
                return True
            log.debug("%s: abortable error ignored in state %s: %s", self.describe(), self._state.name, error)
            return False

    def set_fatal_error(self, error: KafkaError) -> None:
        with self._lock:
            self._transition_to(S.FATAL_ERROR, action="record a fatal error", error=error)

    @property
    def has_error(self) -> bool:
        return self._state in (S.ABORTABLE_ERROR, S.FATAL_ERROR)

    @property
    def is_aborting(self) -> bool:
        return self._state is S.ABORTING_TRANSACTION

    # ------------------------------------------------------------ producer id and epoch

    @property
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch:
        return self._pid

    @property
    def has_producer_id(self) -> bool:
        return self._pid.is_valid

    def set_producer_id_and_epoch(self, producer_id: int, epoch: int) -> None:
        """Adopt a new pid/epoch (InitProducerId, or EndTxn under Transactions V2): sequences restart at 0."""
        with self._lock:
            new = ProducerIdAndEpoch(producer_id, epoch)
            if new != self._pid:
                log.debug("%s: producer id/epoch %s/%s -> %s/%s", self.describe(), self._pid.producer_id,
                          self._pid.epoch, producer_id, epoch)
                self._sequences.clear()
                self._epoch_bump_required = False
            self._pid = new

    def complete_init(self, producer_id: int, epoch: int) -> None:
        """InitProducerId answered: a fresh start, even if the node returned the same pid/epoch."""
        with self._lock:
            self.set_producer_id_and_epoch(producer_id, epoch)
            self._sequences.clear()
            self._epoch_bump_required = False
            self._transition_to(S.READY, action="complete init")

    def needs_producer_id(self) -> bool:
        """For the idempotent producer's sender: fetch a (new) pid before building batches."""
        return self.transactional_id is None and self.idempotent and (
            not self._pid.is_valid or self._epoch_bump_required) and self._state is not S.FATAL_ERROR

    def start_idempotent_init(self) -> None:
        """READY -> UNINITIALIZED -> INITIALIZING, as Kafka's idempotent epoch bump does."""
        with self._lock:
            if self._state is S.READY:
                self._transition_to(S.UNINITIALIZED, action="reset the producer id")
            if self._state is S.UNINITIALIZED:
                self._transition_to(S.INITIALIZING, action="request a producer id")

    def require_epoch_bump(self) -> None:
        """A batch holding sequence numbers failed: they can no longer be trusted under this epoch."""
        with self._lock:
            self._epoch_bump_required = True

    @property
    def epoch_bump_required(self) -> bool:
        return self._epoch_bump_required

    # ------------------------------------------------------------ sequences

    def next_sequence(self, tp: TopicPartition, record_count: int) -> int:
        """Reserve `record_count` sequences of `tp`; returns the batch's base sequence."""
        with self._lock:
            base = self._sequences.get(tp, 0)
            self._sequences[tp] = (base + record_count) % (MAX_SEQUENCE + 1)
            return base

    def sequence(self, tp: TopicPartition) -> int:
        return self._sequences.get(tp, 0)

    # ------------------------------------------------------------ what the transaction holds

    def maybe_add_partition(self, tp: TopicPartition) -> bool:
        """Note that the transaction writes to `tp`; True when it is new (the sender must register it).
        Never with the implicit add: the first produce request to `tp` registers it (`add_implicitly`)."""
        if self.implicit_add or tp in self._txn_partitions or tp in self._pending_partitions or tp in self._adding_partitions:
            return False  # the per-record fast path: set lookups without the lock
        with self._lock:
            if tp in self._txn_partitions or tp in self._adding_partitions:
                return False
            new = tp not in self._pending_partitions
            self._pending_partitions.add(tp)
            return new

    def is_partition_added(self, tp: TopicPartition) -> bool:
        return tp in self._txn_partitions

    def add_implicitly(self, tp: TopicPartition) -> bool:
        """With the implicit add, `tp`'s first batch is about to go, asking its leader to add `tp`: from
        now on the coordinator may know it, so the transaction must be ended. False without the implicit add."""
        if not self.implicit_add:
            return False
        with self._lock:
            self._txn_partitions.add(tp)
            self._registration_sent = True
        return True

    def has_pending_partitions(self) -> bool:
        return bool(self._pending_partitions)

    def is_adding_partitions(self) -> bool:
        return bool(self._adding_partitions)

    def take_partitions_to_add(self) -> list[TopicPartition]:
        """The partitions of one AddPartitionsToTxn; they stay 'adding' until the answer.

        Empty unless the transaction may still produce: once abort or an error begins, no new
        registration starts, so waiting for `is_adding_partitions()` to clear is enough.
        """
        with self._lock:
            if self._state not in SENDABLE_STATES:
                return []
            partitions = sorted(self._pending_partitions)
            self._pending_partitions.clear()
            self._adding_partitions.update(partitions)
            if partitions:
                self._registration_sent = True
            return partitions

    def partitions_added(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                if tp in self._adding_partitions:
                    self._adding_partitions.discard(tp)
                    self._txn_partitions.add(tp)

    def partitions_not_added(self, partitions: Iterable[TopicPartition]) -> None:
        """The request failed retriably: ask again for these."""
        with self._lock:
            for tp in partitions:
                if tp in self._adding_partitions:
                    self._adding_partitions.discard(tp)
                    self._pending_partitions.add(tp)

    def partitions_failed(self, partitions: Iterable[TopicPartition]) -> None:
        """The request failed for good (the transaction is in an error state now)."""
        with self._lock:
            for tp in partitions:
                self._adding_partitions.discard(tp)

    @property
    def adding_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._adding_partitions)

    @property
    def transaction_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._txn_partitions)

    def offsets_registration_sent(self, group_id: str) -> None:
        with self._lock:
            self._registration_sent = True

    def offsets_added(self, group_id: str) -> None:
        with self._lock:
            self._txn_groups.add(group_id)

    def is_group_added(self, group_id: str) -> bool:
        return group_id in self._txn_groups

    @property
    def end_txn_refused(self) -> bool:
        """The coordinator no longer maps our producer id to the transactional id (it expired): it would
        refuse EndTxn, so abort skips it and goes straight to InitProducerId (Kafka's TransactionManager)."""
        return isinstance(self._last_error, InvalidProducerIdMappingError)

    @property
    def needs_end_txn(self) -> bool:
        """Something was (or may have been) registered: the coordinator must end this transaction."""
        return self._registration_sent
