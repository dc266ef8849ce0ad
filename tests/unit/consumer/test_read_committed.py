"""The read_committed filter (KAFKA-REFERENCE §6) over hand-built batches, and its property:
over any interleaving of transactional producers, only committed records come back, in order."""
from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.fetcher import PartitionRecords
from proto.records import ControlType, encode_batch, encode_control_batch, set_base_offset
from proto.structs import IsolationLevel, TopicPartition

TP = TopicPartition("orders", 0)
RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED


@dataclass
class Log:
    """A partition as the node keeps it: batches, open transactions, the aborted-transaction index."""

    batches: list[tuple[int, int, bytes]] = field(default_factory=list)  # (base, last, raw)
    next_offset: int = 0
    open_txns: dict[int, int] = field(default_factory=dict)  # pid -> first offset
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, first, marker offset)
    pending: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    bad_values: set[bytes] = field(default_factory=set)  # aborted or still open

    def _place(self, raw: bytes, count: int) -> tuple[int, int]:
        base = self.next_offset
        self.batches.append((base, base + count - 1, set_base_offset(raw, base, 0)))
        self.next_offset += count
        return base, base + count - 1

    def data(self, values: list[bytes], pid: int | None = None) -> None:
        records = [(1000, None, v, ()) for v in values]
        if pid is None:
            self._place(encode_batch(records), len(values))
            return
        base, _ = self._place(encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=0,
                                           transactional=True), len(values))
        self.open_txns.setdefault(pid, base)
        self.pending.setdefault(pid, []).extend((base + i, v) for i, v in enumerate(values))

    def end(self, pid: int, commit: bool) -> None:
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        marker, _ = self._place(encode_control_batch(producer_id=pid, producer_epoch=0, control_type=kind,
                                                     coordinator_epoch=0, timestamp=1000), 1)
        first = self.open_txns.pop(pid, None)
        entries = self.pending.pop(pid, [])
        if not commit and first is not None:
            self.aborted.append((pid, first, marker))
            self.bad_values |= {v for _, v in entries}

    @property
    def lso(self) -> int:
        return min(self.open_txns.values(), default=self.next_offset)

    def fetch(self, fetch_offset: int, isolation: IsolationLevel, max_batches: int = 1 << 30
              ) -> tuple[bytes, list[tuple[int, int]]]:
        """What the node answers: whole batches from the one holding fetch_offset, below the LSO."""
        upper = self.lso if isolation is RC else self.next_offset
        chosen = [(b, last, raw) for b, last, raw in self.batches if last >= fetch_offset and b < upper][:max_batches]
        aborted = []
        if isolation is RC and chosen:
            end = chosen[-1][1]
            aborted = [(pid, first) for pid, first, marker in self.aborted if marker >= fetch_offset and first <= end]
        return b"".join(raw for _, _, raw in chosen), aborted


def read_all(log: Log, isolation: IsolationLevel, start: int = 0, chunk: int = 1000, max_batches: int = 1 << 30
             ) -> tuple[list[tuple[int, bytes]], int]:
    """Fetch and drain until no progress, as the consumer does; returns (offset, value) pairs and the position."""
    position = start
    out: list[tuple[int, bytes]] = []
    while True:
        buf, aborted = log.fetch(position, isolation, max_batches)
        if not buf:
            return out, position
        records = PartitionRecords(TP, position, buf, isolation_level=isolation, aborted_transactions=aborted)
        while not records.exhausted:
            taken = records.take(chunk)
            out += [(r.offset, r.value) for r in taken]
            position = records.next_fetch_offset
        if position == records.fetch_offset:
            return out, position


def test_committed_txn_is_returned_and_markers_never_are() -> None:
    log = Log()
    log.data([b"a", b"b"], pid=1)
    log.end(1, commit=True)
    out, position = read_all(log, RC)
    assert out == [(0, b"a"), (1, b"b")]
    assert position == 3  # past the COMMIT marker


def test_aborted_txn_is_skipped_and_position_moves_past_it() -> None:
    log = Log()
    log.data([b"x1", b"x2"], pid=1)
    log.data([b"plain"])
    log.end(1, commit=False)
    log.data([b"after"])
    out, position = read_all(log, RC)
    assert out == [(2, b"plain"), (4, b"after")]
    assert position == 5


def test_read_uncommitted_returns_aborted_records_but_no_markers() -> None:
    log = Log()
    log.data([b"x"], pid=1)
    log.end(1, commit=False)
    out, position = read_all(log, RU)
    assert out == [(0, b"x")]
    assert position == 2


def test_read_committed_holds_records_behind_open_txn() -> None:
    log = Log()
    log.data([b"c0"])
    log.data([b"open"], pid=7)
    log.data([b"c2"])
    out, position = read_all(log, RC)
    assert out == [(0, b"c0")] and position == 1
    log.end(7, commit=True)
    more, position = read_all(log, RC, start=position)
    assert more == [(1, b"open"), (2, b"c2")] and position == 4


def test_producer_aborting_then_committing_is_tracked_per_transaction() -> None:
    log = Log()
    log.data([b"bad"], pid=1)
    log.end(1, commit=False)
    log.data([b"good"], pid=1)
    log.data([b"other-bad"], pid=2)
    log.end(1, commit=True)
    log.end(2, commit=False)
    out, _ = read_all(log, RC)
    assert out == [(2, b"good")]


def test_records_before_the_position_in_the_first_batch_are_dropped() -> None:
    log = Log()
    log.data([b"r0", b"r1", b"r2", b"r3"])
    out, position = read_all(log, RU, start=2)
    assert out == [(2, b"r2"), (3, b"r3")] and position == 4


def test_take_stops_at_max_records_and_resumes_in_order() -> None:
    log = Log()
    log.data([b"a", b"b", b"c"], pid=1)
    log.end(1, commit=True)
    buf, aborted = log.fetch(0, RC)
    records = PartitionRecords(TP, 0, buf, isolation_level=RC, aborted_transactions=aborted)
    assert [r.value for r in records.take(2)] == [b"a", b"b"]
    assert records.next_fetch_offset == 2 and not records.exhausted
    assert [r.value for r in records.take(2)] == [b"c"]
    assert records.next_fetch_offset == 4 and records.exhausted


def test_trailing_partial_batch_is_ignored() -> None:
    log = Log()
    log.data([b"a"])
    log.data([b"b"])
    buf, _ = log.fetch(0, RU)
    records = PartitionRecords(TP, 0, buf[:-5], isolation_level=RU)
    assert [r.value for r in records.take(10)] == [b"a"]
    assert records.next_fetch_offset == 1


# ---------------------------------------------------------------- the property

ops = st.lists(st.tuples(st.sampled_from(["data", "data", "plain", "commit", "abort"]),
                         st.integers(min_value=1, max_value=3),
                         st.integers(min_value=1, max_value=3)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops=ops, chunk=st.integers(min_value=1, max_value=7), max_batches=st.integers(min_value=1, max_value=6))
def test_read_committed_returns_exactly_the_committed_records_in_order(ops, chunk: int, max_batches: int) -> None:
    log = Log()
    committed_offsets: list[int] = []
    pending: dict[int, list[int]] = {}
    counter = 0
    for op, pid, count in ops:
        if op == "plain":
            committed_offsets += range(log.next_offset, log.next_offset + count)
            log.data([b"p%d" % (counter + i) for i in range(count)])
        elif op == "data":
            pending.setdefault(pid, []).extend(range(log.next_offset, log.next_offset + count))
            log.data([b"t%d" % (counter + i) for i in range(count)], pid=pid)
        elif pid in log.open_txns:
            offsets = pending.pop(pid, [])
            if op == "commit":
                committed_offsets += offsets
            log.end(pid, commit=op == "commit")
        counter += count

    out, position = read_all(log, RC, chunk=chunk, max_batches=max_batches)
    offsets = [o for o, _ in out]
    visible = sorted(o for o in committed_offsets if o < log.lso)
    assert offsets == visible  # exactly the committed records below the LSO, in offset order
    assert not {v for _, v in out} & log.bad_values  # never an aborted record
    open_offsets = {o for offs in pending.values() for o in offs}
    assert not set(offsets) & open_offsets  # never a record of an open transaction
    assert position == log.lso  # every batch below the LSO was consumed, markers included
