"""The .snapshot codec: round trips, and every damage is detected rather than loaded."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partitions.producer_snapshot import (
    CorruptSnapshotError,
    PartitionStateSnapshot,
    decode,
    encode,
    parse_snapshot_name,
    snapshot_name,
)
from partitions.producer_state import RETAINED_BATCHES, BatchMetadata, ProducerEntry
from partitions.txn_index import AbortedTxn

OFFSET = 10_000
int32 = st.integers(-1, 2**31 - 1)
offsets = st.integers(0, OFFSET - 1)
batches = st.builds(BatchMetadata, int32, int32, offsets, offsets, st.integers(-1, 2**62))
producers = st.builds(ProducerEntry, st.integers(0, 2**62), st.integers(-1, 2**15 - 1),
                      st.lists(batches, max_size=RETAINED_BATCHES).map(tuple), int32,
                      st.integers(-1, 2**62), st.none() | offsets)


@st.composite
def snapshots(draw: st.DrawFn) -> PartitionStateSnapshot:
    entries = draw(st.lists(producers, max_size=8, unique_by=lambda entry: entry.producer_id))
    markers = sorted(draw(st.sets(offsets, max_size=6)))
    aborted = tuple(AbortedTxn(draw(st.integers(0, 99)), draw(offsets), marker, draw(offsets)) for marker in markers)
    return PartitionStateSnapshot(OFFSET, tuple(entries), aborted)


@given(snapshots())
def test_a_snapshot_decodes_to_what_was_encoded(snapshot):
    assert decode(encode(snapshot)) == snapshot


@given(snapshots(), st.data())
def test_any_flipped_bit_or_cut_is_rejected(snapshot, data):
    raw = encode(snapshot)
    position = data.draw(st.integers(0, len(raw) - 1))
    flipped = bytearray(raw)
    flipped[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptSnapshotError):
        decode(bytes(flipped))
    with pytest.raises(CorruptSnapshotError):
        decode(raw[:position])


def test_state_at_or_past_the_snapshot_offset_is_rejected():
    late = ProducerEntry(1, 0, (), 0, 0, txn_first_offset=OFFSET)
    with pytest.raises(CorruptSnapshotError, match="at or past offset"):
        decode(encode(PartitionStateSnapshot(OFFSET, (late,), ())))


def test_file_names_carry_the_offset():
    assert snapshot_name(12345, 3) == "00000000000000012345-e3.snapshot"
    assert parse_snapshot_name("00000000000000012345-e3.snapshot") == (12345, 3)
    assert parse_snapshot_name("00000000000000012345.snapshot") == (12345, None)  # written before epochs
    assert parse_snapshot_name("00000000000000012345.log") is None
    assert parse_snapshot_name("txn-snapshot") is None


def test_a_field_too_wide_for_the_format_is_a_value_error():
    wide = ProducerEntry(1, 1 << 15, (), 0, 0, None)
    with pytest.raises(ValueError, match="cannot encode"):
        encode(PartitionStateSnapshot(OFFSET, (wide,), ()))
