"""A batch whose CRC is valid but whose records a consumer could not decode is CORRUPT_MESSAGE at append."""
from __future__ import annotations

import functools
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitions import AppendOrigin, framing, validation
from partitions.validation import framing_problem
from proto import records
from proto.errors import CorruptMessageError
from proto.records import HEADER_SIZE, iter_batches
from tests.helpers import damage_records


def with_valid_crc(batch: bytearray) -> bytes:
    """Fix batchLength and the CRC after an edit: only the framing is wrong, as a buggy producer makes it."""
    struct.pack_into(">i", batch, 8, len(batch) - records.LOG_OVERHEAD)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def one_record_batch(value: bytes = b"abc") -> bytearray:
    return bytearray(records.encode_batch([(1, b"k", value, (("h", b"1"),))]))


def damaged_batches() -> dict[str, bytes]:
    value_length_at = HEADER_SIZE + 6  # after length, attributes, timestamp delta, offset delta, key length, b"k"
    shorter_value = one_record_batch()
    assert shorter_value[value_length_at] == 6  # zigzag(3)
    shorter_value[value_length_at] = 4           # claims 2 bytes: the fields end before the record does
    two_counted = one_record_batch()
    struct.pack_into(">i", two_counted, 23, 1)  # lastOffsetDelta
    struct.pack_into(">i", two_counted, 57, 2)  # recordsCount: one record fewer than claimed
    trailing = one_record_batch() + b"\x7f\x00garbage"
    cut = one_record_batch()[:-3]
    huge_length = one_record_batch()
    huge_length[HEADER_SIZE] = 0x7E             # the record claims 63 bytes
    wrong_delta = bytearray(records.encode_batch([(1, None, b"a", ()), (1, None, b"b", ())]))
    second_delta_at = HEADER_SIZE + 8 + 3  # the first record is 8 bytes; then length, attributes, timestamp
    assert wrong_delta[second_delta_at] == 2    # zigzag(1): the second record's offset delta
    wrong_delta[second_delta_at] = 0
    # lengths and counts no 64-bit index can hold (a 10-byte varint): the compiled walk indexes with 64-bit
    # integers, so it must refuse them before a position grows past the record
    beyond_i64 = b"\x80" * 9 + b"\x02"  # zigzag value 2**64: the field claims 2**63 bytes
    key_beyond = _raw_record_batch(b"\x00\x00\x00" + beyond_i64 + b"\x01\x00")
    headers_beyond = _raw_record_batch(b"\x00\x00\x00\x01\x01" + beyond_i64)
    header_value_beyond = _raw_record_batch(b"\x00\x00\x00\x01\x01\x02\x02h" + beyond_i64)
    return {name: with_valid_crc(batch) for name, batch in [
        ("shorter value", shorter_value), ("count", two_counted), ("trailing garbage", trailing),
        ("truncated record", cut), ("record longer than batch", huge_length), ("offset delta", wrong_delta),
        ("key length beyond 64 bits", key_beyond), ("header count beyond 64 bits", headers_beyond),
        ("header value length beyond 64 bits", header_value_beyond)]}


def _raw_record_batch(fields: bytes) -> bytearray:
    """One record of these raw fields (attributes onwards) behind a valid batch header."""
    assert len(fields) < 64
    return one_record_batch()[:HEADER_SIZE] + bytearray([len(fields) << 1]) + fields


@pytest.mark.parametrize("name", sorted(damaged_batches()))
def test_a_crc_valid_batch_with_broken_framing_is_corrupt_and_changes_nothing(open_log, name):
    log = open_log()
    log.append(records.encode_batch([(1, None, b"before", ())]))
    damaged = damaged_batches()[name]
    (_batch,) = iter_batches(damaged)  # the CRC really is valid
    with pytest.raises(CorruptMessageError, match="CORRUPT_MESSAGE"):
        log.append(damaged)
    assert log.log_end_offset == 1
    log.append(records.encode_batch([(1, None, b"after", ())]))
    assert [r.value for b in log.batches() for r in b.records()] == [b"before", b"after"]


def test_the_node_does_not_walk_its_own_coordinator_batches(open_log):
    damaged = damaged_batches()["count"]
    log = open_log()
    with pytest.raises(CorruptMessageError):
        log.append(damaged)
    log.append(damaged, origin=AppendOrigin.COORDINATOR)  # built by the node itself: trusted, as before


_header = st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=20)))
_record = st.tuples(st.integers(0, 10**6), st.one_of(st.none(), st.binary(max_size=300)),
                    st.one_of(st.none(), st.binary(max_size=300)), st.lists(_header, max_size=3))


@settings(max_examples=200, deadline=None)
@given(st.lists(_record, min_size=1, max_size=40))
def test_every_batch_the_encoder_builds_passes_the_framing_walk(batch_records):
    raw = records.encode_batch([(ts, k, v, tuple(h)) for ts, k, v, h in batch_records])
    (batch,) = iter_batches(raw)
    assert framing_problem(batch.raw, batch.header.records_count) is None
    assert len(list(batch.records())) == len(batch_records)


interpreted_framing_problem = functools.cache(validation.framing_problem_from_source)


def test_setup_compiled_the_framing_check_and_the_node_uses_it():
    # scripts/setup.sh builds it with mypyc; where no C compiler was at hand this says why produce is slower
    assert validation.FRAMING_COMPILED, f"{framing.__file__} is not the mypyc build: run bash scripts/setup.sh"
    assert validation.framing_problem is framing.framing_problem
    assert framing.RECORDS_START == HEADER_SIZE


@settings(max_examples=300, deadline=None)
@given(st.lists(_record, min_size=1, max_size=12), st.data())
def test_the_compiled_check_answers_as_its_source_does_on_damaged_batches(batch_records, data):
    raw = bytearray(records.encode_batch([(ts, k, v, tuple(h)) for ts, k, v, h in batch_records]))
    raw = bytearray(damage_records(raw, data))
    claimed = data.draw(st.sampled_from([len(batch_records), len(batch_records) + 1, max(len(batch_records) - 1, 0)]))
    assert validation.framing_problem(bytes(raw), claimed) == interpreted_framing_problem()(bytes(raw), claimed)
